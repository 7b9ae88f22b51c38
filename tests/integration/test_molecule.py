"""Molecule on the simulated cluster: create (sim_cluster role), converge (serve.yml), idempotence,
verify (default: pytest-testinfra on each node over SSH against the plan, then the endpoint and teardown; mp: the
Ansible verifier), destroy."""

import pytest

from runner import run


@pytest.mark.slow
# The mp backend's scenario (no seed runs it; 3.8 min) runs in make test-extended, to keep make test in its budget.
@pytest.mark.parametrize("scenario", ["default", pytest.param("mp", marks=pytest.mark.extended)])
def test_molecule_scenario(scenario):
    rc, out = run("molecule-" + scenario, ["molecule", "test", "-s", scenario], timeout=2400, tail=200)
    details = out.split("DETAILS")[-1]
    # each of the 7 actions says it succeeded (molecule's recap does not count a passing testinfra verifier)
    assert details.count("Executed: Successful") == 7 and "verify: Executed: Successful" in details, details
    assert "actions=7" in out and "failed=0" in out and "missing=0" in out
