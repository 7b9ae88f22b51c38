"""recover: what recover.yml does, decided from what status.yml reads (Ray's state captured on the simulated cluster)."""

import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import recover
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import ray_state

from helpers import read_fixture

HEAD, WORKER = "sim-head", "sim-worker1"


def node(ip, state="running", reachable=True):
    return {"fabric_ip": ip, "reachable": reachable, "containers": [{"Names": "ray-" + ip, "State": state}]}


def ray(fixture, expected=("10.210.0.10", "10.210.0.11")):
    data = json.loads(read_fixture("ray", fixture))
    return {"ray": ray_state.evaluate(ray_state.summarize(data), len(expected), len(expected), list(expected))}


def nodes(head_state="running", worker_state="running", worker_reachable=True):
    return {HEAD: node("10.210.0.10", head_state), WORKER: node("10.210.0.11", worker_state, worker_reachable)}


SERVING = {"ready": True}
DOWN = {"ready": False, "errors": ["connection refused"]}


def test_a_healthy_cluster_is_not_touched():
    assert recover.decide(nodes(), HEAD, ray("sim-two-nodes.json"), {"running": True}, SERVING)["action"] == "none"


def test_a_dead_rank_restarts_the_ranks_only_and_quotes_the_log():
    log = ["...", "ray.exceptions.ActorDiedError: RayWorkerWrapper died", "See https://x/refleaks", ""]
    decision = recover.decide(nodes(), HEAD, ray("sim-two-nodes.json"), {"running": False, "log_tail": log}, DOWN)
    assert decision == {"action": "restart_ranks", "nodes": [HEAD], "loading": False,
                        "reasons": ["vLLM is not running on sim-head: its log says: ray.exceptions.ActorDiedError: RayWorkerWrapper died"]}


def test_a_hung_vllm_is_restarted_too():
    decision = recover.decide(nodes(), HEAD, ray("sim-two-nodes.json"), {"running": True}, DOWN)
    assert decision["action"] == "restart_ranks" and "does not serve (connection refused)" in decision["reasons"][0]
    assert decision["loading"] is True  # waited for first: it may be loading


def test_a_dead_head_restarts_from_the_head():
    decision = recover.decide(nodes(head_state="exited"), HEAD, {"msg": "container is not running"}, None, DOWN)
    assert decision["action"] == "restart_from_head" and decision["nodes"] == [HEAD]
    assert "sim-head: its container is not running" in decision["reasons"]


def test_a_worker_missing_from_ray_restarts_from_the_head():
    one = json.loads(read_fixture("ray", "sim-two-nodes.json"))
    one["nodes"] = [n for n in one["nodes"] if n["NodeManagerAddress"] == "10.210.0.10"]
    state = {"ray": ray_state.evaluate(ray_state.summarize(one), 2, 2, ["10.210.0.10", "10.210.0.11"])}
    decision = recover.decide(nodes(), HEAD, state, {"running": False}, DOWN)
    assert decision == {"action": "restart_from_head", "nodes": [WORKER], "reasons": ["sim-worker1: missing from Ray"]}


def test_a_worker_gone_is_waited_for_then_refused_naming_it():
    decision = recover.decide(nodes(worker_reachable=False), HEAD, ray("sim-two-nodes.json"), None, DOWN)
    assert decision["action"] == "wait_for_nodes" and decision["nodes"] == [WORKER]
    message = recover.refusal([WORKER], [HEAD, WORKER], 300)
    assert message.startswith("sim-worker1 did not answer within 300 s; the model is planned across 2 nodes (sim-head, sim-worker1)")


def test_the_last_known_good_record_plans_the_same_deployment_again(tmp_path):
    import os

    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import deployment, profiles, records

    from helpers import spark_inputs

    from helpers import ROOT as root
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(root, "profiles")]))
    inputs = spark_inputs(m25, tmp_path)
    inputs["overrides"] = {"max_model_len": 65536, "gpu_memory_utilization": None}
    plan = deployment.plan_deployment(inputs)
    recorded = records.record(plan, None, 1795500000.0)
    assert recorded["image_id"] == plan["cluster"]["image_id"] and recorded["profile"] == "minimax_m25_nvfp4_ep"
    assert recorded["serve_config_hash"] == plan["cluster"]["serve_config_hash"] and recorded["nodes"] == plan["nodes_order"]
    again = records.restore(recorded)  # what recover.yml and a rollback plan: the recorded choices, nothing more
    assert (again["profile"], again["backend"], again["overrides"]) == ("minimax_m25_nvfp4_ep", "ray", {"max_model_len": 65536})
    assert records.same(recorded, plan)
    inputs["overrides"] = {"max_model_len": 32768}
    assert not records.same(recorded, deployment.plan_deployment(inputs))  # another configuration of vLLM
    assert not records.same(None, plan)
