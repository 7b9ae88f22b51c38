"""Module vllm_endpoint_info: readiness stages against a port nothing listens on."""

import socket

from helpers import run_module


def test_a_closed_port_is_not_ready_and_says_which_stage():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    answer = run_module("vllm_endpoint_info", {"url": "http://127.0.0.1:%d" % port, "model": "m", "wait": 0, "fail_on_error": False})
    result = answer["endpoint"]
    assert result["ready"] is False and result["stage"] == "port"
    assert result["errors"] == ["not ready after 0 s at http://127.0.0.1:%d: port not open" % port]
    failed = run_module("vllm_endpoint_info", {"url": "http://127.0.0.1:%d" % port, "model": "m", "wait": 0})
    assert failed["failed"] and failed["msg"] == result["errors"][0]


def test_an_endpoint_is_named_once_or_several_are_listed_never_neither_nor_both():
    neither = run_module("vllm_endpoint_info", {"wait": 0})
    assert neither["failed"] and neither["msg"] == "one of the following is required: url, endpoints"
    both = run_module("vllm_endpoint_info", {"url": "http://127.0.0.1:9", "endpoints": [{"url": "http://127.0.0.1:9"}]})
    assert both["failed"] and "mutually exclusive: url|endpoints" in both["msg"]
