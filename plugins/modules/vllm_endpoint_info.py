#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_endpoint_info
short_description: Check that a vLLM endpoint is ready and does what its profile promises
version_added: 0.1.0
description:
  - Readiness as a user sees it, in order, waiting up to O(wait) seconds; the TCP port accepts, C(/health)
    answers 200, C(/v1/models) lists O(model), and a streamed chat completion yields a first token.
  - Then the profile's smoke tests (O(smoke_tests)); a chat answer, no control tokens leaked, a tool call parsed
    into C(tool_calls), reasoning separated from the content (or kept inline in C(<think>) where the parser
    intends it). A wrong parser fails silently in vLLM; these checks make it fail here.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.INFO_MODULE
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
options:
  url:
    description: Base URL of the endpoint, without C(/v1).
    type: str
    required: true
  model:
    description:
      - Served model name.
      - Omitted, the first name C(/v1/models) lists is used (a status check without the plan).
    type: str
  api_key:
    description: The endpoint's API key (sent as a bearer token, never logged).
    type: str
  wait:
    description: Seconds to wait for the port, C(/health) and C(/v1/models).
    type: int
    default: 0
  stream:
    description: Check that a streamed completion yields a first token.
    type: bool
    default: true
  smoke_tests:
    description:
      - Smoke tests of the profile; each has C(name), C(kind) (C(chat), C(no_control_tokens), C(tool_call),
        C(reasoning)), C(prompt), C(max_tokens) and the kind's own keys (C(tokens), C(tool), C(expect)).
    type: list
    elements: dict
    default: []
  canary:
    description:
      - The correctness canary's settings (the plan's C(cluster.canary.settings)) - C(prompts), C(max_tokens), C(seed).
      - Each prompt is asked once the endpoint is ready, one at a time, greedy (temperature 0, the seed fixed), its
        tokens returned as IDs; RV(endpoint.canary) holds the answers. The serve role compares them with the reference
        (module_utils/canary.py).
    type: dict
  metrics_seconds:
    description:
      - With a value above 0, read vLLM's C(/metrics) twice this many seconds apart once the endpoint is ready, and
        return what it does now in RV(endpoint.live) (status.yml shows it). 0 does not read it.
    type: int
    default: 0
  request_timeout:
    description: Seconds one request may take.
    type: int
    default: 120
  fail_on_error:
    description: Fail when a check fails (else report it).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Wait for the endpoint and run the profile's smoke tests
  dgx_spark.vllm.vllm_endpoint_info:
    url: http://192.168.100.10:8000
    model: MiniMax-M2.5
    api_key: "{{ lookup('ansible.builtin.file', 'inventories/sparks/.secrets/vllm_api_key') }}"
    wait: 1200
    smoke_tests: "{{ plan.cluster.smoke_tests }}"
  delegate_to: localhost
"""

RETURN = r"""
endpoint:
  description: What the checks found.
  returned: always
  type: dict
  contains:
    ready:
      description: True when the port, C(/health), C(/v1/models) and the first streamed token all passed.
      type: bool
    stage:
      description: The last readiness stage reached (C(port), C(health), C(models), C(stream)).
      type: str
    model:
      description: The model asked (O(model), or the first name C(/v1/models) lists).
      type: str
      sample: sim-tiny
    models:
      description: Names C(/v1/models) lists.
      type: list
      elements: str
    seconds_to_ready:
      description: Seconds waited until C(/v1/models) listed the model.
      type: float
    first_token_seconds:
      description: Seconds from the streamed request to its first token.
      type: float
    first_token:
      description: The first streamed text.
      type: str
    smoke:
      description: One entry per smoke test with C(name), C(kind), C(passed), C(detail) and C(seconds).
      type: list
      elements: dict
    canary:
      description: With O(canary), one entry per prompt with C(prompt), C(tokens) (IDs) and C(text).
      type: list
      elements: dict
    live:
      description:
        - With O(metrics_seconds), what the endpoint does now, None where vLLM lacks the metric; None when not read.
        - C(output_tokens_per_second), C(prompt_tokens_per_second), C(kv_cache_usage) (a fraction), C(running),
          C(waiting), C(seconds).
      type: dict
    errors:
      description: What failed.
      type: list
      elements: str
"""

import json
import socket
import time
from urllib.parse import urlparse

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.dgx_spark.vllm.plugins.module_utils import canary as canary_prompts
from ansible_collections.dgx_spark.vllm.plugins.module_utils import endpoint as ep


class Client:
    def __init__(self, module):
        self.base = module.params["url"].rstrip("/")
        self.key = module.params["api_key"]
        self.timeout = module.params["request_timeout"]

    def headers(self):
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = "Bearer " + self.key
        return headers

    def get(self, path):
        response = open_url(self.base + path, method="GET", headers=self.headers(), timeout=self.timeout)
        return response.getcode(), response.read()

    def post(self, path, body):
        return open_url(self.base + path, method="POST", data=json.dumps(body), headers=self.headers(), timeout=self.timeout)


def port_open(url):
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=2):
            return True
    except OSError:
        return False


def wait_ready(module, client, result):
    model = module.params["model"]
    deadline = time.monotonic() + module.params["wait"]
    started = time.monotonic()
    last = "port not open"
    while True:
        stage = "port"
        try:
            if port_open(client.base):
                stage = "health"
                code, body = client.get("/health")
                if code == 200:
                    stage = "models"
                    code, body = client.get("/v1/models")
                    names = ep.served_names(json.loads(body))
                    result["models"] = names
                    if model is None and names:
                        model = module.params["model"] = names[0]
                    if model in names:
                        result["stage"] = "models"
                        result["seconds_to_ready"] = round(time.monotonic() - started, 1)
                        return True
                    last = "/v1/models lists %s, not %s" % (", ".join(names) or "nothing", model)
                else:
                    last = "/health answered %d" % code
            else:
                last = "port not open"
        except Exception as exc:  # pylint: disable=broad-except
            last = "%s: %s" % (stage, getattr(exc, "reason", None) or exc)
        result["stage"] = stage
        if time.monotonic() + 2 > deadline:
            result["errors"].append("not ready after %d s at %s: %s" % (module.params["wait"], client.base, last))
            return False
        time.sleep(1)


def check_stream(module, client, result):
    started = time.monotonic()
    try:
        response = client.post("/v1/chat/completions", ep.chat_request(module.params["model"], "Hello", max_tokens=4, stream=True))
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


def run_smoke(module, client, result):
    for test in module.params["smoke_tests"]:
        started = time.monotonic()
        entry = {"name": test.get("name"), "kind": test.get("kind")}
        try:
            response = json.loads(client.post("/v1/chat/completions", ep.smoke_request(module.params["model"], test)).read())
            entry["passed"], entry["detail"] = ep.judge(test, response)
        except Exception as exc:  # pylint: disable=broad-except
            entry["passed"], entry["detail"] = False, "request failed: %s" % (getattr(exc, "reason", None) or exc)
        entry["seconds"] = round(time.monotonic() - started, 3)
        result["smoke"].append(entry)
        if not entry["passed"]:
            result["errors"].append("smoke test '%s' failed: %s" % (entry["name"], entry["detail"]))


def ask_canary(module, client, result):
    """The canary's prompts, one at a time (batching can flip near-tie logits), their tokens as IDs."""
    config = module.params["canary"]
    result["canary"] = []
    for prompt in config["prompts"]:
        try:
            response = json.loads(client.post("/v1/completions", canary_prompts.request(module.params["model"], prompt, config)).read())
            tokens = canary_prompts.tokens_of(response)
        except Exception as exc:  # pylint: disable=broad-except
            result["errors"].append("canary prompt %r failed: %s" % (prompt, getattr(exc, "reason", None) or exc))
            return
        result["canary"].append({"prompt": prompt, "tokens": tokens, "text": response["choices"][0].get("text") or ""})


def read_live(module, client, result):
    """Two reads of /metrics, metrics_seconds apart (not the model's answers: counters only)."""
    seconds = module.params["metrics_seconds"]
    try:
        before = ep.metric_sums(client.get("/metrics")[1].decode("utf-8", "replace"))
        time.sleep(seconds)
        after = ep.metric_sums(client.get("/metrics")[1].decode("utf-8", "replace"))
    except Exception as exc:  # noqa: BLE001 (any failure of the read is reported, the status goes on)
        module.warn("could not read %s/metrics: %s" % (client.base, exc))
        return
    result["live"] = ep.live(before, after, seconds)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            model=dict(type="str"),
            api_key=dict(type="str", no_log=True),
            wait=dict(type="int", default=0),
            stream=dict(type="bool", default=True),
            smoke_tests=dict(type="list", elements="dict", default=[]),
            canary=dict(type="dict"),
            metrics_seconds=dict(type="int", default=0),
            request_timeout=dict(type="int", default=120),
            fail_on_error=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    client = Client(module)
    result = {"ready": False, "stage": None, "models": [], "seconds_to_ready": None, "first_token_seconds": None,
              "first_token": None, "smoke": [], "live": None, "errors": []}
    if wait_ready(module, client, result):
        result["ready"] = check_stream(module, client, result) if module.params["stream"] else True
        if result["ready"]:
            run_smoke(module, client, result)
        if result["ready"] and module.params["canary"]:
            ask_canary(module, client, result)
        if result["ready"] and module.params["metrics_seconds"] > 0:
            read_live(module, client, result)
    result["model"] = module.params["model"]
    if result["errors"] and module.params["fail_on_error"]:
        module.fail_json(msg="; ".join(result["errors"]), endpoint=result)
    module.exit_json(changed=False, endpoint=result)


if __name__ == "__main__":
    main()
