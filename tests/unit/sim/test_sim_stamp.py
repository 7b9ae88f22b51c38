"""When sim.yml may run only the traps (roles/sim_cluster/files/sim_stamp.py): the cluster stands as the last run that
succeeded left it, and the run asks for no power cycle and the same node traps. Docker is not asked here: what stands is
given as `docker inspect` would have answered."""

import importlib.util
import json
import os

import pytest

from helpers import ROOT

SPEC = importlib.util.spec_from_file_location("sim_stamp", os.path.join(ROOT, "roles", "sim_cluster", "files", "sim_stamp.py"))
stamp = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(stamp)

RUNNING = {"sim-head": ["h1", "2026-11-27T09:23:19Z", 101], "sim-worker1": ["w1", "2026-11-27T09:23:30Z", 102],
           "dgx-spark-sim-hub": ["b1", "2026-11-27T09:23:37Z", 103]}
IMAGES = {"dgx-spark-sim/runtime:sim": "sha256:r1", "dgx-spark-sim/node:abc": "sha256:n1"}


@pytest.fixture(name="cluster")
def fixture_cluster(tmp_path, monkeypatch):
    role, inventory, state = tmp_path / "role", tmp_path / "inventory", tmp_path / "state"
    for folder in (role, inventory, inventory / ".secrets", state, state / "sys"):
        folder.mkdir()
    (role / "main.yml").write_text("tasks\n")
    (inventory / "hosts.yml").write_text("hosts\n")
    (inventory / ".secrets" / "vllm_api_key").write_text("a key a serve made\n")
    (state / "sim_ssh_ed25519").write_text("the controller's key\n")
    (state / "sys" / "gid").write_text("fe80::1\n")
    os.symlink("gid", str(state / "sys" / "link"))
    inputs = {"recipe": [str(role)], "inventory": [str(inventory)], "settings": {"sim": ["8000"]},
              "state": [str(state / "sim_ssh_ed25519"), str(state / "sys")], "nodes": ["sim-head", "sim-worker1"],
              "head": "sim-head", "hub": "dgx-spark-sim-hub", "sockets": {"sim-head": "/h.sock", "sim-worker1": "/w.sock"},
              "traps": {}, "reboot": [], "images": {"here": list(IMAGES), "head": ["dgx-spark-sim/runtime:sim"]},
              "named": {"node_image": "dgx-spark-sim/node:abc"}}
    now = {"running": dict(RUNNING), "images": dict(IMAGES), "answers": True}
    monkeypatch.setattr(stamp, "containers", lambda names: {n: c for n, c in now["running"].items() if n in names})
    monkeypatch.setattr(stamp, "images", lambda refs, socket=None: {r: i for r, i in now["images"].items() if r in refs})
    monkeypatch.setattr(stamp, "answers", lambda socket: now["answers"])
    path = str(tmp_path / "nodes" / "stamp.json")

    def record(traps=None):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(stamp.standing(dict(inputs, traps=traps or {})), handle)

    return {"inputs": inputs, "now": now, "path": path, "record": record, "role": role, "inventory": inventory, "state": state}


def test_a_cluster_as_the_last_run_left_it_runs_only_the_traps_and_the_record_is_used_once(cluster):
    cluster["record"]({"foreign_port": {"sim-head": 8100}})
    found = stamp.check(cluster["path"], dict(cluster["inputs"], traps={"page_cache": {"sim-worker1": 70}}))
    assert found == {"up": True, "images_up": True, "why": "as the last run left it", "traps": {"foreign_port": {"sim-head": 8100}},
                     "pids": {"sim-head": 101, "sim-worker1": 102}, "recipe": stamp.recipe_digest(cluster["inputs"]),
                     "images": {"here": sorted(IMAGES), "head": ["dgx-spark-sim/runtime:sim"]},
                     "named": {"node_image": "dgx-spark-sim/node:abc"}}
    # Read once: a run that fails before it records again leaves no record, and the next one checks everything.
    assert not os.path.exists(cluster["path"])
    assert stamp.check(cluster["path"], cluster["inputs"])["why"] == "no record of a run that succeeded"


def test_check_mode_keeps_the_record(cluster):
    cluster["record"]()
    assert stamp.check(cluster["path"], cluster["inputs"], keep=True)["up"] and os.path.exists(cluster["path"])


def test_the_record_keeps_the_recipe_its_check_saw_not_one_edited_during_the_run(cluster):
    before = stamp.recipe_digest(cluster["inputs"])
    (cluster["role"] / "main.yml").write_text("edited while the run ran\n")
    cluster["inputs"]["digest"] = before
    cluster["record"]()
    assert stamp.check(cluster["path"], cluster["inputs"])["why"].startswith("the recipe changed")


# What changed, why, and whether the images, the models and the hub still stand (only the nodes' steps run).
CHANGES = [
    (lambda c: c["inputs"].update(reboot=["sim-worker1"]), "nodes to power-cycle", True),
    (lambda c: c["inputs"].update(traps={"gid_drift": ["sim-head"]}), "node traps change", True),
    (lambda c: c["inputs"].update(traps={"cable_swap": ["sim-head"]}), "node traps change", True),
    (lambda c: (c["role"] / "main.yml").write_text("other tasks\n"), "the recipe changed", False),
    (lambda c: (c["inventory"] / "hosts.yml").write_text("other hosts\n"), "the recipe changed", False),
    (lambda c: c["inputs"].update(settings={"sim": ["8001"]}), "the recipe changed", False),  # -e sim_cluster_endpoint_port=8001
    (lambda c: c["now"]["running"].update({"sim-worker1": ["w1", "2026-11-27T10:00:00Z", 202]}), "a node was restarted", True),
    (lambda c: c["now"]["running"].pop("dgx-spark-sim-hub"), "the hub or the registry was restarted", False),
    (lambda c: os.unlink(str(c["state"] / "sim_ssh_ed25519")), "a key, the known hosts", True),  # a clean clone, the nodes up
    (lambda c: (c["state"] / "sys" / "gid").write_text("fe80::2\n"), "a key, the known hosts", True),
    (lambda c: os.unlink(str(c["state"] / "sys" / "link")), "a key, the known hosts", True),
    (lambda c: c["now"]["images"].update({"dgx-spark-sim/node:abc": "sha256:n2"}), "an image here changed", False),
    (lambda c: c["now"].update(answers=False), "a node's Docker daemon does not answer", True),
]


@pytest.mark.parametrize("change,why,images_up", CHANGES)
def test_anything_else_runs_the_nodes_steps_or_every_step(cluster, change, why, images_up):
    cluster["record"]()
    change(cluster)
    found = stamp.check(cluster["path"], cluster["inputs"])
    assert not found["up"] and found["why"].startswith(why) and found["traps"] is None, found
    assert found["images_up"] is images_up
    assert found["named"] == ({"node_image": "dgx-spark-sim/node:abc"} if images_up else None)  # the node image to start
    assert found["recipe"] == stamp.recipe_digest(cluster["inputs"])  # what the run records once it succeeds


def test_a_record_that_can_not_be_compared_runs_every_step(cluster, monkeypatch):
    cluster["record"]()

    def hung(names):
        raise stamp.subprocess.TimeoutExpired(["docker"], 60)

    monkeypatch.setattr(stamp, "containers", hung)
    found = stamp.check(cluster["path"], cluster["inputs"])
    assert not found["up"] and found["why"].startswith("the record could not be compared (TimeoutExpired")


def test_the_traps_a_full_run_takes_back_keep_it_full_until_they_are_gone(cluster):
    cluster["record"]({"no_infiniband": ["sim-worker1"]})
    assert stamp.check(cluster["path"], cluster["inputs"])["why"] == "node traps change"  # taken back by node.yml
    cluster["record"]({"no_infiniband": ["sim-worker1"]})
    assert stamp.check(cluster["path"], dict(cluster["inputs"], traps={"no_infiniband": ["sim-worker1"]}))["up"]


def test_what_runs_write_in_the_inventory_is_not_its_recipe(cluster):
    cluster["record"]()
    (cluster["inventory"] / ".secrets" / "vllm_api_key").write_text("another key\n")
    os.makedirs(str(cluster["inventory"] / ".artifacts"))
    (cluster["inventory"] / ".artifacts" / "plan.json").write_text("{}\n")
    assert stamp.check(cluster["path"], cluster["inputs"])["up"]


def test_devices_and_sockets_are_named_never_opened(tmp_path):
    os.mkfifo(str(tmp_path / "fifo"))  # opening it would block
    first = stamp.files_digest([str(tmp_path)])
    assert first == stamp.files_digest([str(tmp_path)])
    os.unlink(str(tmp_path / "fifo"))
    assert stamp.files_digest([str(tmp_path)]) != first
