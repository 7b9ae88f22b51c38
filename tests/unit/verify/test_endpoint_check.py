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


class Greedy:
    """A vLLM whose greedy answer to a prompt asked with others (``flips``) differs from the one asked alone, as a
    near-tie flipped by batching would; every request body is kept."""

    def __init__(self, flips=()):
        self.flips, self.bodies = set(flips), []

    @staticmethod
    def tokens(prompt, together):
        return ["token_id:%d" % (len(prompt) + i + (100 if together else 0)) for i in range(3)]

    def post(self, path, body):
        self.bodies.append(body)
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        together = isinstance(body["prompt"], list)
        return Answer({"choices": [{"index": i, "text": p, "logprobs": {"tokens": self.tokens(p, together and p in self.flips)}}
                                   for i, p in reversed(list(enumerate(prompts)))]})  # in any order: the index says which


CANARY = {"prompts": ["one", "three", "seven"], "max_tokens": 3, "seed": 1}


def reference_of(prompts):
    return {"answers": [{"prompt": p, "tokens": [int(t.split(":")[1]) for t in Greedy.tokens(p, False)]} for p in prompts]}


def test_with_a_reference_the_canary_asks_every_prompt_in_one_request():
    vllm, found = Greedy(), result()
    endpoint_check.ask_canary({"model": "m", "canary": dict(CANARY, reference=reference_of(CANARY["prompts"]))}, vllm, found)
    assert [b["prompt"] for b in vllm.bodies] == [CANARY["prompts"]]
    assert found["canary"] == [{"prompt": p, "tokens": reference_of([p])["answers"][0]["tokens"], "text": p} for p in CANARY["prompts"]]
    assert found["canary_asked_alone"] == 0 and found["errors"] == []


def test_a_prompt_whose_batched_answer_differs_is_asked_again_alone_and_that_answer_is_judged():
    vllm, found = Greedy(flips=["three"]), result()
    endpoint_check.ask_canary({"model": "m", "canary": dict(CANARY, reference=reference_of(CANARY["prompts"]))}, vllm, found)
    assert [b["prompt"] for b in vllm.bodies] == [CANARY["prompts"], "three"]
    assert [a["tokens"] for a in found["canary"]] == [a["tokens"] for a in reference_of(CANARY["prompts"])["answers"]]


def test_without_a_reference_each_prompt_is_asked_alone_as_a_reference_must_be():
    vllm, found = Greedy(flips=["three"]), result()
    endpoint_check.ask_canary({"model": "m", "canary": dict(CANARY, reference={})}, vllm, found)
    assert [b["prompt"] for b in vllm.bodies] == CANARY["prompts"]
    assert found["canary_asked_alone"] == 3
