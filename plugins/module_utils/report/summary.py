# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""serve.yml's summary of one deployment once it is verified: where it answers, what it runs, how its memory is planned,
what was launched and how long it took, the smoke tests, the canary and the NCCL transport. Pure; the vllm_serve role
shows it, and writes it beside the plan (summary.json) after a run that changed the deployment: the file says what the
last change did, and a run that changes nothing writes nothing.
"""

from __future__ import annotations


def parallelism(parallel):
    return "TP=%s PP=%s DP=%s EP=%s" % (parallel.get("tensor_parallel_size"), parallel.get("pipeline_parallel_size"),
                                        parallel.get("data_parallel_size"), "yes" if parallel.get("expert_parallel") else "no")


def canary_line(verdict, accepted, asked):
    if not asked:
        return "not asked (nothing launched)"
    if verdict is None or accepted:
        return "answers kept as the reference"
    return verdict.get("message")


def summary(plan, launched, seconds_to_ready, endpoint, canary=None, transport=None):
    """The summary. ``launched``: what the head's launch did (container, process group, none); ``seconds_to_ready``:
    from the launch to the verified endpoint, or None; ``endpoint``: vllm_endpoint_info's ``endpoint``; ``canary``:
    {"asked", "verdict", "accepted"} or None; ``transport``: the nccl_transport verdict or None."""
    cluster = plan["cluster"]
    memory = cluster.get("memory") or {}
    smoke = (endpoint or {}).get("smoke") or []
    canary = canary or {}
    return {
        "endpoint": cluster["endpoint"].get("client", cluster["endpoint"])["api_url"],  # where clients ask: the gateway in front of it
        "model": cluster["endpoint"]["served_model_name"],
        "profile": plan["profile"], "backend": plan["backend"], "nodes": list(plan["nodes_order"]),
        "parallelism": parallelism(plan.get("parallel") or {}),
        "image": "%s (vLLM %s)" % (cluster["image"], cluster.get("vllm_version")),
        "memory": {"kv_bytes_per_token_per_rank": memory.get("kv_bytes_per_token"),
                   "max_context_tokens": memory.get("max_context_tokens"),
                   "gpu_memory_utilization": memory.get("gpu_memory_utilization")},
        "launched": launched,
        "seconds_to_ready": seconds_to_ready,
        "first_token_seconds": (endpoint or {}).get("first_token_seconds"),
        # The smoke tests go out together with the streamed token (the longest is their time).
        "smoke_test_seconds": round(max([t.get("seconds") or 0 for t in smoke] or [0]), 2),
        "smoke_tests": [[t.get("name"), t.get("passed")] for t in smoke],
        "canary": canary_line(canary.get("verdict"), canary.get("accepted"), canary.get("asked")),
        "transport": cluster["transport"] + (": " + "; ".join(transport["messages"]) if transport and transport.get("messages") else ""),
    }


def summaries(results, names, plans):
    """What a run that changed nothing shows of each endpoint it asked at once (vllm_endpoint_info's ``endpoints``):
    the first ``len(names)`` are the deployments ``names`` (each one's summary, nothing launched), any after them
    what is shared in front of them (the gateway): where it answers, its models and its first token."""
    shown = {}
    for index, found in enumerate(results):
        if index < len(names):
            shown[names[index]] = summary(plans[names[index]], "none", None, found)
        else:
            shown[found.get("name")] = {"endpoint": "%s/v1" % found.get("url"), "models": found.get("models"),
                                        "first_token_seconds": found.get("first_token_seconds"),
                                        "refused_without_key": found.get("refused_without_key")}
    return shown
