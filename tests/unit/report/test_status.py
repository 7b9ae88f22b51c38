"""status: what runs where, and the node to name."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import status


def ps_row(name, state, status_text):
    return {"Names": name, "State": state, "Status": status_text}


def test_status_names_the_broken_node():
    nodes = {"sim-head": {"fabric_ip": "10.210.0.10", "containers": [ps_row("ray-head", "running", "Up 3 minutes")]},
             "sim-worker1": {"fabric_ip": "10.210.0.11", "containers": [ps_row("ray-w1", "exited", "Exited (137) 9 seconds ago")]}}
    ray = {"ray": {"alive_ips": ["10.210.0.10"], "alive_count": 1, "gpu_total": 1.0, "missing_ips": ["10.210.0.11"]}}
    report = status.deployment(nodes, ray, {"ready": False, "errors": ["not ready"]})
    assert report["healthy"] is False and report["unhealthy_nodes"] == ["sim-worker1"]
    assert "sim-worker1 (10.210.0.11): ray-w1 exited (Exited (137) 9 seconds ago) -- NOT OK: ray-w1, missing from the Ray cluster" in report["lines"]
    assert report["lines"][-1] == "NOT healthy: run playbooks/serve.yml to restore service (sim-worker1)"


def test_status_healthy():
    nodes = {"a": {"fabric_ip": "1", "containers": [ps_row("x", "running", "Up")]}}
    report = status.deployment(nodes, {"ray": {"alive_ips": ["1"], "alive_count": 1, "gpu_total": 1}}, {"ready": True, "models": ["m"]})
    assert report["healthy"] and report["lines"][-1] == "Healthy"


def test_status_shows_what_the_endpoint_does_now():
    live = {"seconds": 2, "output_tokens_per_second": 10.0, "prompt_tokens_per_second": None, "kv_cache_usage": 0.253,
            "running": 2.0, "waiting": 1.0}
    out = status.deployment({"spark1": {"fabric_ip": "192.168.100.10", "containers": [
        {"Names": "c", "State": "running", "Status": "Up"}]}}, None, {"ready": True, "models": ["m"], "live": live})
    assert "Now (over 2s): 10.0 output tokens/s, n/a prompt tokens/s; KV cache 25.3% used; 2 running, 1 queued" in out["lines"]


def one(models, ready=True, container_state="running"):
    return {"head": "a", "nodes": {"a": {"fabric_ip": "1", "containers": [ps_row("x", container_state, "Up")]}},
            "ray": {"ray": {"alive_ips": ["1"], "alive_count": 1, "gpu_total": 1}},
            "endpoint": {"ready": ready, "models": models, "errors": [] if ready else ["not ready"]}}


def test_one_deployment_without_a_gateway_is_reported_as_itself():
    assert status.report({"dgx-spark": one(["m"])}, None) == status.deployment(one(["m"])["nodes"], one(["m"])["ray"], one(["m"])["endpoint"])
    down = status.report({"dgx-spark": one([], ready=False, container_state="exited")}, None)
    assert not down["healthy"] and down["lines"][-1] == "NOT healthy: run playbooks/serve.yml to restore service (a)"


def test_several_deployments_are_each_reported_and_the_gateway_must_list_every_model():
    states = {"chat": one(["sim-tiny"]), "coder": one(["sim-tiny-ring"])}
    healthy = status.report(states, {"url": "http://h:8000", "errors": [], "models": ["sim-tiny", "sim-tiny-ring"]})
    assert healthy["healthy"] and healthy["lines"][0] == "Deployment chat (head a):" and "  Healthy" in healthy["lines"]
    assert healthy["lines"][-2:] == ["Gateway http://h:8000/v1: routes sim-tiny, sim-tiny-ring", "Healthy"]
    missing = status.report(states, {"url": "http://h:8000", "errors": [], "models": ["sim-tiny"]})
    assert not missing["healthy"] and missing["lines"][-2] == "Gateway http://h:8000/v1: NOT OK (does not list sim-tiny-ring)"
    down = status.report({"chat": one(["sim-tiny"]), "coder": one([], ready=False, container_state="exited")},
                         {"url": "http://h:8000", "errors": [], "models": ["sim-tiny", "sim-tiny-ring"]})
    assert not down["healthy"] and down["unhealthy_nodes"] == ["a"]
    # behind the gateway each deployment is asked there for its own model: it lists every one, each says its own
    asked = {name: dict(state, endpoint=dict(state["endpoint"], models=["sim-tiny", "sim-tiny-ring"], model=model, first_token_seconds=0.03))
             for (name, state), model in zip(states.items(), ("sim-tiny", "sim-tiny-ring"))}
    lines = status.report(asked, {"url": "http://h:8000", "errors": [], "models": ["sim-tiny", "sim-tiny-ring"]})["lines"]
    assert [line for line in lines if "Endpoint:" in line] == [
        "  Endpoint: serving sim-tiny (first token in 0.03s)", "  Endpoint: serving sim-tiny-ring (first token in 0.03s)"]
    gone = status.report(states, {"url": "http://h:8000", "models": [], "errors": [
        "not ready after 0 s at http://h:8000: port not open"]})  # what vllm_endpoint_info says of a gateway that is gone
    assert gone["lines"][-2] == "Gateway http://h:8000/v1: NOT OK (not ready after 0 s at http://h:8000: port not open)"


def test_each_node_names_the_logs_of_the_containers_it_runs_and_logs_yml_is_pointed_to():
    """The paths plan's reads (plan/commands.log_reads): the node's own containers' logs, vLLM's on the head; a
    container the node does not run (the mp backend's on a Ray cluster) is not named."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import commands  # pylint: disable=import-outside-toplevel

    logs = {"a": commands.log_reads({"ray": "ray-a", "vllm": "vllm-a"}, True), "b": commands.log_reads({"ray": "ray-b", "vllm": "vllm-b"}, False)}
    state = {"head": "a", "logs": logs, "ray": None, "endpoint": {"ready": True, "models": ["m"]},
             "nodes": {"a": {"fabric_ip": "1", "containers": [ps_row("ray-a", "running", "Up")]},
                       "b": {"fabric_ip": "2", "containers": [ps_row("ray-b", "running", "Up")]}}}
    lines = status.report({"dgx-spark": state})["lines"]
    assert lines[0] == ("a (1): ray-a running (Up); logs: docker logs ray-a, vLLM's log: docker exec ray-a tail "
                        "/dgx-spark/logs/vllm.log")
    assert lines[1] == "b (2): ray-b running (Up); logs: docker logs ray-b"
    assert lines[-2:] == [status.LOGS_HINT, "Healthy"]
    assert [r["argv"] + [r["count"], "5"] for r in logs["a"]][1] == ["docker", "exec", "ray-a", "tail", "/dgx-spark/logs/vllm.log", "-n", "5"]


def test_bench_last_runs_the_head_recorded_are_listed():
    run = {"meta": {"taken_at": "20261127T100000Z"}, "rows": [
        {"concurrency": 1, "output_tokens_per_s": 40.5}, {"concurrency": 4, "output_tokens_per_s": 120.25},
        {"concurrency": 8, "output_tokens_per_s": None}]}
    state = dict(one(["m"]), bench={"sim_tiny": run, "other": {"meta": {"taken_at": "x"}, "rows": []}})
    lines = status.report({"dgx-spark": state})["lines"]
    assert "Bench, last run of sim_tiny: 20261127T100000Z, 3 point(s), best 120.25 output tokens/s at concurrency 4" in lines
    assert "Bench, last run of other: x, 0 point(s), no result" in lines
    assert lines[-1] == "Healthy"
