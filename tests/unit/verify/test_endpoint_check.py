"""endpoint_check: the stream and the smoke tests go out together, against a fake endpoint (no network)."""

import json
import threading

from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import endpoint_check

SMOKE = [{"name": "a chat completion returns text", "kind": "chat"}, {"name": "a second one", "kind": "chat"}]
PARAMS = {"model": "m", "stream": True, "smoke_tests": SMOKE}
STREAM = [b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n', b"data: [DONE]\n"]


class Answer:
    def __init__(self, body):
        self.body = body

    def read(self):
        return json.dumps(self.body).encode()


class FirstStep:
    """A fresh vLLM: no request is answered until every request sent at once has arrived (its first step)."""

    def __init__(self, expected, stream_ok=True):
        self.arrived = threading.Barrier(expected, timeout=5)
        self.stream_ok = stream_ok

    def post(self, path, body):
        self.arrived.wait()  # a sequential client would block here for ever: the barrier times out and raises
        if body.get("stream"):
            return iter(STREAM if self.stream_ok else [b"data: [DONE]\n"])
        return Answer({"choices": [{"message": {"content": "an answer"}, "finish_reason": "stop"}]})


def result():
    return {"smoke": [], "errors": []}


def test_smoke_tests_go_out_with_the_streamed_request_and_are_reported_in_order():
    found = result()
    assert endpoint_check.stream_and_smoke(PARAMS, FirstStep(3), found) is True
    assert found["first_token"] == "Hi" and found["errors"] == []
    assert [(t["name"], t["passed"]) for t in found["smoke"]] == [(t["name"], True) for t in PARAMS["smoke_tests"]]


def test_no_smoke_results_when_the_stream_gave_no_token():
    found = result()
    assert endpoint_check.stream_and_smoke(PARAMS, FirstStep(3, stream_ok=False), found) is False
    assert found["smoke"] == [] and "without a token" in found["errors"][0]
