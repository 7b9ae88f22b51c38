# dgx_spark.vllm — every entry point a developer or CI needs.
#   make sim     set up, bring up the simulated cluster and run playbooks/serve.yml on it
#   make test    set up, then every test layer: units, static checks, the scenarios on the simulated cluster
#   make fast    units and lint (the inner loop)
#   make test-extended  the scenarios beyond make test's time budget (marker extended: the rings, faults, two models)
#   make docs    docs/inventory.md's tables from the roles' argument specs
SHELL := /bin/bash
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_FORCE_COLOR ?= 0
PYTEST := $(VENV)/bin/pytest

.PHONY: setup sim sim-down test test-extended fast unit lint sanity build integration molecule bench reliability docs clean

setup:
	@bash scripts/setup.sh

sim: setup
	@bash scripts/sim.sh

sim-down: setup
	ansible-playbook playbooks/teardown.yml
	ansible-playbook playbooks/sim.yml -e sim_state=absent

# The whole pyramid, fast to slow; pytest prints one summary line at the end.
test: setup
	$(PYTEST) -m "not extended" --durations=40 tests/unit tests/static tests/integration

test-extended: setup
	$(PYTEST) -m extended --durations=20 tests/integration

fast: setup
	$(PYTEST) tests/unit tests/static -m "not slow"

unit: setup
	$(PYTEST) tests/unit

lint: setup
	$(PYTEST) tests/static -k "lint"

sanity: setup
	$(PYTEST) tests/static -k "sanity"

# the release tarball built, installed and used by FQCN (docs/release.md), and the execution environment rendered
build: setup
	$(PYTEST) tests/static -k "release_tarball or ansible_builder"

integration: setup
	$(PYTEST) -m "not extended" tests/integration

# molecule's scenarios (default, mp) on the simulated cluster; they are part of make test-extended
molecule: setup
	$(PYTEST) -m "extended or not extended" tests/integration/test_molecule.py

bench: setup
	@bash scripts/bench.sh $(BENCH)

# docs/reliability.md from the rows the last test run recorded (tests/output/reliability.jsonl)
reliability:
	$(VENV)/bin/python scripts/reliability_table.py

# docs/inventory.md's tables from roles/*/meta/argument_specs.yml (tests/static/test_inventory_doc.py fails when stale)
docs:
	$(VENV)/bin/python scripts/inventory_doc.py

clean:
	rm -rf build tests/output .pytest_cache dgx_spark-vllm-*.tar.gz
