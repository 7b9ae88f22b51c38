# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's adapter to the memory plan (plan/memory_model.py): the GB10's figures, each node's probed memory."""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import memory_fit, memory_model
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.nodes import serving_hashes

GIB = 1024 ** 3
# What the serving processes use beside vLLM's pool (CUDA context, API server, Ray): seed 004 had 18.2 GiB
# available while serving at 0.75 on a node that starts at 117.3 GiB available (our captured idle GB10):
# 117.3 - ceil(119.67 x 0.75) - 18.2 = 9.35 GiB.
RUNTIME_BYTES = int(9.35 * GIB)
# The 6 GB warning floor seed 004 kept while pushing the context to 1M tokens (fact 21: a starved Spark stops
# answering SSH).
HEADROOM_FLOOR_BYTES = 6 * GIB
# The first and last ranks hold more than an even share: seed 000's head held an 84 GB shard of a 243 GB model
# on 3 nodes (line 6), 84 / 81 = 1.037.
EDGE_RANK_WEIGHT_FACTOR = 84.0 / 81.0
# An idle Spark as captured (tests/unit/fixtures/meminfo/gb10-idle.txt): the offline plan's memory.
IDLE_GB10 = {"mem_total_bytes": 127602792 * 1024, "mem_available_bytes": 122997964 * 1024, "unified": True,
             "gpu": {"name": "NVIDIA GB10"}, "gpu_process_bytes": 0}


def need(inputs):
    """What vLLM's processes use beside the pool (the profile's ``memory.runtime_bytes``, else RUNTIME_BYTES) and the
    floor left to the OS (vllm_memory_headroom_floor_gib, else the profile's, else HEADROOM_FLOOR_BYTES): the memory
    plan's figures, which the probe's page-cache drop reads too (memory_fit.verdict)."""
    mem = inputs["profile"].get("memory") or {}
    floor_gib = inputs["settings"].get("memory_headroom_floor_gib")
    floor = int(float(floor_gib) * GIB) if floor_gib not in (None, "") else mem.get("headroom_floor_bytes", HEADROOM_FLOOR_BYTES)
    return {"runtime_bytes": int(mem.get("runtime_bytes", RUNTIME_BYTES)), "floor_bytes": None if floor is None else int(floor)}


def node_memory(inputs, node_hashes):
    """Each probed node's memory facts for the memory plan, crediting a deployment of ours that runs unchanged.

    A node whose running container carries the planned config hash keeps what its processes hold
    (``gpu_process_bytes``: vLLM's pool is invisible to MemAvailable's accounting of free memory); a node running
    another configuration of ours gets no credit: its memory is freed only by a clean stop (fact 3).
    """
    nodes = {}
    for name in inputs["order"]:
        facts = inputs["nodes"][name]
        memory = facts.get("memory")
        if not memory and inputs["settings"]["offline"]:
            memory = IDLE_GB10  # plan.yml before the nodes answer: what an idle Spark offers
        if not memory:
            continue
        serving = serving_hashes(facts, name, inputs["settings"]["cluster_name"])
        unchanged = bool(serving) and node_hashes.get(name) in serving
        nodes[name] = dict(memory, cuda_total_bytes=memory_fit.cuda_total(memory), unchanged=unchanged,
                           held_bytes=int(memory.get("gpu_process_bytes") or 0) if unchanged else 0)
    return nodes


def memory(inputs, findings, parallel, flags, utilization, max_len, node_hashes, common):
    profile = inputs["profile"]
    config = inputs.get("model_config") or (profile.get("model") or {}).get("config")
    if not config:
        findings.warn("no config.json for %s (model not on the head yet, and the profile carries no architecture): "
                      "the memory plan is skipped" % profile["model"]["id"])
        return None
    tp = parallel["tensor_parallel_size"]
    for reason in memory_model.head_divisibility(config, tp):
        if (profile.get("parallel") or {}).get("allow_uneven_heads"):
            findings.warn("%s; allowed by profile %s: %s" % (reason, profile["name"],
                                                             profile["parallel"].get("uneven_heads_reason", "the image shards them")))
        else:
            findings.error("all", tp, "%s of %s; vLLM would fail inside the engine. Choose a TP that divides them "
                           "(another node count) or an image that shards heads unevenly" % (reason, profile["model"]["id"]))
    model_max = memory_model._int(memory_model.text_config(config), "max_position_embeddings", "max_sequence_length")
    allow_long = common.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1"
    if max_len and model_max and max_len > model_max and not allow_long:
        findings.error("all", max_len, "max_model_len %d exceeds the model's %d tokens (max_position_embeddings of %s); vLLM "
                       "refuses it. Lower vllm_max_model_len to %d or less, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the "
                       "profile's env" % (max_len, model_max, profile["model"]["id"], model_max))
    nodes = node_memory(inputs, node_hashes)
    mem = profile.get("memory") or {}
    needs = need(inputs)
    weights = inputs.get("weights_bytes") or profile["model"].get("weights_bytes") or 0
    try:
        result = memory_model.plan(
            config, nodes, tp=tp, pp=parallel["pipeline_parallel_size"], utilization=utilization, max_model_len=max_len,
            kv_dtype=(profile.get("vllm") or {}).get("kv_cache_dtype", "auto"), model_dtype=profile["model"].get("dtype", "bfloat16"),
            weights_bytes=weights, overhead_bytes=mem.get("overhead_bytes", 4 * GIB), kv_cache_bytes=mem.get("kv_cache_bytes"),
            block_size=mem.get("block_size", memory_model.DEFAULT_BLOCK_SIZE), order=[n for n in inputs["order"] if n in nodes],
            runtime_bytes=needs["runtime_bytes"], headroom_floor_bytes=needs["floor_bytes"],
            edge_factor=mem.get("edge_rank_weight_factor", EDGE_RANK_WEIGHT_FACTOR),
            proven_utilization=mem.get("proven_utilization"), mamba_dtype=flags.get("--mamba-ssm-cache-dtype"),
            allow_long_context=allow_long)
    except memory_model.MemoryPlanError as exc:
        findings.error("all", None, "memory plan of %s: %s" % (profile["name"], exc))
        return None
    result["config_source"] = "config.json on the head" if inputs.get("model_config") else "the profile's model.config"
    result["config_citation"] = profile["model"].get("config_source")
    result["proven_utilization_source"] = mem.get("proven_utilization_source")
    if nodes:
        for reason in result["reasons"]:
            host = reason.split(":", 1)[0]
            findings.error(host, utilization, reason)
    for warning in result["warnings"]:
        findings.warn(warning)
    return result
