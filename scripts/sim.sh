#!/usr/bin/env bash
# `make sim`: bring up the simulated cluster (playbooks/sim.yml), run the main job on it
# (playbooks/serve.yml, inventories/sim is the default inventory), then print the endpoint and one
# real completion from it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PWD/.venv/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg

ansible-playbook playbooks/sim.yml
ansible-playbook playbooks/serve.yml
python3 scripts/ask.py --inventory inventories/sim
