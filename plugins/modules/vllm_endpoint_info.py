#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_endpoint_info
short_description: Check that a vLLM endpoint is ready and does what its profile promises
version_added: 1.0.0
description:
  - Runs on the controller, in the controller's process (its action plugin), as a client asks the endpoint; the
    module is the same check for a task sent elsewhere.
  - Readiness as a user sees it, in order, waiting up to O(wait) seconds; the TCP port accepts, C(/health)
    answers 200, C(/v1/models) lists O(model), and a streamed chat completion yields a first token.
  - With the streamed request, at once, the profile's smoke tests (O(smoke_tests)), as users' first requests arrive
    together (a fresh vLLM does its first step's work for whichever comes first); a chat answer, no control tokens
    leaked, a tool call parsed into C(tool_calls), reasoning separated from the content (or kept inline in
    C(<think>) where the parser intends it). A wrong parser fails silently in vLLM; these checks make it fail here.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.INFO_MODULE
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
options:
  url:
    description:
      - Base URL of the endpoint, without C(/v1).
      - One of O(url) and O(endpoints) is required.
    type: str
  endpoints:
    description:
      - Several endpoints asked at the same time, each with the task's other options (O(wait), O(stream), O(smoke_tests),
        ...); RV(endpoints) holds each one's result, in order. A run that changed nothing asks every endpoint it serves
        this way (the vllm_serve role's C(check)), and waits for the slowest one, not for their sum.
      - vLLM's rank 0 keeps a core busy for about a second after each request it serves (its shared-memory queue spins
        before it sleeps); endpoints asked one after another each wait on the one before.
    type: list
    elements: dict
    suboptions:
      name:
        description: A name for the endpoint in RV(endpoints) and in the errors (a deployment's, the gateway's).
        type: str
      url:
        description: As O(url).
        type: str
        required: true
      model:
        description: As O(model).
        type: str
      models:
        description: As O(models).
        type: list
        elements: str
        default: []
      api_key:
        description: As O(api_key).
        type: str
      api_key_file:
        description: As O(api_key_file).
        type: path
      ca_file:
        description: As O(ca_file).
        type: path
      health_path:
        description: As O(health_path).
        type: str
        default: /health
      ready_probe:
        description: As O(ready_probe).
        type: bool
        default: false
      refused_without_key:
        description: As O(refused_without_key).
        type: bool
        default: false
      keyless_paths:
        description: As O(keyless_paths).
        type: list
        elements: str
        default: [/v1/models]
      keyless_status:
        description: As O(keyless_status).
        type: int
  model:
    description:
      - Served model name.
      - Omitted, the first name C(/v1/models) lists is used (a status check without the plan).
    type: str
  models:
    description:
      - More names C(/v1/models) must list before the endpoint counts as ready (a gateway's every route), beside O(model),
        which the stream and the smoke tests ask.
    type: list
    elements: str
    default: []
  api_key:
    description: The endpoint's API key (sent as a bearer token, never logged).
    type: str
  api_key_file:
    description:
      - A file holding the endpoint's API key, read where the check runs (the controller, for this action), so that a task
        asking several endpoints names each one's key without reading it into a variable. Not with O(api_key).
    type: path
  ca_file:
    description:
      - For an C(https) URL, the PEM file of the certificate authorities its certificate is verified against, read where
        the check runs; the front door's own self-signed certificate with C(vllm_tls=true) and no certificate of the
        inventory's. Default, the system's authorities. The certificate is always verified, its name too.
    type: path
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
      - The prompts are asked once the endpoint is ready, greedy (temperature 0, the seed fixed), their tokens
        returned as IDs; RV(endpoint.canary) holds the answers. The serve role compares them with the reference
        (module_utils/verify/canary.py).
      - With C(reference) (the model's kept reference, C(basis) and C(answers) of C(prompt) and C(tokens)) asked on
        C(basis) (the basis now, the plan's C(cluster.canary.basis)), all prompts go in one request, sent with the
        streamed request and the smoke tests; a prompt whose answer is not the reference's token for token is then
        asked again alone (batching can flip a near-tie; the reference was asked alone). Otherwise each prompt is
        asked alone.
    type: dict
  metrics_seconds:
    description:
      - With a value above 0, read vLLM's C(/metrics) twice this many seconds apart once the endpoint is ready, and
        return what it does now in RV(endpoint.live) (status.yml shows it). 0 does not read it.
    type: int
    default: 0
  health_path:
    description:
      - The readiness stage's health route, asked until it answers 200. The front door answers on C(/health) (vLLM's,
        or the gateway's liveness behind it); another router may answer on a route of its own.
    type: str
    default: /health
  ready_probe:
    description:
      - The endpoint is a router (the gateway in front of a deployment); once C(/v1/models) lists the model, also wait,
        within O(wait), until one non-streamed token of it answers through the router. A router lists its routes at
        once and answers an error status while the backend loads.
    type: bool
    default: false
  refused_without_key:
    description:
      - Once ready, also ask each of O(keyless_paths) without any key and fail unless each is refused (an error status), as
        the endpoint must not answer a client without the key. RV(endpoint.refused_without_key) says what it found.
    type: bool
    default: false
  keyless_paths:
    description:
      - With O(refused_without_key), the routes asked without the key, each of which must answer an error. The front door
        asks the key on every route but its health route; its plan lists routes vLLM itself would answer without one.
    type: list
    elements: str
    default: [/v1/models]
  keyless_status:
    description:
      - With O(refused_without_key), the one status each of O(keyless_paths) must answer (the front door's 401); any error
        status when omitted. A path is a GET; C(POST /path) sends an empty JSON object.
    type: int
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
endpoints:
  description: With O(endpoints), each one's result as RV(endpoint), in order, with the C(name) it was given.
  returned: with O(endpoints)
  type: list
  elements: dict
endpoint:
  description: What the checks found.
  returned: with O(url)
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
    refused_without_key:
      description: With O(refused_without_key), whether every one of O(keyless_paths) refused a client without the key; else null.
      type: bool
    canary:
      description: With O(canary), one entry per prompt with C(prompt), C(tokens) (IDs) and C(text).
      type: list
      elements: dict
    canary_asked_alone:
      description: With O(canary), how many prompts were asked alone (every one without a reference on this basis).
      type: int
    canary_together_error:
      description: Why the canary's one request failed, when it did (its prompts were then asked alone).
      type: str
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify.endpoint_check import (
    ARGUMENT_SPEC, MUTUALLY_EXCLUSIVE, REQUIRED_ONE_OF, answer, errors_of)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_one_of=REQUIRED_ONE_OF, mutually_exclusive=MUTUALLY_EXCLUSIVE,
                           supports_check_mode=True)
    result = answer(module.params, module.warn)
    errors = errors_of(result)
    if errors and module.params["fail_on_error"]:
        module.fail_json(msg="; ".join(errors), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
