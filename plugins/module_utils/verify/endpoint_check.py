# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The endpoint asked as a user asks it (module_utils/verify/endpoint.py builds the requests and judges the answers): the
one check of an endpoint, which the vllm_endpoint_info action runs on the controller and its module runs where it is
sent. ``check(params, warn)`` returns the RV(endpoint) result; ``params`` are the module's options."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

from ansible.module_utils.urls import Request, make_context

from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import canary as canary_prompts, endpoint as ep


_TLS = {}
_TLS_LOCK = threading.Lock()


def tls_context(ca_file=None):
    """The TLS context every request of this process uses, one per ``ca_file`` (the front door's certificate or its
    authority, module_utils/plan/tls.py; None: the system's), its CA certificates loaded once. open_url and Request
    build and load a new one for each request, even a plain-HTTP one (about 16 ms of CPU each, a dozen of them for two
    deployments and their gateway asked at once)."""
    with _TLS_LOCK:
        if ca_file not in _TLS:
            _TLS[ca_file] = make_context(cafile=ca_file)
        return _TLS[ca_file]


class Client:
    def __init__(self, params):
        self.base = params["url"].rstrip("/")
        self.key = key_of(params)
        self.timeout = params["request_timeout"]
        self.context = tls_context(params.get("ca_file"))

    def request(self):
        """A Request of its own for each call (its own cookie jar: a keyless probe carries nothing another call got),
        with the process's TLS context."""
        return Request(timeout=self.timeout, context=self.context)

    def headers(self):
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = "Bearer " + self.key
        return headers

    def get(self, path, keyless=False):
        headers = {} if keyless else self.headers()
        response = self.request().open("GET", self.base + path, headers=headers)
        return response.getcode(), response.read()

    def post(self, path, body, keyless=False):
        headers = {"Content-Type": "application/json"} if keyless else self.headers()
        return self.request().open("POST", self.base + path, data=json.dumps(body), headers=headers)


def port_open(url):
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=2):
            return True
    except OSError:
        return False


def wait_ready(params, client, result):
    model = params["model"]
    deadline = time.monotonic() + params["wait"]
    started = time.monotonic()
    last = "port not open"
    while True:
        stage = "port"
        try:
            if port_open(client.base):
                stage = "health"
                code, body = client.get(params["health_path"])
                if code == 200:
                    stage = "models"
                    code, body = client.get("/v1/models")
                    names = ep.served_names(json.loads(body))
                    result["models"] = names
                    if model is None and names:
                        model = params["model"] = names[0]
                    absent = [m for m in [model] + list(params["models"]) if m not in names]
                    if absent:
                        last = "/v1/models lists %s, not %s" % (", ".join(names) or "nothing", ", ".join(str(m) for m in absent))
                    elif params["ready_probe"]:  # a router lists its routes at once; its backend answers when it serves
                        stage = "backend"
                        last = backend_answers(client, model)
                    if not absent and not (params["ready_probe"] and last):
                        result["stage"] = "models"
                        result["seconds_to_ready"] = round(time.monotonic() - started, 1)
                        return True
                else:
                    last = "%s answered %d" % (params["health_path"], code)
            else:
                last = "port not open"
        except Exception as exc:  # pylint: disable=broad-except
            last = "%s: %s" % (stage, getattr(exc, "reason", None) or exc)
        result["stage"] = stage
        if time.monotonic() + 2 > deadline:
            result["errors"].append("not ready after %d s at %s: %s" % (params["wait"], client.base, last))
            return False
        time.sleep(1)


def backend_answers(client, model):
    """None once ``model`` answers one token through a router (the gateway in front of its deployment), else why not:
    while its backend loads, the router answers an error status (LiteLLM: 500 or 502)."""
    try:
        client.post("/v1/chat/completions", ep.chat_request(model, "Hello", max_tokens=1, stream=False)).read()
        return None
    except Exception as exc:  # pylint: disable=broad-except
        return "%s does not answer through it yet (%s)" % (model, getattr(exc, "code", None) or getattr(exc, "reason", None) or exc)


def refused_without_key(client, result, paths=("/v1/models",), status=None):
    """A client without the key must be refused on every route asked (``paths``: "/path" for a GET, "POST /path" for a
    POST of an empty JSON object): each asked with no Authorization header answers ``status`` (the front door's 401), or
    any error when it is None (LiteLLM's proxy answers 401, or 500 in some releases). No route asked proves nothing."""
    if not paths:
        result["errors"].append("refused_without_key asks no route: give keyless_paths")
        return
    refused = True
    for entry in paths:
        method, path = entry.split(" ", 1) if " " in entry else ("GET", entry)
        try:
            code = client.get(path, keyless=True)[0] if method == "GET" else client.post(path, {}, keyless=True).getcode()
        except Exception as exc:  # pylint: disable=broad-except
            code = getattr(exc, "code", None)
            if code is None:
                result["errors"].append("asked without the key, %s%s failed: %s" % (client.base, path, getattr(exc, "reason", None) or exc))
                return
        if code < 400 or (status is not None and code != status):
            refused = False
            result["errors"].append("%s %s%s answered %s to a client without the key; it must refuse it%s"
                                    % (method, client.base, path, code, " with %d" % status if status else ""))
    result["refused_without_key"] = refused


def check_stream(params, client, result):
    started = time.monotonic()
    try:
        response = client.post("/v1/chat/completions", ep.chat_request(params["model"], "Hello", max_tokens=4, stream=True))
        lines = []
        for raw in response:
            lines.append(raw.decode("utf-8", "replace"))
            text, chunks = ep.first_token(lines)
            if text is not None:
                result["first_token_seconds"] = round(time.monotonic() - started, 3)
                result["first_token"] = text
                result["stage"] = "stream"
                return True
        result["errors"].append("the streamed completion ended without a token (%d chunks)" % ep.first_token(lines)[1])
    except Exception as exc:  # pylint: disable=broad-except
        result["errors"].append("streamed completion failed: %s" % (getattr(exc, "reason", None) or exc))
    return False


def smoke_one(params, client, test):
    started = time.monotonic()
    entry = {"name": test.get("name"), "kind": test.get("kind")}
    try:
        response = json.loads(client.post("/v1/chat/completions", ep.smoke_request(params["model"], test)).read())
        entry["passed"], entry["detail"] = ep.judge(test, response)
    except Exception as exc:  # pylint: disable=broad-except
        entry["passed"], entry["detail"] = False, "request failed: %s" % (getattr(exc, "reason", None) or exc)
    entry["seconds"] = round(time.monotonic() - started, 3)
    return entry


def record_smoke(entries, result):
    for entry in entries:
        result["smoke"].append(entry)
        if not entry["passed"]:
            result["errors"].append("smoke test '%s' failed: %s" % (entry["name"], entry["detail"]))


def first_requests(params, client, result):
    """The streamed token, the smoke tests and, when the model has a reference, the canary's prompts in one request,
    all sent together as users' first requests arrive: a fresh vLLM does its first step's work (the Ray executor's
    graph) for whichever comes first. Each answer is judged on its own; the smoke tests are reported in their order,
    and only when the stream gave its token. Returns (ready, the canary's answers asked together or None)."""
    tests = params["smoke_tests"]
    asks_together = bool(params.get("canary")) and canary_prompts.asks_together(params["canary"])
    with ThreadPoolExecutor(max_workers=2 + len(tests)) as pool:
        together = pool.submit(ask_together, params, client, result) if asks_together else None
        smoke = [pool.submit(smoke_one, params, client, test) for test in tests]
        ready = check_stream(params, client, result) if params["stream"] else True
        entries = [future.result() for future in smoke]
        answers = together.result() if together else None
    if ready:
        record_smoke(entries, result)
    return ready, answers


def ask_together(params, client, result):
    """The canary's prompts in one request (answers_of), or None when that request fails (why: the result's
    ``canary_together_error``): each is then asked alone."""
    config, prompts = params["canary"], list(params["canary"]["prompts"])
    try:
        return canary_prompts.answers_of(json.loads(client.post(
            "/v1/completions", canary_prompts.request(params["model"], prompts, config)).read()), prompts)
    except Exception as exc:  # pylint: disable=broad-except
        result["canary_together_error"] = str(getattr(exc, "reason", None) or exc)
        return None


def ask_canary(params, client, result, together=None):
    """The canary's answers, their tokens as IDs. ``together``: the answers asked in one request (first_requests,
    with the model's reference); a prompt whose answer there is not the reference's token for token is asked again
    alone, with nothing else in flight (batching can flip a near-tie; the reference was asked alone), and that answer
    is the one judged. Without a reference each prompt is asked alone: these answers may become the reference."""
    config = params["canary"]
    prompts, answers = list(config["prompts"]), {}
    if together is not None:
        answers = {a["prompt"]: a for a in together}
        prompts = canary_prompts.ask_alone(config.get("reference"), together)
    try:
        for prompt in prompts:
            response = json.loads(client.post("/v1/completions", canary_prompts.request(params["model"], prompt, config)).read())
            answers[prompt] = canary_prompts.answer_of(prompt, response)
    except Exception as exc:  # pylint: disable=broad-except
        result["errors"].append("canary prompt %r failed: %s" % (prompt, getattr(exc, "reason", None) or exc))
        result["canary"] = []
        return
    result["canary"] = [answers[prompt] for prompt in config["prompts"]]
    result["canary_asked_alone"] = len(prompts)


def read_live(params, client, result, warn):
    """Two reads of /metrics, metrics_seconds apart (not the model's answers: counters only)."""
    seconds = params["metrics_seconds"]
    try:
        before = ep.metric_sums(client.get("/metrics")[1].decode("utf-8", "replace"))
        time.sleep(seconds)
        after = ep.metric_sums(client.get("/metrics")[1].decode("utf-8", "replace"))
    except Exception as exc:  # noqa: BLE001 (any failure of the read is reported, the status goes on)
        warn("could not read %s/metrics: %s" % (client.base, exc))
        return
    result["live"] = ep.live(before, after, seconds)


# What differs from one endpoint to the next: a task asks one (``url``) or several at once (``endpoints``, each of these).
ENDPOINT_OPTIONS = dict(
    url=dict(type="str"),
    model=dict(type="str"),
    models=dict(type="list", elements="str", default=[]),
    api_key=dict(type="str", no_log=True),
    api_key_file=dict(type="path", no_log=False),
    health_path=dict(type="str", default="/health"),
    ready_probe=dict(type="bool", default=False),
    refused_without_key=dict(type="bool", default=False),
    keyless_paths=dict(type="list", elements="str", default=["/v1/models"], no_log=False),
    keyless_status=dict(type="int", no_log=False),
    ca_file=dict(type="path"),
)
ARGUMENT_SPEC = dict(
    ENDPOINT_OPTIONS,
    endpoints=dict(type="list", elements="dict",  # no default: a default [] would count as given for REQUIRED_ONE_OF
                   options=dict(ENDPOINT_OPTIONS, url=dict(type="str", required=True), name=dict(type="str"))),
    wait=dict(type="int", default=0),
    stream=dict(type="bool", default=True),
    smoke_tests=dict(type="list", elements="dict", default=[]),
    canary=dict(type="dict"),
    metrics_seconds=dict(type="int", default=0),
    request_timeout=dict(type="int", default=120),
    fail_on_error=dict(type="bool", default=True),
)
REQUIRED_ONE_OF = [("url", "endpoints")]
MUTUALLY_EXCLUSIVE = [("url", "endpoints"), ("api_key", "api_key_file")]


def key_of(params):
    """The key given, or read from ``api_key_file`` where the check runs (the controller, for the action)."""
    if params.get("api_key") or not params.get("api_key_file"):
        return params.get("api_key")
    with open(params["api_key_file"], encoding="utf-8") as handle:
        return handle.read().strip()


def answer(params, warn):
    """What the module and its action return: ``endpoints`` (each of several asked at once) or ``endpoint`` (one)."""
    if params["endpoints"]:
        return {"endpoints": check_all(params, warn)}
    return {"endpoint": check(params, warn)}


def errors_of(result):
    """What failed, of the one endpoint asked (``endpoint``) or of each (``endpoints``, each error naming its endpoint)."""
    if "endpoints" in result:
        return ["%s: %s" % (e.get("name") or e.get("model"), error) for e in result["endpoints"] for error in e["errors"]]
    return list(result["endpoint"]["errors"])


def check_all(params, warn):
    """Each of ``params["endpoints"]`` asked at the same time, with the task's other options: their results in order,
    each naming its ``name``. Together, a check waits for the slowest endpoint, not for their sum (and vLLM's rank 0
    keeps a core busy for a second after each request it serves, which one asked after another would wait on)."""
    def one(entry):
        found = check(dict(params, endpoints=[], **entry), warn)
        found.update(name=entry.get("name"), url=entry["url"])
        return found
    with ThreadPoolExecutor(max_workers=max(1, len(params["endpoints"]))) as pool:
        return list(pool.map(one, params["endpoints"]))


def check(params, warn):
    """Readiness, then the stream, the smoke tests, the canary and the live figures as ``params`` ask."""
    params = dict(params)
    result = {"ready": False, "stage": None, "models": [], "seconds_to_ready": None, "first_token_seconds": None,
              "first_token": None, "smoke": [], "live": None, "refused_without_key": None, "errors": []}
    try:
        client = Client(params)
    except OSError as exc:
        result["errors"].append("could not read the key file %s: %s" % (params.get("api_key_file"), exc.strerror or exc))
        client = None
    if client and wait_ready(params, client, result):
        if params["refused_without_key"]:
            refused_without_key(client, result, params["keyless_paths"], params["keyless_status"])
        result["ready"], together = first_requests(params, client, result)
        if result["ready"] and params["canary"]:
            ask_canary(params, client, result, together)
        if result["ready"] and params["metrics_seconds"] > 0:
            read_live(params, client, result, warn)
    result["model"] = params["model"]
    return result
