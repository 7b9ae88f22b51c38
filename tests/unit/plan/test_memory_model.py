"""memory_plan: KV bytes per token against published figures, and the fit of a deployment."""

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import memory_model as mp

GIB = 1024 ** 3

LLAMA_33_70B = {"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "hidden_size": 8192,
                "max_position_embeddings": 131072}
DEEPSEEK_V3 = {"num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "hidden_size": 7168,
               "kv_lora_rank": 512, "qk_rope_head_dim": 64, "max_position_embeddings": 163840}
NEMOTRON_H = {"num_hidden_layers": 52, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
              "hidden_size": 4096,
              "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"}
SIM_TINY = {"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "hidden_size": 128,
            "max_position_embeddings": 4096}


def test_llama_33_70b_bf16_is_320_kib_per_token_at_tp1():
    assert mp.kv_bytes_per_token(LLAMA_33_70B, tp=1) == 320 * 1024


def test_llama_33_70b_bf16_is_160_kib_per_rank_at_tp2_and_pp2():
    assert mp.kv_bytes_per_token(LLAMA_33_70B, tp=2) == 160 * 1024
    assert mp.kv_bytes_per_token(LLAMA_33_70B, tp=1, pp=2) == 160 * 1024
    assert mp.kv_bytes_per_token(LLAMA_33_70B, tp=2, kv_dtype="fp8") == 80 * 1024


def test_deepseek_v3_mla_is_70272_bytes_on_every_rank():
    assert mp.kv_bytes_per_token(DEEPSEEK_V3, tp=1) == 70272
    assert mp.kv_bytes_per_token(DEEPSEEK_V3, tp=2) == 70272
    assert mp.kv_bytes_per_token(DEEPSEEK_V3, tp=8) == 70272


def test_hybrid_counts_only_attention_layers():
    assert mp.attention_layers(NEMOTRON_H) == (4, 52)
    assert mp.kv_bytes_per_token(NEMOTRON_H, tp=1) == 16 * 1024
    layer_types = dict(NEMOTRON_H)
    del layer_types["hybrid_override_pattern"]
    layer_types["layer_types"] = ["linear_attention"] * 48 + ["full_attention"] * 4
    assert mp.kv_bytes_per_token(layer_types, tp=1) == 16 * 1024


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    assert mp.kv_bytes_per_token(SIM_TINY, tp=2) == 2 * 2 * 1 * 64 * 2


def test_head_divisibility():
    assert mp.head_divisibility(LLAMA_33_70B, 2) == []
    reasons = mp.head_divisibility({"num_attention_heads": 48, "num_key_value_heads": 8, "num_hidden_layers": 62}, 3)
    assert reasons == ["TP=3 neither divides the 8 KV heads nor is a multiple of them"]
    assert "does not divide the 64 attention heads" in mp.head_divisibility(LLAMA_33_70B, 3)[0]


def test_sim_tiny_kv_capacity_equals_what_vllm_logs():
    plan = mp.plan(SIM_TINY, {"n": {"mem_total_bytes": 24 * GIB, "mem_available_bytes": 22 * GIB}}, tp=2,
                   utilization=0.3, kv_cache_bytes=GIB, block_size=128, max_model_len=1024)
    # vLLM 0.32 CPU build, VLLM_CPU_KVCACHE_SPACE=1: "CPU KV cache size: 2,097,152 tokens"
    assert plan["nodes"]["n"]["kv_tokens"] == 2097152
    assert plan["fits"] is True


def spark(available_gib):
    return {"mem_total_bytes": int(121.69 * GIB), "mem_available_bytes": int(available_gib * GIB)}


def test_a_node_short_of_memory_is_named_with_the_shortfall():
    plan = mp.plan(LLAMA_33_70B, {"spark1": spark(117.3), "spark2": spark(95.0)}, tp=2, utilization=0.85,
                   weights_bytes=int(40 * GIB), max_model_len=8192)
    assert plan["fits"] is False
    assert plan["nodes"]["spark1"]["fits"] is True
    assert len(plan["reasons"]) == 1
    reason = plan["reasons"][0]
    assert reason.startswith("spark2: vLLM requests 103.4 GiB (0.85 of the 121.69 GiB CUDA reports) but only 95.0 GiB is available; short by 8.4 GiB")
    assert "gpu_memory_utilization to 0.76" in reason
    assert "unbalanced" in plan["warnings"][0] and "spark2" in plan["warnings"][0]


def test_weights_that_leave_no_kv_room_are_refused():
    plan = mp.plan(LLAMA_33_70B, {"spark1": spark(117.3)}, tp=1, utilization=0.5, weights_bytes=int(70 * GIB))
    assert "leave no room for the KV cache" in plan["reasons"][0]


def test_context_larger_than_the_kv_cache_is_refused_with_the_largest_that_fits():
    plan = mp.plan(LLAMA_33_70B, {"spark1": spark(117.3), "spark2": spark(117.0)}, tp=2, utilization=0.85,
                   weights_bytes=int(180 * GIB), max_model_len=131072)
    node = plan["nodes"]["spark1"]
    expected_kv = node["requested_bytes"] - int(90 * GIB) - 4 * GIB
    assert node["kv_cache_bytes"] == expected_kv
    assert node["kv_tokens"] == (expected_kv // (160 * 1024)) // 16 * 16
    assert 60000 < node["kv_tokens"] < 131072
    assert plan["max_context_tokens"] == min(n["kv_tokens"] for n in plan["nodes"].values())
    assert plan["fits"] is False
    assert "lower max_model_len to %d" % node["kv_tokens"] in plan["reasons"][0]
    assert 0.9 <= plan["recommended_gpu_memory_utilization"] <= 0.95


def test_config_without_layers_is_refused():
    with pytest.raises(mp.MemoryPlanError, match="num_hidden_layers"):
        mp.kv_bytes_per_token({"num_attention_heads": 8})
