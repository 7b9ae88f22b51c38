"""endpoint_check: the stream and the smoke tests go out together, against a fake endpoint (no network)."""

import json
import threading

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import canary, endpoint_check

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
    assert endpoint_check.first_requests(PARAMS, FirstStep(3), found) == (True, None)
    assert found["first_token"] == "Hi" and found["errors"] == []
    assert [(t["name"], t["passed"]) for t in found["smoke"]] == [(t["name"], True) for t in PARAMS["smoke_tests"]]


def test_no_smoke_results_when_the_stream_gave_no_token():
    found = result()
    assert endpoint_check.first_requests(PARAMS, FirstStep(3, stream_ok=False), found) == (False, None)
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


BASIS = {"image_id": "sha256:1", "model": "m", "revision": None, "flags": {}, "env": {}}
CANARY = {"prompts": ["one", "three", "seven"], "max_tokens": 3, "seed": 1, "basis": BASIS}


def reference_of(prompts, basis=None):
    return {"basis": basis or BASIS,
            "answers": [{"prompt": p, "tokens": [int(t.split(":")[1]) for t in Greedy.tokens(p, False)]} for p in prompts]}


def ask(vllm, reference):
    """The canary as check() asks it: together with the first requests when there is a reference, then alone."""
    params, found = {"model": "m", "stream": False, "smoke_tests": [], "canary": dict(CANARY, reference=reference)}, result()
    ready, together = endpoint_check.first_requests(params, vllm, found)
    endpoint_check.ask_canary(params, vllm, found, together)
    return found


def test_with_a_reference_the_canary_asks_every_prompt_in_one_request():
    vllm = Greedy()
    found = ask(vllm, reference_of(CANARY["prompts"]))
    assert [b["prompt"] for b in vllm.bodies] == [CANARY["prompts"]]
    assert found["canary"] == [{"prompt": p, "tokens": reference_of([p])["answers"][0]["tokens"], "text": p} for p in CANARY["prompts"]]
    assert found["canary_asked_alone"] == 0 and found["errors"] == []


def test_a_prompt_whose_batched_answer_differs_is_asked_again_alone_and_that_answer_is_judged():
    vllm = Greedy(flips=["three"])
    found = ask(vllm, reference_of(CANARY["prompts"]))
    assert [b["prompt"] for b in vllm.bodies] == [CANARY["prompts"], "three"]
    assert [a["tokens"] for a in found["canary"]] == [a["tokens"] for a in reference_of(CANARY["prompts"])["answers"]]


def test_without_a_reference_each_prompt_is_asked_alone_as_a_reference_must_be():
    vllm = Greedy(flips=["three"])
    found = ask(vllm, {})
    assert [b["prompt"] for b in vllm.bodies] == CANARY["prompts"]
    assert found["canary_asked_alone"] == 3


def test_the_canary_goes_out_with_the_first_requests_when_the_model_has_a_reference():
    """A fresh vLLM answers nothing until the stream, the smoke tests and the canary's one request have all arrived."""
    found = result()
    params = dict(PARAMS, canary=dict(CANARY, reference=reference_of(CANARY["prompts"])))

    class Both(FirstStep):
        def post(self, path, body):
            if "prompt" not in body:
                return FirstStep.post(self, path, body)
            self.arrived.wait()
            return Greedy().post(path, body)

    ready, together = endpoint_check.first_requests(params, Both(4), found)
    assert ready and [a["prompt"] for a in together] == CANARY["prompts"]


def test_across_a_change_of_the_basis_each_prompt_is_asked_alone():
    """Another image (or other flags): the path a single user's request takes is what changed, so batching is not
    allowed to stand in for it."""
    vllm = Greedy()
    found = ask(vllm, reference_of(CANARY["prompts"], dict(BASIS, image_id="sha256:0")))
    assert [b["prompt"] for b in vllm.bodies] == CANARY["prompts"] and found["canary_asked_alone"] == 3


def test_a_failed_request_of_all_prompts_is_said_and_each_is_asked_alone():
    class NoLists(Greedy):
        def post(self, path, body):
            if isinstance(body["prompt"], list):
                raise ValueError("prompt must be a string")
            return Greedy.post(self, path, body)

    vllm = NoLists()
    found = ask(vllm, reference_of(CANARY["prompts"]))
    assert found["canary_together_error"] == "prompt must be a string"
    assert [b["prompt"] for b in vllm.bodies] == CANARY["prompts"] and found["errors"] == []
    assert [a["prompt"] for a in found["canary"]] == CANARY["prompts"]


def test_an_answer_with_too_few_choices_is_not_read_as_the_prompts_answers():
    with pytest.raises(ValueError, match="3 prompts asked together, 2 answers"):
        canary.answers_of({"choices": [{"index": 0}, {"index": 1}]}, CANARY["prompts"])


class Endpoints:
    """Two endpoints on local ports, each answering only its own key; a streamed request is answered only once both
    have arrived (asked one after the other, the first would wait for ever: the barrier times out)."""

    def __init__(self, keys):
        import http.server

        arrived = threading.Barrier(len(keys), timeout=5)
        self.servers = []
        for key in keys:
            class Handler(http.server.BaseHTTPRequestHandler):
                own = key

                def answer(self, code, body):
                    data = body if isinstance(body, bytes) else json.dumps(body).encode()
                    self.send_response(code)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

                def do_GET(self):
                    if self.path == "/health":
                        return self.answer(200, b"")
                    if self.headers.get("Authorization") != "Bearer " + self.own:
                        return self.answer(401, {"error": "key"})
                    return self.answer(200, {"data": [{"id": "m-" + self.own}]})

                def do_POST(self):
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    if self.headers.get("Authorization") != "Bearer " + self.own:
                        return self.answer(401, {"error": "key"})
                    arrived.wait()
                    return self.answer(200, b"".join(STREAM))

                def log_message(self, *args):
                    pass

            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)

    def url(self, index):
        return "http://127.0.0.1:%d" % self.servers[index].server_address[1]

    def close(self):
        for server in self.servers:
            server.shutdown()


def ask_two(tmp_path):
    """A chat endpoint and a gateway, each with its own key file, asked at once: (the results, their URLs)."""
    (tmp_path / "a").write_text("key-a\n")
    (tmp_path / "b").write_text("key-b\n")
    served = Endpoints(["key-a", "key-b"])
    try:
        entries = [{"name": "chat", "url": served.url(0), "model": "m-key-a", "api_key_file": str(tmp_path / "a")},
                   {"name": "gateway", "url": served.url(1), "model": "m-key-b", "api_key_file": str(tmp_path / "b"),
                    "refused_without_key": True}]
        params = {k: v.get("default") for k, v in endpoint_check.ARGUMENT_SPEC.items()}
        defaults = {k: v.get("default") for k, v in endpoint_check.ENDPOINT_OPTIONS.items()}
        found = endpoint_check.check_all(dict(params, endpoints=[dict(defaults, **e) for e in entries], wait=5), [].append)
    finally:
        served.close()
    return found, [served.url(0), served.url(1)]


def test_several_endpoints_are_asked_at_once_each_with_the_key_in_its_own_file(tmp_path):
    found, urls = ask_two(tmp_path)
    assert [(f["name"], f["url"], f["ready"], f["first_token"], f["errors"]) for f in found] == [
        ("chat", urls[0], True, "Hi", []), ("gateway", urls[1], True, "Hi", [])]
    assert found[1]["refused_without_key"] is True and found[0]["refused_without_key"] is None
    assert endpoint_check.errors_of({"endpoints": found}) == []


def test_a_key_file_that_cannot_be_read_is_named_in_that_endpoints_errors(tmp_path):
    params = {k: v.get("default") for k, v in endpoint_check.ARGUMENT_SPEC.items()}
    found = endpoint_check.check_all(dict(params, endpoints=[{"name": "chat", "url": "http://127.0.0.1:9", "api_key_file": str(tmp_path / "none")}]),
                                     [].append)
    assert found[0]["ready"] is False
    assert endpoint_check.errors_of({"endpoints": found}) == ["chat: could not read the key file %s: No such file or directory" % (tmp_path / "none")]


def test_the_tls_context_is_built_once_per_process_not_per_request(tmp_path, monkeypatch):
    # Each context loads the system's CA certificates (about 16 ms of CPU); a check of two deployments and their
    # gateway sends a dozen requests, all at once on a 2-core controller.
    built = []
    monkeypatch.setattr(endpoint_check, "_TLS", {})
    monkeypatch.setattr(endpoint_check, "make_context", lambda cafile=None: built.append(cafile) or object())
    found, dummy = ask_two(tmp_path)
    assert [(f["ready"], f["first_token"], f["errors"]) for f in found] == [(True, "Hi", []), (True, "Hi", [])]
    assert len(built) == 1


def test_through_a_router_the_wait_lasts_until_the_backend_answers_not_until_the_route_is_listed():
    """A gateway lists its routes and answers its health at once, and an error status while the deployment behind it
    loads: with ready_probe the wait goes on until one token of the model answers through it."""
    import http.server

    loading = {"left": 3}

    class Router(http.server.BaseHTTPRequestHandler):
        def answer(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.answer(200, {"data": [{"id": "m"}]} if self.path == "/v1/models" else {})

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if loading["left"] > 0:
                loading["left"] -= 1
                return self.answer(502, {"error": "backend not ready"})
            return self.answer(200, {"choices": [{"message": {"content": "Hi"}}]})

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Router)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    params = dict({k: v.get("default") for k, v in endpoint_check.ARGUMENT_SPEC.items()},
                  url="http://127.0.0.1:%d" % server.server_address[1], model="m", api_key="k", wait=30)
    try:
        listed = result()
        assert endpoint_check.wait_ready(dict(params), endpoint_check.Client(params), listed) and loading["left"] == 3
        probed = result()
        assert endpoint_check.wait_ready(dict(params, ready_probe=True), endpoint_check.Client(params), probed)
        assert loading["left"] == 0 and probed["stage"] == "models" and probed["errors"] == []
        loading["left"] = 100  # never ready within the wait: the error says why
        late = result()
        assert not endpoint_check.wait_ready(dict(params, ready_probe=True, wait=3), endpoint_check.Client(params), late)
        assert late["errors"] == ["not ready after 3 s at %s: m does not answer through it yet (502)" % params["url"]]
    finally:
        server.shutdown()
