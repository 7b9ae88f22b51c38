"""status: what runs where, and the node to name."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils import status


def ps_row(name, state, status_text):
    return {"Names": name, "State": state, "Status": status_text}


def test_status_names_the_broken_node():
    nodes = {"sim-head": {"fabric_ip": "10.210.0.10", "containers": [ps_row("ray-head", "running", "Up 3 minutes")]},
             "sim-worker1": {"fabric_ip": "10.210.0.11", "containers": [ps_row("ray-w1", "exited", "Exited (137) 9 seconds ago")]}}
    ray = {"ray": {"alive_ips": ["10.210.0.10"], "alive_count": 1, "gpu_total": 1.0, "missing_ips": ["10.210.0.11"]}}
    report = status.report(nodes, ray, {"ready": False, "errors": ["not ready"]})
    assert report["healthy"] is False and report["unhealthy_nodes"] == ["sim-worker1"]
    assert "sim-worker1 (10.210.0.11): ray-w1 exited (Exited (137) 9 seconds ago) -- NOT OK: ray-w1, missing from the Ray cluster" in report["lines"]
    assert report["lines"][-1] == "NOT healthy: run playbooks/serve.yml to restore service (sim-worker1)"


def test_status_healthy():
    nodes = {"a": {"fabric_ip": "1", "containers": [ps_row("x", "running", "Up")]}}
    report = status.report(nodes, {"ray": {"alive_ips": ["1"], "alive_count": 1, "gpu_total": 1}}, {"ready": True, "models": ["m"]})
    assert report["healthy"] and report["lines"][-1] == "Healthy"


def test_status_shows_what_the_endpoint_does_now():
    live = {"seconds": 2, "output_tokens_per_second": 10.0, "prompt_tokens_per_second": None, "kv_cache_usage": 0.253,
            "running": 2.0, "waiting": 1.0}
    out = status.report({"spark1": {"fabric_ip": "192.168.100.10", "containers": [
        {"Names": "c", "State": "running", "Status": "Up"}]}}, None, {"ready": True, "models": ["m"], "live": live})
    assert "Now (over 2s): 10.0 output tokens/s, n/a prompt tokens/s; KV cache 25.3% used; 2 running, 1 queued" in out["lines"]
