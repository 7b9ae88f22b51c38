# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Memory plan of a vLLM deployment on unified-memory nodes.

KV bytes per token per rank, from a model's config.json (vLLM 0.32 ``AttentionSpec``):

- MHA/GQA: ``2 x L_rank x max(1, H_kv // TP) x head_dim x dtype_bytes`` (heads are replicated when
  TP > H_kv).
- MLA (``kv_lora_rank`` present): one latent per layer, not divided by TP, on every TP rank:
  ``L_rank x (kv_lora_rank + qk_rope_head_dim) x dtype_bytes``.
- Hybrid (Nemotron-H, ``hybrid_override_pattern`` or ``layer_types``): only attention layers hold KV;
  Mamba layers hold a constant per-sequence state instead.

What vLLM does with the budget on an integrated GPU: it requests ``ceil(total x utilization)`` and
refuses to start when MemAvailable is below that; the KV cache gets what is left of the request after
weights, activations and CUDA graphs.
"""

from __future__ import annotations

import math

GIB = 1024 ** 3

DTYPE_BYTES = {
    "auto": 2, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "float": 4,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "fp8_per_token_head": 1,
    "int8_per_token_head": 1, "int4_per_token_head": 0.5, "nvfp4": 0.5,
}
_FULL_ATTENTION = ("full_attention", "attention", "indexed_attention", "sliding_attention")
DEFAULT_BLOCK_SIZE = 16


class MemoryPlanError(Exception):
    """The model configuration cannot be planned; the message names the key."""


def _int(config, *keys, default=None):
    for key in keys:
        value = config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return default


def text_config(config):
    """Multimodal and wrapped configs keep the language model's numbers in ``text_config``."""
    inner = config.get("text_config") or config.get("llm_config")
    if isinstance(inner, dict) and inner.get("num_hidden_layers"):
        return inner
    return config


def attention_layers(config):
    """Number of layers that hold per-token KV, and the total number of layers."""
    config = text_config(config)
    layers = _int(config, "num_hidden_layers", "num_layers", "n_layer")
    if layers is None:
        raise MemoryPlanError("config.json has no num_hidden_layers")
    pattern = config.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("*"), len(pattern)
    types = config.get("layer_types") or config.get("layers_block_type")
    if isinstance(types, list) and types:
        return sum(1 for t in types if t in _FULL_ATTENTION), len(types)
    return layers, layers


def kv_heads(config):
    config = text_config(config)
    heads = _int(config, "num_attention_heads", "n_head", "num_heads")
    kv = _int(config, "num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num",
              "num_attention_groups", default=heads)
    return heads, kv


def head_dim(config):
    config = text_config(config)
    explicit = _int(config, "head_dim")
    if explicit:
        return explicit
    heads, dummy = kv_heads(config)
    hidden = _int(config, "hidden_size", "n_embd", "d_model")
    if not heads or not hidden:
        raise MemoryPlanError("config.json has neither head_dim nor hidden_size and num_attention_heads")
    return hidden // heads


def is_mla(config):
    return bool(text_config(config).get("kv_lora_rank"))


def pp_layers(total, pp, stage=0):
    """Layers on one pipeline stage: floor(L/PP) each, the remainder to the stages before the last."""
    base, rest = divmod(total, pp)
    return base + (1 if stage < rest and stage < pp - 1 else 0)


def kv_bytes_per_token(config, tp=1, pp=1, kv_dtype="auto", model_dtype="bfloat16"):
    """KV-cache bytes one token costs on one rank (the largest pipeline stage)."""
    if kv_dtype in (None, "", "auto"):
        kv_dtype = model_dtype or "bfloat16"
    if kv_dtype not in DTYPE_BYTES:
        raise MemoryPlanError("unknown KV cache dtype %r" % kv_dtype)
    dtype_bytes = DTYPE_BYTES[kv_dtype]
    cfg = text_config(config)
    kv_layers, total_layers = attention_layers(cfg)
    # The first stage gets the remainder; scale attention layers by the stage's share.
    stage_layers = pp_layers(total_layers, pp, 0)
    stage_kv_layers = kv_layers if pp == 1 else int(math.ceil(kv_layers * stage_layers / float(total_layers)))
    if is_mla(cfg):
        latent = int(cfg["kv_lora_rank"]) + _int(cfg, "qk_rope_head_dim", default=0)
        return int(stage_kv_layers * latent * dtype_bytes)
    dummy, kv = kv_heads(cfg)
    per_rank_heads = max(1, kv // tp)
    return int(2 * stage_kv_layers * per_rank_heads * head_dim(cfg) * dtype_bytes)


def head_divisibility(config, tp):
    """Reasons why TP does not divide the model's heads (empty when it does)."""
    heads, kv = kv_heads(config)
    reasons = []
    if heads and heads % tp:
        reasons.append("TP=%d does not divide the %d attention heads" % (tp, heads))
    if kv and kv % tp and tp % kv:
        reasons.append("TP=%d neither divides the %d KV heads nor is a multiple of them" % (tp, kv))
    return reasons


def plan(config, nodes, tp=1, pp=1, utilization=0.8, max_model_len=None, kv_dtype="auto", model_dtype="bfloat16",
         weights_bytes=0, overhead_bytes=4 * GIB, kv_cache_bytes=None, block_size=DEFAULT_BLOCK_SIZE,
         headroom_bytes=2 * GIB, balance_tolerance_bytes=4 * GIB):
    """Memory plan for ``nodes`` (name -> {"mem_total_bytes", "mem_available_bytes"}).

    ``kv_cache_bytes`` fixes the KV cache per rank (``--kv-cache-memory-bytes``, or
    ``VLLM_CPU_KVCACHE_SPACE`` on the CPU build) instead of deriving it from the utilization.
    Returns a dict with per-node figures, the largest context that fits, a recommended utilization,
    and ``fits`` with ``reasons``.
    """
    per_token = kv_bytes_per_token(config, tp, pp, kv_dtype, model_dtype)
    ranks = tp * pp
    weights_per_rank = int(math.ceil(weights_bytes / float(ranks))) if weights_bytes else 0
    cfg = text_config(config)
    model_max = _int(cfg, "max_position_embeddings", "max_sequence_length", "seq_length")
    reasons, warnings, per_node = [], [], {}
    for name in sorted(nodes):
        memory = nodes[name] or {}
        total = int(memory.get("mem_total_bytes") or 0)
        available = int(memory.get("mem_available_bytes") or 0)
        requested = int(math.ceil(total * utilization))
        if kv_cache_bytes is not None:
            kv_bytes = int(kv_cache_bytes)
        else:
            kv_bytes = max(0, requested - weights_per_rank - overhead_bytes)
        tokens = (kv_bytes // per_token) // block_size * block_size if per_token else 0
        entry = {
            "mem_total_bytes": total,
            "mem_available_bytes": available,
            "requested_bytes": requested,
            "weights_bytes": weights_per_rank,
            "overhead_bytes": overhead_bytes if kv_cache_bytes is None else None,
            "kv_cache_bytes": kv_bytes,
            "kv_tokens": tokens,
            "fits": True,
        }
        if available < requested:
            entry["fits"] = False
            reasons.append("%s: vLLM requests %.1f GiB (%.2f of %.1f GiB) but only %.1f GiB is available; short by %.1f GiB. "
                           "Drop page caches, free memory, or lower gpu_memory_utilization to %.2f"
                           % (name, requested / GIB, utilization, total / GIB, available / GIB, (requested - available) / GIB,
                              max(0.0, math.floor(100.0 * (available - headroom_bytes) / total) / 100.0) if total else 0.0))
        if kv_cache_bytes is None and kv_bytes <= 0:
            entry["fits"] = False
            reasons.append("%s: the weights (%.1f GiB per rank) and overhead (%.1f GiB) leave no room for the KV cache "
                           "within %.1f GiB" % (name, weights_per_rank / GIB, overhead_bytes / GIB, requested / GIB))
        elif max_model_len and tokens < max_model_len:
            entry["fits"] = False
            reasons.append("%s: the KV cache holds %d tokens, fewer than max_model_len %d; lower max_model_len to %d "
                           "or raise gpu_memory_utilization" % (name, tokens, max_model_len, tokens))
        per_node[name] = entry

    availables = [e["mem_available_bytes"] for e in per_node.values() if e["mem_total_bytes"]]
    if len(availables) > 1 and max(availables) - min(availables) > balance_tolerance_bytes:
        low = min(per_node, key=lambda n: per_node[n]["mem_available_bytes"])
        high = max(per_node, key=lambda n: per_node[n]["mem_available_bytes"])
        figures = (low, per_node[low]["mem_available_bytes"] / GIB, high, per_node[high]["mem_available_bytes"] / GIB, low)
        warnings.append("free memory is unbalanced: %s has %.1f GiB available, %s %.1f GiB; the slow rank times out. "
                        "Drop caches or free memory on %s" % figures)

    tokens_all = [e["kv_tokens"] for e in per_node.values()] or [0]
    max_context = min(tokens_all)
    if model_max:
        max_context = min(max_context, model_max)
    totals = [e["mem_total_bytes"] for e in per_node.values() if e["mem_total_bytes"]]
    recommended = None
    if totals and availables:
        fraction = min((e["mem_available_bytes"] - headroom_bytes) / float(e["mem_total_bytes"])
                       for e in per_node.values() if e["mem_total_bytes"])
        recommended = max(0.0, min(0.95, math.floor(fraction * 100) / 100.0))
    return {
        "kv_bytes_per_token": per_token,
        "kv_dtype": kv_dtype,
        "attention_layers": attention_layers(cfg)[0],
        "mla": is_mla(cfg),
        "weights_bytes": weights_bytes,
        "gpu_memory_utilization": utilization,
        "max_model_len": max_model_len,
        "model_max_context": model_max,
        "max_context_tokens": max_context,
        "recommended_gpu_memory_utilization": recommended,
        "nodes": per_node,
        "fits": not reasons,
        "reasons": reasons,
        "warnings": warnings,
    }
