"""The memory plan against what the seed deployments measured on DGX Sparks.

Each test quotes the figure it holds (seed file, line). Where the plan and a write-up disagree, the test says
which one is right and why.
"""

import copy
import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import (
    deployment, memory_model as mp, profiles)
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import unified_memory as um

from helpers import ROOT, memory_facts, read_fixture, spark_inputs

GIB = 1024 ** 3
GB = 10 ** 9
SEED_PROFILES = ["minimax_m25_nvfp4_ep", "minimax_m27_mxfp4", "minimax_m27_nvfp4_gb10", "minimax_m3_nvfp4_tp3",
                 "nemotron3_super_nvfp4"]


def profile(name):
    return profiles.load(os.path.join(ROOT, "profiles", name + ".yml"))


def with_available(facts, gib):
    facts = copy.deepcopy(facts)
    facts["mem_available_bytes"] = int(gib * GIB)
    return facts


def plan_for(name, tmp_path, available=None, count=None, overrides=None, settings=None):
    prof = profile(name)
    inputs = spark_inputs(prof, tmp_path, count=count or prof["parallel"]["nodes"], settings=settings)
    for host, gib in (available or {}).items():
        inputs["nodes"][host]["memory"] = with_available(inputs["nodes"][host]["memory"], gib)
    inputs["overrides"] = overrides or {}
    return deployment.plan_deployment(inputs)


def messages(plan):
    return [e["message"] for e in plan["errors"]]


def test_gb10_pool_is_the_cuda_total_not_memtotal():
    """Seed 001, line 20: "Free memory on device cuda:0 (11.19/119.67 GiB) is less than desired GPU memory
    utilization". vLLM sizes its request from CUDA's 119.67 GiB, not MemTotal's 121.69 GiB."""
    facts = memory_facts("gb10-idle.txt")
    assert round(facts["mem_total_bytes"] / float(GIB), 2) == 121.69
    assert mp.cuda_total(facts) == int(119.67 * GIB)


def test_the_mxfp4_failure_with_page_cache_is_refused_before_launch(tmp_path):
    """Seed 001, line 20: 11.19 GiB free after a crash with the weights in page cache; the plan refuses with the
    fix the write-up found (drop caches), naming both nodes, before anything starts."""
    plan = plan_for("minimax_m27_mxfp4", tmp_path, available={"spark1": 11.19, "spark2": 11.19})
    assert not plan["ok"]
    first = messages(plan)[0]
    assert first.startswith("spark1: vLLM requests 98.1 GiB (0.82 of the 119.67 GiB CUDA reports) but only 11.2 GiB")
    assert "Drop page caches" in first
    # "After the drop, expect to see ~114 GiB free on each Spark" (line 23): then it fits, with the floor kept.
    plan = plan_for("minimax_m27_mxfp4", tmp_path, available={"spark1": 114, "spark2": 114})
    assert plan["ok"], plan["errors"]
    assert plan["cluster"]["memory"]["nodes"]["spark1"]["headroom_bytes"] >= 6 * GIB


def test_first_and_last_ranks_hold_more_than_an_even_share(tmp_path):
    """Seed 000, line 6: the head held an 84 GB shard of a 243 GB model over 3 nodes (an even share is 81 GB)."""
    plan = plan_for("minimax_m3_nvfp4_tp3", tmp_path)
    nodes = plan["cluster"]["memory"]["nodes"]
    assert abs(nodes["spark1"]["weights_bytes"] - 84 * GB) < 0.01 * GB
    assert abs(nodes["spark2"]["weights_bytes"] - 81 * GB) < 0.01 * GB
    assert nodes["spark3"]["weights_bytes"] == nodes["spark1"]["weights_bytes"]
    # Seed 003, line 10: "~63 GB model weights per GPU" of ~126 GB over 2: both ranks are first or last, so the
    # plan counts 65.3 GB, 3.7% over the write-up's round figure: the plan is right to keep the margin seed 000 measured.
    m25 = plan_for("minimax_m25_nvfp4_ep", tmp_path)["cluster"]["memory"]["nodes"]["spark1"]["weights_bytes"]
    assert 63 * GB < m25 < 63 * GB * 1.04


def test_m3_at_vllms_default_utilization_leaves_the_head_under_the_floor(tmp_path):
    """Seed 000, line 7: after warm-up the head "sits at ~96 percent RAM ... ~4.4GB free" at vLLM's default 0.9.
    The plan refuses that (under seed 004's 6 GB floor, fact 21) and accepts the profile's 0.85."""
    plan = plan_for("minimax_m3_nvfp4_tp3", tmp_path, overrides={"gpu_memory_utilization": 0.9})
    assert not plan["ok"]
    assert any("below the 6.0 GiB floor" in m and "lower gpu_memory_utilization to 0.85" in m for m in messages(plan))
    assert plan_for("minimax_m3_nvfp4_tp3", tmp_path)["ok"]
    # The restore variable of that deviation lowers the floor with it, as the profile says.
    plan = plan_for("minimax_m3_nvfp4_tp3", tmp_path, overrides={"gpu_memory_utilization": 0.9},
                    settings={"memory_headroom_floor_gib": 0})
    assert plan["ok"], plan["errors"]


def test_unequal_sparks_after_a_reboot(tmp_path):
    """Seed 002, lines 17-22: 107 and 100 GB available after a reboot, with ~29 GB of page cache; Spark 2 swapped and
    rank 0 timed out. The plan warns about the imbalance naming spark2 and refuses 0.88 there (line 59: the memory
    check failed at 0.88). At 0.82 vLLM would start on both, but the headroom left beside it is under the floor on
    both: the write-up's Spark 2 swapped at that margin until the page cache was dropped (line 22). The plan is
    right to refuse until then; after the drop (~114 GiB, seed 001 line 23) it passes."""
    plan = plan_for("minimax_m27_nvfp4_gb10", tmp_path, available={"spark1": 107, "spark2": 100},
                    overrides={"gpu_memory_utilization": 0.88})
    assert any("unbalanced" in w and "Drop caches or free memory on spark2" in w for w in plan["warnings"])
    assert any(m.startswith("spark2: vLLM requests 105.3 GiB") for m in messages(plan))
    plan = plan_for("minimax_m27_nvfp4_gb10", tmp_path, available={"spark1": 107, "spark2": 100})
    assert [e["host"] for e in plan["errors"]] == ["spark1", "spark2"]
    assert all("floor" in m for m in messages(plan)) and "free memory on spark2" in messages(plan)[1]
    assert plan_for("minimax_m27_nvfp4_gb10", tmp_path, available={"spark1": 114, "spark2": 114})["ok"]


def test_hybrid_models_carry_mamba_state_per_sequence():
    """Nemotron-3-Super: 40 Mamba-2 layers, each with a conv state of 3 x (128 x 64 + 2 x 8 x 128) / TP and an SSM
    state of 128 / TP x 64 x 128, in float32 (mamba_ssm_cache_dtype of config.json), whatever the context."""
    config = profile("nemotron3_super_nvfp4")["model"]["config"]
    assert mp.attention_layers(config) == (8, 88) and mp.mamba_layers(config) == 40
    per_rank = mp.mamba_state_bytes(config, tp=2)
    assert per_rank == 40 * (3 * 10240 // 2 + 64 * 64 * 128) * 4 == 86343680
    assert mp.kv_bytes_per_token(config, tp=2, kv_dtype="fp8") == 2 * 8 * 1 * 128 * 1
    plan = mp.plan(config, {"n": {"mem_total_bytes": 100 * GIB, "mem_available_bytes": 100 * GIB}}, tp=2,
                   utilization=0.5, kv_dtype="fp8", max_model_len=1048576, overhead_bytes=0)
    kv = plan["nodes"]["n"]["kv_cache_bytes"]
    assert plan["nodes"]["n"]["max_concurrency"] == kv // (2048 * 1048576 + per_rank)
    # A pure attention model has no such state.
    assert mp.mamba_state_bytes(profile("minimax_m27_mxfp4")["model"]["config"], tp=2) == 0


def test_nemotron_at_512k_and_1m_keeps_the_headroom_the_write_up_saw(tmp_path):
    """Seed 004: at 0.75 and 512k tokens, "103.5G used, 18.2G avail of 121.7G"; 1M "landing near but still above
    the 6 GB warning floor". The plan's headroom is MemAvailable minus vLLM's request (0.75 x 119.67 GiB) minus
    what its processes use beside the pool; from an idle GB10 (117.3 GiB available) it is 18.2 GiB at either
    context. The write-up projected 9-10 GB more per node for 1M; the plan keeps 18.2 GiB because vLLM requests
    its whole pool at start whatever max_model_len is (the KV of one 1M sequence, 2 GiB per rank at fp8, comes
    out of that pool). The plan is right about where the bytes go; the 6 GB floor covers the write-up's margin."""
    for length in (524288, 1048576):
        plan = plan_for("nemotron3_super_nvfp4", tmp_path, overrides={"max_model_len": length})
        assert plan["ok"], plan["errors"]
        node = plan["cluster"]["memory"]["nodes"]["spark1"]
        assert abs(node["headroom_bytes"] / float(GIB) - 18.2) < 0.05
        assert node["headroom_bytes"] >= 6 * GIB
        assert node["kv_bytes_per_token"] * 1048576 == 2 * GIB
        assert node["max_concurrency"] >= 1 and node["kv_tokens"] >= length


def test_headroom_below_the_floor_is_refused_naming_node_and_fix(tmp_path):
    """Seed 004: the 6 GB warning floor. A node with 104 GiB available would keep 4.9 GiB: refused, with the
    utilization that keeps the floor."""
    plan = plan_for("nemotron3_super_nvfp4", tmp_path, available={"spark2": 104})
    assert [e["host"] for e in plan["errors"]] == ["spark2"]
    assert "4.9 GiB would be left to the OS, below the 6.0 GiB floor" in messages(plan)[0]
    assert "lower gpu_memory_utilization to 0.74" in messages(plan)[0]


def test_the_plan_shows_every_ranks_figures(tmp_path):
    plan = plan_for("minimax_m27_mxfp4", tmp_path)
    for node in plan["cluster"]["memory"]["nodes"].values():
        for key in ("weights_bytes", "kv_bytes_per_token", "kv_tokens", "max_concurrency", "headroom_bytes"):
            assert node[key] is not None and node[key] > 0, key


def test_recommended_utilization_never_exceeds_what_the_seeds_proved(tmp_path):
    """An idle Spark would allow ~0.89; the recommendation stays at what each seed ran (0.82 for the MXFP4 and
    GB10 M2.7 profiles, 0.85 for M2.5 and M3, 0.75 for Nemotron)."""
    for name in SEED_PROFILES:
        plan = plan_for(name, tmp_path / name)
        memory = plan["cluster"]["memory"]
        proven = profile(name)["memory"]["proven_utilization"]
        assert memory["recommended_gpu_memory_utilization"] <= proven, name
        assert plan["gpu_memory_utilization"] <= proven, name


def serving_facts():
    """A Spark serving a model: ~19 GiB available, vLLM's engine holding 97 GiB (captured meminfo and nvidia-smi)."""
    return um.summarize(um.parse_meminfo(read_fixture("meminfo", "gb10-serving.txt")),
                        um.parse_gpu_query(read_fixture("nvidia_smi", "gb10-query-gpu.csv")),
                        um.parse_compute_apps(read_fixture("nvidia_smi", "gb10-compute-apps-serving.csv")))


def test_a_second_run_on_a_serving_spark_passes_and_a_changed_one_is_refused(tmp_path):
    """Item 6 of the seed issue: a re-run with the same config hash credits what our running vLLM holds; another
    config on the same node is refused when it does not fit (the old one's memory is freed only by a clean stop)."""
    prof = profile("minimax_m27_mxfp4")
    inputs = spark_inputs(prof, tmp_path)
    first = deployment.plan_deployment(copy.deepcopy(inputs))
    assert first["ok"], first["errors"]
    facts = serving_facts()
    assert round(facts["mem_available_bytes"] / float(GIB), 1) == 19.4
    for name in ("spark1", "spark2"):
        inputs["nodes"][name]["memory"] = facts
        inputs["nodes"][name]["serving_hashes"] = [first["nodes"][name]["config_hash"]]
    again = deployment.plan_deployment(copy.deepcopy(inputs))
    assert again["ok"], again["errors"]
    assert again["nodes"]["spark1"]["config_hash"] == first["nodes"]["spark1"]["config_hash"]
    node = again["cluster"]["memory"]["nodes"]["spark1"]
    assert node["serving_unchanged"] and node["held_bytes"] == 99328 * 1024 * 1024
    assert node["headroom_bytes"] == facts["mem_available_bytes"]
    # A changed config (another object store size) on the same serving node: no credit, refused with the fix.
    inputs["profile"] = copy.deepcopy(prof)
    inputs["profile"]["ray"]["object_store_memory"] = 1073741824
    changed = deployment.plan_deployment(copy.deepcopy(inputs))
    assert changed["nodes"]["spark1"]["config_hash"] != first["nodes"]["spark1"]["config_hash"]
    assert not changed["ok"]
    assert "but only 19.4 GiB is available" in messages(changed)[0]


def test_the_sample_plans_are_clean_for_every_seed(tmp_path):
    for name in SEED_PROFILES:
        plan = plan_for(name, tmp_path / name)
        assert plan["ok"], (name, plan["errors"])
