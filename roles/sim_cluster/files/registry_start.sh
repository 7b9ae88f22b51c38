#!/bin/sh
# dgx_spark.vllm simulated cluster: start Debian's docker-registry with TLS and a login.
#   registry_start.sh ADDRESS USER PORT
# /registry (kept on the machine between runs): tls/ the simulation's CA (ca.crt, which each node trusts in
# /etc/docker/certs.d/ADDRESS:PORT/) and the server's certificate for ADDRESS, made once; auth/htpasswd, made at
# every start from /secrets/password (read from stdin, never an argument); data/ the images pushed.
set -eu
address="$1"
user="$2"
port="$3"
umask 077
mkdir -p /registry/tls /registry/auth /registry/data
cd /registry/tls
if [ ! -s ca.crt ] || [ ! -s server.crt ] || ! openssl x509 -checkend 86400 -noout -in server.crt >/dev/null 2>&1; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=dgx-spark-sim registry CA" \
    -keyout ca.key -out ca.crt 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$address" -keyout server.key -out server.csr 2>/dev/null
  printf 'subjectAltName=IP:%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n' \
    "$address" > server.ext
  openssl x509 -req -days 3650 -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -extfile server.ext -out server.crt 2>/dev/null
  chmod 0644 ca.crt
fi
htpasswd -Bci /registry/auth/htpasswd "$user" < /secrets/password 2>/dev/null
cat > /tmp/config.yml <<CONFIG
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: /registry/data
  delete:
    enabled: true
http:
  addr: :$port
  tls:
    certificate: /registry/tls/server.crt
    key: /registry/tls/server.key
auth:
  htpasswd:
    realm: dgx-spark-sim-registry
    path: /registry/auth/htpasswd
CONFIG
exec /usr/bin/docker-registry serve /tmp/config.yml
