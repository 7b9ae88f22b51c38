#!/bin/sh
# dgx_spark.vllm simulated cluster: start Debian's docker-registry with TLS and a login.
#   registry_start.sh USER PORT
# /registry/tls (read-only): the server's certificate and key, made by the controller (tasks/registry.yml) from the
# simulation's CA; /registry/data: the images pushed; the login's htpasswd (bcrypt) is made at every start inside the
# container from /secrets/password, read from stdin, never an argument.
set -eu
user="$1"
port="$2"
umask 077
htpasswd -Bci /tmp/htpasswd "$user" < /secrets/password 2>/dev/null
cat > /tmp/config.yml <<CONFIG
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: /registry/data
http:
  addr: :$port
  tls:
    certificate: /registry/tls/server.crt
    key: /registry/tls/server.key
auth:
  htpasswd:
    realm: dgx-spark-sim-registry
    path: /tmp/htpasswd
CONFIG
exec /usr/bin/docker-registry serve /tmp/config.yml
