"""A node made anew starts from a store holding images only (roles/sim_cluster/files/node_daemon.py): the containers a
former node left there (a run killed before `state=absent`) never start again. Read here on a store's folder as dockerd
keeps it; the removal through the node's daemon is proven by every integration module's first sim.yml."""

import importlib.util
import json
import os

from helpers import ROOT

SPEC = importlib.util.spec_from_file_location("node_daemon", os.path.join(ROOT, "roles", "sim_cluster", "files", "node_daemon.py"))
node_daemon = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(node_daemon)


def test_the_former_nodes_containers_lose_their_restart_policy_and_nothing_else(tmp_path):
    p = node_daemon.paths(str(tmp_path), "sim-worker1")
    left = {"a1": {"RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0}, "NetworkMode": "host"},
            "b2": {"RestartPolicy": {"Name": "on-failure", "MaximumRetryCount": 3}, "IpcMode": "host"}}
    for name, config in left.items():
        os.makedirs(os.path.join(p["data"], "containers", name))
        with open(os.path.join(p["data"], "containers", name, "hostconfig.json"), "w", encoding="utf-8") as handle:
            json.dump(config, handle)
    os.makedirs(os.path.join(p["data"], "containers", "c3"))  # a container folder without its config is left alone
    node_daemon.quiet_former_containers(p)
    for name, config in left.items():
        with open(os.path.join(p["data"], "containers", name, "hostconfig.json"), encoding="utf-8") as handle:
            assert json.load(handle) == dict(config, RestartPolicy={"Name": "no", "MaximumRetryCount": 0})
    assert os.listdir(os.path.join(p["data"], "containers", "c3")) == []


def test_the_store_is_claimed_once_per_node_made_anew_and_a_power_cycle_keeps_the_claim(tmp_path):
    """The mark goes with the node's folders (state=absent removes them); a power cycle keeps them, so the node's own
    containers are never taken for a former node's."""
    p = node_daemon.paths(str(tmp_path), "sim-head")
    os.makedirs(p["run"])
    node_daemon.quiet_former_containers(p)  # a store never used: nothing to quiet
    assert node_daemon.claim_store(p) is True  # made anew: its former containers go
    assert node_daemon.claim_store(p) is False  # started again (a power cycle, a daemon found answering): they stay
    assert os.path.dirname(p["attached"]) == p["run"] and p["run"].startswith(os.path.join(str(tmp_path), "nodes", "sim-head"))


def test_the_nodes_containers_get_a_low_cpu_weight_on_either_cgroup_version(tmp_path):
    # cgroup v1: a cpu hierarchy of its own, shares against a task's 1024; v2: one tree, cpu.weight against 100
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.shares").write_text("1024\n")
    no_systemd = str(tmp_path / "no-systemd")
    assert node_daemon.cpu_group("sim-head", str(v1), no_systemd) == "/dgx-spark-sim/sim-head"
    assert (v1 / "cpu" / "dgx-spark-sim" / "cpu.shares").read_text() == "128\n"
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    assert node_daemon.cpu_group("sim-worker1", str(v2), no_systemd) == "/dgx-spark-sim/sim-worker1"
    assert (v2 / "dgx-spark-sim" / "cpu.weight").read_text() == "12\n"


def test_no_parent_where_the_weight_cannot_be_set_or_docker_may_want_a_systemd_slice(tmp_path):
    no_systemd = str(tmp_path / "no-systemd")
    (tmp_path / "flat").mkdir()  # v1 without a cpu hierarchy
    assert node_daemon.cpu_group("sim-head", str(tmp_path / "flat"), no_systemd) is None
    assert not (tmp_path / "flat" / "cpu").exists()
    (tmp_path / "ro" / "cpu").mkdir(parents=True)
    (tmp_path / "ro" / "cpu" / "cpu.shares").write_text("1024\n")
    (tmp_path / "ro" / "cpu" / "dgx-spark-sim").write_text("not a folder")  # as a read-only or odd machine fails
    assert node_daemon.cpu_group("sim-head", str(tmp_path / "ro"), no_systemd) is None
    (tmp_path / "systemd").mkdir()
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu\n")
    assert node_daemon.cpu_group("sim-head", str(v2), str(tmp_path / "systemd")) is None
    assert not (v2 / "dgx-spark-sim").exists()
