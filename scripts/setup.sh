#!/usr/bin/env bash
# Set-up of a machine for this collection. Idempotent; every step is skipped when already done.
#   - .venv with the pinned Python requirements (requirements-dev.txt, which includes requirements-test.txt and requirements.txt)
#   - Docker (Debian's docker.io) with a running daemon, and debootstrap for the simulated cluster
#   - Grafana's published dashboard types and TypeScript (tests/static/grafana-schema, from its lock file)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }

python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$python is $("$python" -V 2>&1); ansible-core 2.19 needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)"

# 1. Python virtualenv with pinned requirements; reinstalled only when a requirements file changes.
want=$(cat requirements.txt requirements-test.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$python" -m venv .venv
fi
if [ "$(cat .venv/.requirements.sha256 2>/dev/null)" != "$want" ]; then
  say "installing pinned Python requirements into .venv"
  .venv/bin/python -m pip install --quiet -r requirements-dev.txt
  echo "$want" > .venv/.requirements.sha256
else
  say ".venv is up to date"
fi

# 2. System packages: docker.io (client and daemon), debootstrap (base image of the simulated cluster), the SSH client.
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)       # Ansible reaches the simulated nodes over SSH
command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-client)
command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)       # each simulated node's Docker daemon in its namespaces
command -v npm >/dev/null 2>&1 || missing+=(npm)                  # Grafana's dashboard types, for the dashboard's schema check
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    die "missing ${missing[*]}; install them as root: apt-get install -y ${missing[*]}"
  fi
  say "installing ${missing[*]} from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 3. A Docker daemon that answers.
if docker info >/dev/null 2>&1; then
  say "docker daemon answers"
else
  [ "$(id -u)" -eq 0 ] || die "no Docker daemon answers and this is not root: start one (sudo systemctl start docker), or add your user to the docker group"
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    say "starting docker with systemctl"
    systemctl start docker || true
  fi
  if ! docker info >/dev/null 2>&1; then
    # A machine restored from a snapshot keeps the pid files of daemons that no longer run, and dockerd
    # (and its containerd) refuse to start beside a pid file: remove only those whose process is gone.
    for pidfile in /var/run/docker.pid /run/docker/containerd/containerd.pid; do
      if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; then
        say "removing $pidfile: its process $(cat "$pidfile" 2>/dev/null) no longer runs"
        rm -f "$pidfile"
      fi
    done
    say "starting dockerd in the background (log: /var/log/dockerd.log)"
    nohup dockerd >/var/log/dockerd.log 2>&1 &
  fi
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || die "dockerd did not answer within 60 s; see /var/log/dockerd.log"
  say "docker daemon answers"
fi

# 4. Grafana's dashboard types and the compiler that checks the shipped dashboard against them (tests/static/
#    test_dashboard.py), exactly as the lock file names them; again only when the lock file changes.
schema=tests/static/grafana-schema
want=$(sha256sum "$schema/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$schema/node_modules/.lock.sha256" 2>/dev/null)" != "$want" ]; then
  say "installing Grafana's dashboard types into $schema"
  (cd "$schema" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$want" > "$schema/node_modules/.lock.sha256"
else
  say "$schema is up to date"
fi
