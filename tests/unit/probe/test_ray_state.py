"""ray_state: Ray cluster facts from captured probe outputs of a real two-node cluster."""

import json

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import ray_state as rs

from helpers import read_fixture


def state(name, **expect):
    data = rs.parse_probe_output(0, read_fixture("ray", name), "", "dgx-spark-ray-head")
    return rs.evaluate(rs.summarize(data), **expect)


def test_two_nodes_one_gpu_each_is_ready():
    s = state("two-nodes.json", expected_nodes=2, expected_gpus=2, expected_ips=["172.28.0.10", "172.28.0.11"])
    assert s["ready"] is True and s["reasons"] == []
    assert s["version"] == "2.60.0"
    assert s["alive_count"] == 2 and s["gpu_total"] == 2.0
    assert [n["node_ip"] for n in s["alive_nodes"]] == ["172.28.0.10", "172.28.0.11"]
    assert s["alive_nodes"][0]["is_head"] is True and s["alive_nodes"][1]["is_head"] is False
    assert s["dead_nodes"] == []


def test_one_of_two_names_the_missing_node():
    s = state("one-of-two.json", expected_nodes=2, expected_gpus=2, expected_ips=["172.28.0.10", "172.28.0.11"])
    assert s["ready"] is False
    assert s["missing_ips"] == ["172.28.0.11"]
    assert s["reasons"] == ["missing nodes: 172.28.0.11", "1 of 2 nodes alive", "1 of 2 GPUs"]


def test_dead_node_is_reported_and_not_counted():
    s = state("one-dead.json", expected_nodes=2, expected_ips=["172.28.0.10", "172.28.0.11"])
    assert s["alive_count"] == 1 and s["gpu_total"] == 1.0
    assert [n["node_ip"] for n in s["dead_nodes"]] == ["172.28.0.11"]
    assert s["missing_ips"] == ["172.28.0.11"]


def test_rejoined_node_is_alive_and_its_old_entry_dropped():
    s = state("rejoined.json", expected_nodes=2, expected_ips=["172.28.0.10", "172.28.0.11"])
    raw = json.loads(read_fixture("ray", "rejoined.json"))
    assert len(raw["nodes"]) == 3  # Ray still lists the dead incarnation
    assert s["ready"] is True and s["dead_nodes"] == []


def test_unexpected_ip_is_reported():
    s = state("two-nodes.json", expected_ips=["172.28.0.10"])
    assert s["unexpected_ips"] == ["172.28.0.11"] and s["ready"] is True


def test_without_expectations_any_state_is_ready():
    assert state("one-of-two.json")["ready"] is True


def test_not_running_says_how_to_start_it():
    with pytest.raises(rs.RayStateError, match="Ray is not running on node1: ConnectionError: Could not find any running Ray instance"):
        rs.parse_probe_output(0, read_fixture("ray", "not-running.json"), "", "node1")


@pytest.mark.parametrize("capture,message", [
    ("run-no-container.json", "container dgx-spark-ray-nosuch does not exist"),
    ("run-unreachable.json", "no answer from Ray at 172.28.0.99:6379 on dgx-spark-ray-nosuch within 4 s"),
    ("run-not-running.json", "Ray is not running on dgx-spark-ray-nosuch"),
])
def test_captured_failures(capture, message):
    run = json.loads(read_fixture("ray", capture))
    address = run["argv_tail"]
    with pytest.raises(rs.RayStateError, match=message):
        rs.parse_probe_output(run["rc"], run["stdout"], run["stderr"], "dgx-spark-ray-nosuch", address, 4)


def test_ray_client_address_is_refused():
    with pytest.raises(rs.RayStateError, match="Ray Client address.*single-GPU"):
        rs.validate_address("ray://10.0.0.1:10001")
    assert rs.validate_address("10.0.0.1:6379") == "10.0.0.1:6379"


def test_probe_runs_inside_the_container_under_a_kill_timeout():
    argv = rs.probe_argv("auto", "python3", "dgx-spark-ray-head", "docker", 20)
    assert argv[:7] == ["docker", "exec", "dgx-spark-ray-head", "timeout", "--signal=KILL", "20", "python3"]
    assert argv[-1] == "auto"


@pytest.mark.parametrize("required,ready", [(True, True), (None, True), (False, False)])
def test_a_ray_that_answers_without_its_token_is_not_ready_and_says_why(required, ready):
    """The probe asks again without the token (PROBE_SCRIPT): Ray refusing it is token authentication enforced; Ray
    answering it is a Ray that ignores RAY_AUTH_MODE (before 2.52), never ready whatever joined."""
    data = dict(json.loads(read_fixture("ray", "two-nodes.json")), token_required=required)
    s = rs.evaluate(rs.summarize(rs.parse_probe_output(0, json.dumps(data), "", "dgx-spark-ray-head")), expected_nodes=2)
    assert s["ready"] is ready and s["token_required"] is required
    if not ready:
        assert s["reasons"] == [rs.UNAUTHENTICATED % "2.60.0"] and "needs Ray 2.52 or later" in s["reasons"][0]
