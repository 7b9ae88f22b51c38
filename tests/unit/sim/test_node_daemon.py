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


def test_a_store_never_used_is_fine_and_the_mark_is_in_the_nodes_own_folder(tmp_path):
    p = node_daemon.paths(str(tmp_path), "sim-head")
    node_daemon.quiet_former_containers(p)  # no containers folder yet
    assert p["attached"].startswith(os.path.join(str(tmp_path), "nodes", "sim-head") + os.sep)  # removed with the node
