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

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.memory_fit import (  # noqa: F401  pylint: disable=unused-import
    GB10_CUDA_TOTAL_BYTES, admits, cuda_total, needed_bytes, utilization_keeping)

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
    return int(2 * stage_kv_layers * kv_heads_per_rank(kv, tp) * head_dim(cfg) * dtype_bytes)


def kv_heads_per_rank(kv, tp):
    """KV heads one TP rank holds: kv/TP; replicated (1) when TP > kv; rounded up when TP shards them
    unevenly (an image with virtual head sharding, such as the MiniMax-M3 TP=3 fork: 4 heads over 3 ranks
    leave 2 on some rank, and every rank is planned for the largest share)."""
    if kv <= tp:
        return 1
    return int(math.ceil(kv / float(tp)))


def mamba_layers(config):
    """Number of Mamba (state-space) layers of a hybrid model (0 for a pure attention model)."""
    config = text_config(config)
    pattern = config.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("M")
    types = config.get("layers_block_type") or config.get("layer_types")
    if isinstance(types, list):
        return sum(1 for t in types if t in ("mamba", "linear_attention"))
    return 0


def mamba_state_bytes(config, tp=1, state_dtype=None):
    """Bytes of Mamba-2 state one sequence holds on one TP rank, whatever its length.

    vLLM ``mamba2_state_shape``: per Mamba layer a convolution state of ``(conv_kernel - 1) x
    (mamba_num_heads x mamba_head_dim + 2 x n_groups x ssm_state_size) / TP`` and an SSM state of
    ``mamba_num_heads / TP x mamba_head_dim x ssm_state_size``, both in the SSM cache dtype
    (``mamba_ssm_cache_dtype`` of config.json, else the model's dtype).
    """
    cfg = text_config(config)
    layers = mamba_layers(cfg)
    if not layers:
        return 0
    heads = _int(cfg, "mamba_num_heads", default=0)
    head = _int(cfg, "mamba_head_dim", default=0)
    state = _int(cfg, "ssm_state_size", "mamba_d_state", default=0)
    groups = _int(cfg, "n_groups", default=1)
    kernel = _int(cfg, "conv_kernel", "mamba_d_conv", default=4)
    if not heads or not head or not state:
        raise MemoryPlanError("config.json of a hybrid model needs mamba_num_heads, mamba_head_dim and ssm_state_size")
    dtype = state_dtype if state_dtype not in (None, "", "auto") else cfg.get("mamba_ssm_cache_dtype") or cfg.get("torch_dtype") or "bfloat16"
    if dtype not in DTYPE_BYTES:
        raise MemoryPlanError("unknown Mamba state dtype %r" % dtype)
    conv = (kernel - 1) * (heads * head + 2 * groups * state) // tp
    ssm = (heads // tp) * head * state
    return int(layers * (conv + ssm) * DTYPE_BYTES[dtype])


def head_divisibility(config, tp):
    """Reasons why TP does not divide the model's heads (empty when it does)."""
    heads, kv = kv_heads(config)
    reasons = []
    if heads and heads % tp:
        reasons.append("TP=%d does not divide the %d attention heads" % (tp, heads))
    if kv and kv % tp and tp % kv:
        reasons.append("TP=%d neither divides the %d KV heads nor is a multiple of them" % (tp, kv))
    return reasons


def rank_weights(weights_bytes, ranks, edge_factor=1.0):
    """Weights each rank holds, in rank order: an even share, times ``edge_factor`` on the first and the
    last rank (embeddings, the LM head, replicated norms and router gates do not split evenly; seed 000's
    head held an 84 GB shard of a 243 GB model on 3 nodes, 1.037 x the even 81 GB)."""
    if not weights_bytes or ranks < 1:
        return [0] * max(ranks, 0)
    share = weights_bytes / float(ranks)
    return [int(math.ceil(share * (edge_factor if rank in (0, ranks - 1) else 1.0))) for rank in range(ranks)]


def plan(config, nodes, tp=1, pp=1, utilization=0.8, max_model_len=None, kv_dtype="auto", model_dtype="bfloat16",
         weights_bytes=0, overhead_bytes=4 * GIB, kv_cache_bytes=None, block_size=DEFAULT_BLOCK_SIZE,
         headroom_bytes=2 * GIB, balance_tolerance_bytes=4 * GIB, order=None, runtime_bytes=0,
         headroom_floor_bytes=None, edge_factor=1.0, proven_utilization=None, mamba_dtype=None, allow_long_context=False):
    """Memory plan for ``nodes`` (name -> {"mem_total_bytes", "mem_available_bytes"} and optionally
    "cuda_total_bytes", "held_bytes", "unchanged"), ranks in ``order`` (default: sorted names).

    - vLLM requests ``ceil(cuda_total x utilization)`` where ``cuda_total`` is what CUDA reports (on a GB10
      119.67 GiB, not MemTotal's 121.7), and refuses to start when MemAvailable is below it.
    - Inside that request: this rank's weights, ``overhead_bytes`` (activations, graphs), and the KV cache.
    - Outside it: ``runtime_bytes`` that the serving processes use beside the pool (CUDA context, Python, Ray).
      What is left of MemAvailable is the headroom the OS keeps; below ``headroom_floor_bytes`` it is refused.
    - A node whose own deployment runs unchanged (``unchanged``) keeps its memory: what it holds
      (``held_bytes``) is credited, and its headroom is the MemAvailable measured now.
    - ``kv_cache_bytes`` fixes the KV cache per rank (``--kv-cache-memory-bytes``, or
      ``VLLM_CPU_KVCACHE_SPACE`` on the CPU build) instead of deriving it from the utilization.
    - Hybrid models hold a constant Mamba state per sequence beside the KV of their attention layers;
      the concurrency that fits counts both.
    Without ``max_model_len`` vLLM takes the model's ``max_position_embeddings``, and so does the plan; with
    ``allow_long_context`` (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) the largest context is not capped by it.
    Returns per-node figures, the largest context that fits, a recommended utilization (never above
    ``proven_utilization``, what the deployments proved), and ``fits`` with ``reasons``.
    """
    per_token = kv_bytes_per_token(config, tp, pp, kv_dtype, model_dtype)
    per_sequence = mamba_state_bytes(config, tp, mamba_dtype)
    order = list(order or sorted(nodes))
    ranks = tp * pp
    shares = rank_weights(weights_bytes, ranks, edge_factor)
    cfg = text_config(config)
    model_max = _int(cfg, "max_position_embeddings", "max_sequence_length", "seq_length")
    floor_bytes = headroom_floor_bytes if headroom_floor_bytes is not None else 0
    max_model_len = max_model_len or model_max
    reasons, warnings, per_node = [], [], {}
    cap = float(proven_utilization) if proven_utilization else 1.0  # a remedy never names more than the deployments proved
    for rank, name in enumerate(order):
        memory = nodes.get(name) or {}
        total = int(memory.get("mem_total_bytes") or 0)
        cuda_total = int(memory.get("cuda_total_bytes") or total)
        available = int(memory.get("mem_available_bytes") or 0)
        unchanged = bool(memory.get("unchanged"))
        held = int(memory.get("held_bytes") or 0) if unchanged else 0
        usable = available + held
        requested = needed_bytes(cuda_total, utilization)
        weights = shares[rank] if rank < len(shares) else (shares[-1] if shares else 0)
        if kv_cache_bytes is not None:
            kv_bytes = int(kv_cache_bytes)
        else:
            kv_bytes = max(0, requested - weights - overhead_bytes)
        tokens = (kv_bytes // per_token) // block_size * block_size if per_token else 0
        sequence_bytes = per_token * (max_model_len or 0) + per_sequence
        concurrency = kv_bytes // sequence_bytes if sequence_bytes and max_model_len else None
        headroom = available if unchanged else available - requested - runtime_bytes
        entry = {
            "rank": rank,
            "mem_total_bytes": total,
            "cuda_total_bytes": cuda_total,
            "mem_available_bytes": available,
            "serving_unchanged": unchanged,
            "held_bytes": held,
            "requested_bytes": requested,
            "weights_bytes": weights,
            "overhead_bytes": overhead_bytes if kv_cache_bytes is None else None,
            "runtime_bytes": runtime_bytes,
            "kv_cache_bytes": kv_bytes,
            "kv_bytes_per_token": per_token,
            "mamba_state_bytes_per_sequence": per_sequence,
            "kv_tokens": tokens,
            "max_concurrency": concurrency,
            "headroom_bytes": headroom,
            "fits": True,
        }
        if usable < requested:
            entry["fits"] = False
            reasons.append("%s: vLLM requests %.1f GiB (%.2f of the %.2f GiB CUDA reports) but only %.1f GiB is available; "
                           "short by %.1f GiB. Drop page caches, free memory, or lower gpu_memory_utilization to %.2f"
                           % (name, requested / GIB, utilization, cuda_total / GIB, usable / GIB, (requested - usable) / GIB,
                              min(utilization_keeping(usable, runtime_bytes + max(floor_bytes, headroom_bytes), cuda_total), cap)))
        elif not unchanged and not admits(cuda_total, available, utilization, runtime_bytes, headroom_floor_bytes):
            entry["fits"] = False
            keeps = min(utilization_keeping(available, runtime_bytes + headroom_floor_bytes, cuda_total), cap)
            figures = (name, requested / GIB, runtime_bytes / GIB, headroom / GIB, headroom_floor_bytes / GIB, keeps, name)
            reasons.append("%s: after vLLM's %.1f GiB and %.1f GiB for its processes, %.1f GiB would be left to the OS, below the "
                           "%.1f GiB floor (a starved Spark stops answering SSH); lower gpu_memory_utilization to %.2f, or free "
                           "memory on %s" % figures)
        if kv_cache_bytes is None and kv_bytes <= 0:
            entry["fits"] = False
            reasons.append("%s: the weights (%.1f GiB on rank %d) and overhead (%.1f GiB) leave no room for the KV cache "
                           "within %.1f GiB" % (name, weights / GIB, rank, overhead_bytes / GIB, requested / GIB))
        elif max_model_len and tokens < max_model_len:
            entry["fits"] = False
            reasons.append("%s: the KV cache holds %d tokens, fewer than max_model_len %d; lower max_model_len to %d "
                           "or raise gpu_memory_utilization" % (name, tokens, max_model_len, tokens))
        per_node[name] = entry

    availables = [e["mem_available_bytes"] + e["held_bytes"] for e in per_node.values() if e["mem_total_bytes"]]
    if len(availables) > 1 and max(availables) - min(availables) > balance_tolerance_bytes:
        low = min(per_node, key=lambda n: per_node[n]["mem_available_bytes"] + per_node[n]["held_bytes"])
        high = max(per_node, key=lambda n: per_node[n]["mem_available_bytes"] + per_node[n]["held_bytes"])
        figures = (low, per_node[low]["mem_available_bytes"] / GIB, high, per_node[high]["mem_available_bytes"] / GIB, low)
        warnings.append("free memory is unbalanced: %s has %.1f GiB available, %s %.1f GiB; the slow rank times out. "
                        "Drop caches or free memory on %s" % figures)

    tokens_all = [e["kv_tokens"] for e in per_node.values()] or [0]
    max_context = min(tokens_all)
    if model_max and not allow_long_context:
        max_context = min(max_context, model_max)
    recommended = None
    if per_node and availables:
        keep = runtime_bytes + (floor_bytes if headroom_floor_bytes is not None else headroom_bytes)
        recommended = min(0.95, min(utilization_keeping(e["mem_available_bytes"] + e["held_bytes"], keep, e["cuda_total_bytes"])
                                    for e in per_node.values() if e["cuda_total_bytes"]))
        if proven_utilization:
            recommended = min(recommended, float(proven_utilization))
    concurrencies = [e["max_concurrency"] for e in per_node.values() if e["max_concurrency"] is not None]
    return {
        "kv_bytes_per_token": per_token,
        "mamba_state_bytes_per_sequence": per_sequence,
        "kv_dtype": kv_dtype,
        "attention_layers": attention_layers(cfg)[0],
        "mla": is_mla(cfg),
        "weights_bytes": weights_bytes,
        "gpu_memory_utilization": utilization,
        "max_model_len": max_model_len,
        "model_max_context": model_max,
        "max_context_tokens": max_context,
        "max_concurrency": min(concurrencies) if concurrencies else None,
        "headroom_floor_bytes": headroom_floor_bytes,
        "recommended_gpu_memory_utilization": recommended,
        "proven_gpu_memory_utilization": proven_utilization,
        "nodes": per_node,
        "fits": not reasons,
        "reasons": reasons,
        "warnings": warnings,
    }
