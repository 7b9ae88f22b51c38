"""The released collection on the simulated cluster: plan.yml by FQCN from the installed tarball (tests/release.py:
built from a clean copy of the checkout, installed into an empty collections path), run from a folder outside the
checkout against inventories/sim, as a user of the tarball runs it. The simulation's profiles do not ship, so the
inventory's sim_tiny comes from a profile folder of the user's own (vllm_profile_dirs), here the checkout's profiles/.
tests/static/test_release_tarball.py checks the tarball itself."""

import json
import os

import pytest

from release import build_and_install
from runner import ROOT, recap, run

pytestmark = pytest.mark.slow

SIM = os.path.join(ROOT, "inventories", "sim")


@pytest.fixture(scope="module", name="installed")
def fixture_installed(tmp_path_factory):
    run("release-sim-up", ["ansible-playbook", "playbooks/sim.yml"], timeout=1800)
    yield build_and_install(tmp_path_factory.mktemp("release"))


def test_plan_runs_by_fqcn_from_the_installed_tarball(installed):
    assert not os.path.exists(os.path.join(installed["installed"], "profiles", "sim_tiny.yml"))
    plan_json = os.path.join(SIM, ".artifacts", "plan.json")
    if os.path.exists(plan_json):
        os.remove(plan_json)  # plan.yml writes it again (the report plugin leaves an equal file alone)
    # The checkout's ansible.cfg is not read: the simulated nodes' host keys are new with each node, as it sets.
    env = dict(installed["env"], ANSIBLE_HOST_KEY_CHECKING="False")
    rc, out = run("release-plan", ["ansible-playbook", "dgx_spark.vllm.plan", "-i", SIM,
                                   "-e", json.dumps({"vllm_profile_dirs": [os.path.join(ROOT, "profiles")]})],
                  cwd=str(installed["work"]), env=env, timeout=900)
    hosts = recap(out)
    assert set(hosts) >= {"sim-head", "sim-worker1"}, out[-2000:]
    assert all(h["failed"] == 0 and h["unreachable"] == 0 for h in hosts.values()), hosts
    with open(plan_json, encoding="utf-8") as handle:
        plan = json.load(handle)
    assert plan["ok"] and plan["stage"] == "full", plan.get("errors")
    for deployment in plan["deployments"].values():
        assert deployment["profile"] == "sim_tiny" and deployment["nodes_order"] == ["sim-head", "sim-worker1"]
