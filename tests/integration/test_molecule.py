"""Molecule on the simulated cluster: create (sim_cluster role), converge (serve.yml), idempotence,
verify as a user (completions, Ray, rank environments, teardown leaves nothing), destroy."""

import pytest

from runner import run


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["default", "mp"])
def test_molecule_scenario(scenario):
    rc, out = run("molecule-" + scenario, ["molecule", "test", "-s", scenario], timeout=2400, tail=200)
    assert "actions=7" in out and "successful=7" in out and "failed=0" in out
