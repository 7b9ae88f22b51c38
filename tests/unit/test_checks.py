"""Pure checks of the verify steps: environment parity, smoke-test judges, status report, process decisions,
ring links, flag gating and image-info parsing."""

import json

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils import endpoint, flags, image_info, parity, process_group, ring, status

PLANNED = {
    "spark1": {"env_common": {"VLLM_NVFP4_GEMM_BACKEND": "marlin"}, "env_node": {"VLLM_HOST_IP": "192.168.100.10", "NCCL_IB_GID_INDEX": "3"}},
    "spark2": {"env_common": {"VLLM_NVFP4_GEMM_BACKEND": "marlin"}, "env_node": {"VLLM_HOST_IP": "192.168.100.11", "NCCL_IB_GID_INDEX": "5"}},
}


def env(**values):
    base = {"PATH": "/usr/bin", "VLLM_NVFP4_GEMM_BACKEND": "marlin"}
    base.update(values)
    return base


def test_parity_holds():
    actual = {"spark1": env(VLLM_HOST_IP="192.168.100.10", NCCL_IB_GID_INDEX="3"),
              "spark2": [env(VLLM_HOST_IP="192.168.100.11", NCCL_IB_GID_INDEX="5")]}
    assert parity.check(PLANNED, actual) == []


def test_head_value_carried_over_a_workers_own_is_caught():
    actual = {"spark1": env(VLLM_HOST_IP="192.168.100.10", NCCL_IB_GID_INDEX="3"),
              "spark2": env(VLLM_HOST_IP="192.168.100.11", NCCL_IB_GID_INDEX="3")}
    problems = parity.check(PLANNED, actual, "vLLM rank process")
    assert problems == ["spark2: NCCL_IB_GID_INDEX is '3' in the vLLM rank process, planned '5' (per-node value). Recreate the "
                        "containers with playbooks/serve.yml; if it persists, the value comes from the image or from the "
                        "driver's environment"]


def test_missing_kernel_variable_and_stale_image_value_are_caught():
    actual = {"spark1": {"VLLM_HOST_IP": "192.168.100.10", "NCCL_IB_GID_INDEX": "3", "VLLM_USE_FLASHINFER_MOE_FP4": "1"},
              "spark2": env(VLLM_HOST_IP="192.168.100.11", NCCL_IB_GID_INDEX="5")}
    problems = parity.check(PLANNED, actual)
    assert problems[0].startswith("spark1: VLLM_NVFP4_GEMM_BACKEND is missing in the container, planned 'marlin' (common value)")
    assert problems[1].startswith("VLLM_USE_FLASHINFER_MOE_FP4 differs across nodes and is not in the plan (spark1='1')")


def test_nothing_running_is_named():
    assert parity.check(PLANNED, {"spark1": []})[0] == "spark1: no running container to read the environment from"


def test_environ_dump_and_docker_env():
    assert parity.parse_environ_dump("A=1\nB=x=y\n---\nA=2\n---\n") == [{"A": "1", "B": "x=y"}, {"A": "2"}]
    assert parity.parse_env_list(["A=1", "B=", "junk"]) == {"A": "1", "B": ""}


TOOL = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def response(content=None, reasoning=None, tool_calls=None, finish="stop"):
    message = {"role": "assistant", "content": content, "reasoning": reasoning, "tool_calls": tool_calls or []}
    return {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}


@pytest.mark.parametrize("test,answer,passed,detail", [
    ({"kind": "chat"}, response("Hi"), True, "2 characters"),
    ({"kind": "chat"}, response(""), False, "empty answer"),
    ({"kind": "no_control_tokens", "tokens": ["<|im_end|>"]}, response("Hi<|im_end|>"), False, "control tokens leaked"),
    ({"kind": "tool_call", "tool": TOOL},
     response(None, tool_calls=[{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}],
              finish="tool_calls"), True, "get_weather({\"city\": \"Paris\"})"),
    ({"kind": "tool_call", "tool": TOOL}, response("<tool_call>get_weather Paris</tool_call>"), False, "the tool-call parser did not parse it"),
    ({"kind": "tool_call", "tool": TOOL},
     response(None, tool_calls=[{"function": {"name": "get_weather", "arguments": "{city"}}]), False, "not JSON"),
    ({"kind": "reasoning", "expect": "separated"}, response("51", reasoning="17*3=51"), True, "reasoning apart"),
    ({"kind": "reasoning", "expect": "separated"}, response("<think>17*3</think>51"), False, "think tags are in the content"),
    ({"kind": "reasoning", "expect": "inline"}, response("<think>17*3</think>51"), True, "inline"),
])
def test_smoke_judges(test, answer, passed, detail):
    ok, text = endpoint.judge(test, answer)
    assert ok is passed and detail in text


def test_smoke_request_offers_the_tool():
    body = endpoint.smoke_request("m", {"kind": "tool_call", "prompt": "weather?", "tool": TOOL, "max_tokens": 9})
    assert body["tools"][0]["function"]["name"] == "get_weather" and body["tool_choice"] == "auto" and body["max_tokens"] == 9


def test_first_streamed_token():
    lines = ['data: {"choices":[{"delta":{"role":"assistant","content":""}}]}', "",
             'data: {"choices":[{"delta":{"content":" run"}}]}', "data: [DONE]"]
    assert endpoint.first_token(lines) == (" run", 2)


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


@pytest.mark.parametrize("state,running,hash_,wanted,action", [
    (None, False, "h", "started", "start"),
    ({"pgid": 5, "config_hash": "h"}, True, "h", "started", "none"),
    ({"pgid": 5, "config_hash": "old"}, True, "h", "started", "restart"),
    ({"pgid": 5, "config_hash": "h"}, False, "h", "started", "start"),
    ({"pgid": 5}, True, None, "stopped", "stop"),
    (None, False, None, "stopped", "none"),
    ({"pgid": 5}, True, "h", "restarted", "restart"),
])
def test_process_decisions(state, running, hash_, wanted, action):
    assert process_group.decide(state, running, hash_, wanted) == action


def test_process_group_argv_never_interpolates():
    argv = process_group.launch_argv("docker", "c", ["vllm", "serve", "m; rm -rf /"], "/run/p", "/logs/l")
    assert argv[:6] == ["docker", "exec", "-d", "c", "setsid", "sh"]
    assert argv[-1] == "m; rm -rf /" and argv[6:8] == ["-c", process_group.LAUNCH_SCRIPT]
    assert process_group.signal_argv("docker", "c", 42, "TERM")[-3:] == ["-TERM", "--", "-42"]
    assert process_group.parse_state('{"pgid": 42}') == {"pgid": 42} and process_group.parse_state("junk") is None


def test_ring_links_and_prefix():
    links = [{"subnet": "192.168.10.0/30", "a": "s1", "a_if": "p0", "b": "s2", "b_if": "p1"},
             {"subnet": "192.168.20.0/30", "a": "s2", "a_if": "p0", "b": "s3", "b_if": "p1"}]
    assert ring.links_of(links, "s2") == [
        {"interface": "p1", "address": "192.168.10.2/30", "peer": "s1", "peer_address": "192.168.10.1", "prefix_len": 30},
        {"interface": "p0", "address": "192.168.20.1/30", "peer": "s3", "peer_address": "192.168.20.2", "prefix_len": 30}]
    assert ring.prefix_len(links) == 30
    with pytest.raises(ring.RingError, match="different prefix lengths"):
        ring.prefix_len(links + [{"subnet": "10.0.0.0/24"}])
    with pytest.raises(ring.RingError, match="ring link 0"):
        ring.links_of([{"subnet": "192.168.10.1/30", "a": "s1"}], "s1")


def test_flags_to_argv_and_gate():
    assert flags.to_argv({"--a": True, "--b": False, "--c": None, "--d": 3, "--e": ["x", "y"]}) == ["--a", "--d", "3", "--e", "x", "y"]
    kept, dropped, errors = flags.gate({"--max_model_len": 8, "--no-enable-prefix-caching": True, "--gone": 1},
                                       {"--max-model-len": None, "--enable-prefix-caching": None}, optional=["--gone"], image="img", version="0.32.0")
    assert kept == {"--max_model_len": 8, "--no-enable-prefix-caching": True}
    assert dropped == ["img (vLLM 0.32.0) does not accept --gone; dropped (optional for this profile)"] and errors == []


def test_image_info_parsing():
    assert image_info.version_tuple("0.32.0+cpu") == (0, 32, 0) and image_info.version_tuple("0.11") == (0, 11, 0)
    out = "noise\n" + json.dumps({"version": "0.32.0", "options": {"--x": None}}) + "\n"
    assert image_info.parse_probe_output(0, out, "", "img")["version"] == "0.32.0"
    with pytest.raises(image_info.ImageInfoError, match="image img is not on this node"):
        image_info.parse_probe_output(125, "", "Unable to find image 'img:latest' locally", "img")
    with pytest.raises(image_info.ImageInfoError, match="has no importable vLLM: import vllm: ModuleNotFoundError"):
        image_info.parse_probe_output(0, json.dumps({"version": None, "errors": ["import vllm: ModuleNotFoundError"]}), "", "img")
