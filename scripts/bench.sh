#!/usr/bin/env bash
# `make bench`: benchmarks that print figures (scripts/bench.py --help). Arguments go to bench.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python scripts/bench.py "$@"
