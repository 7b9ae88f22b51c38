#!/usr/bin/env bash
# ansible-test sanity for Python 3.11 on a copy of the collection under
# build/sanity/ansible_collections/dgx_spark/vllm (ansible-test needs that path and lists files
# through git). Extra arguments go to ansible-test (e.g. --test pylint).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$root/build/sanity
dest=$work/ansible_collections/dgx_spark/vllm
python=${SANITY_PYTHON:-3.11}

rm -rf "$work"
mkdir -p "$dest"
cd "$root"
git ls-files -co --exclude-standard | grep -v -e '^\.collections/' -e '^playbooks/collections/' | while read -r f; do [ -e "$f" ] && printf '%s\n' "$f"; done \
  | tar -cf - -T - | tar -xf - -C "$dest"
cd "$dest"
grep -qx 'tests/output/' .gitignore 2>/dev/null || echo 'tests/output/' >> .gitignore
git init -q && git add -A && git -c user.name=sanity -c user.email=sanity@localhost commit -qm sanity

# ansible-test bootstraps pip into each test venv with a script it downloads from a host this
# machine may not reach. The stand-in does the same with the interpreter's own ensurepip, then
# lets pip read this machine's configuration (index, CA bundle) again.
pip_version=$(python - <<'PY'
from types import SimpleNamespace
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(SimpleNamespace(version="3.11"))["pip"])
PY
)
stand_in=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [ ! -s "$stand_in" ]; then
  mkdir -p "$(dirname "$stand_in")"
  cat > "$stand_in" <<'PY'
"""Stand-in for get-pip.py, written by dgx_spark.vllm's scripts/sanity.sh: ensurepip, then pip install."""
import ensurepip
import os
import subprocess
import sys

ensurepip.bootstrap()
os.environ.pop("PIP_CONFIG_FILE", None)  # ensurepip points it at /dev/null, hiding the machine's pip config
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
PY
fi

exec ansible-test sanity --python "$python" --venv --color no "$@"
