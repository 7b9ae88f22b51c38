"""Molecule on the simulated cluster: create (sim_cluster role), converge (serve.yml), idempotence,
verify (default: pytest-testinfra on each node over SSH against the plan, then the endpoint and teardown; mp: the
Ansible verifier), destroy."""

import pytest

from runner import run


@pytest.mark.slow
# Both scenarios (default 5 min, mp 3.8 min) run in make test-extended, to keep make test in its budget: make test serves,
# re-runs and checks every node on the same simulated cluster in test_faults.py.
@pytest.mark.extended
@pytest.mark.parametrize("scenario", ["default", "mp"])
def test_molecule_scenario(scenario):
    rc, out = run("molecule-" + scenario, ["molecule", "test", "-s", scenario], timeout=2400, tail=200)
    details = out.split("DETAILS")[-1]
    # each of the 7 actions says it succeeded (molecule's recap does not count a passing testinfra verifier)
    assert details.count("Executed: Successful") == 7 and "verify: Executed: Successful" in details, details
    assert "actions=7" in out and "failed=0" in out and "missing=0" in out
