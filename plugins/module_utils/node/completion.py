# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the head's supervisor (module_utils/node/supervisor.py) asks of its own endpoint after a boot before it says
the node serves: one short completion with the key the launcher reads, then the correctness canary's prompts, one at
a time, compared with the reference the head keeps (module_utils/verify/canary.py): a boot must not bring back a
deployment that answers wrong. A vLLM the playbook verified before releasing the supervisor is not asked again.
Runs on the node: stdlib only, through the supervisor's ``ops``.
"""

from __future__ import annotations

import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import canary, endpoint


def ask(step, ops):
    """(passed, detail) of one short completion from the node's own endpoint, with the key the launcher reads."""
    try:
        key = ops.read(step["key_file"]).strip()
    except OSError as exc:
        return False, "no API key at %s: %s" % (step["key_file"], exc)
    status, answer = ops.http(step["url"] + "/v1/chat/completions", endpoint.chat_request(step["model"], "Say hello.", max_tokens=8),
                              key=key, timeout=120)
    if status != 200:
        return False, "the completion answered %s" % status
    passed, detail = endpoint.judge({"kind": "chat"}, answer)
    if not passed:
        return passed, detail
    passed, verdict = ask_canary(step, ops, key)
    return passed, "%s; %s" % (detail, verdict) if verdict else detail


def vouched(config, ops, memo):
    """Why the vLLM the supervisor sees (``memo``: its process group and start time) needs no asking: the playbook that
    released the supervisor verified that very process (its endpoint check and canary; the ``verified`` file). None:
    it is asked (a vLLM started after a boot has another start time, whatever its process group's number)."""
    try:
        verified = json.loads(ops.read(config["verified"]))
    except (KeyError, OSError, ValueError):
        return None
    if not isinstance(verified, dict) or memo.get("pgid") is None or memo.get("started_at") is None or \
            (verified.get("pgid"), verified.get("started_at")) != (memo.get("pgid"), memo.get("started_at")):
        return None
    return "verified by %s, not asked again" % verified.get("by")


def in_flight(step, ops, key=None):
    """How many requests vLLM runs or queues now (its /metrics gauges, through the front door with the key), or 0 when
    it does not say."""
    status, metrics = ops.http(step["url"] + "/metrics", key=key, text=True)
    if status != 200 or not metrics:
        return 0
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    return int(total)


def ask_canary(step, ops, key):
    """(passed, verdict) of the canary's prompts, one at a time, against the reference the head keeps (serve.yml's);
    (True, None) when there is none to compare with."""
    spec = step.get("canary")
    try:
        kept = canary.stored_for(json.loads(ops.read(spec["reference_file"])), spec["basis"]["model"]) if spec else None
    except (OSError, ValueError):
        kept = None
    if not kept:
        return True, None
    busy = in_flight(step, ops, key)
    if busy:  # batched with other requests, a near-tie between two logits may flip: asked alone, or not at all
        return True, "canary not asked: %d requests were in flight" % busy
    answers = []
    for prompt in spec["settings"]["prompts"]:
        status, answer = ops.http(step["url"] + "/v1/completions", canary.request(step["model"], prompt, spec["settings"]),
                                  key=key, timeout=120)
        try:
            if status != 200:
                raise ValueError("it answered %s" % status)
            answers.append(canary.answer_of(prompt, answer))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return False, "canary FAILED: the prompt %r: %s" % (prompt, exc)
    verdict = canary.compare(kept, spec["basis"], answers, spec["settings"])
    return verdict["passed"], verdict["message"]
