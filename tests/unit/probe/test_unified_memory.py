"""unified_memory: meminfo, processes and nvidia-smi as vLLM on a GB10 will see them."""

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import memory as plan_memory, memory_model
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import unified_memory as um
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.errors import ProbeError

from helpers import build_proc, read_fixture

GIB = 1024 ** 3


def facts(meminfo_name, apps_name="gb10-compute-apps-none.csv", utilization=None, processes=None, need=None):
    return um.summarize(
        um.parse_meminfo(read_fixture("meminfo", meminfo_name)),
        um.parse_gpu_query(read_fixture("nvidia_smi", "gb10-query-gpu.csv")),
        um.parse_compute_apps(read_fixture("nvidia_smi", apps_name)),
        processes or [],
        utilization,
        need,
    )


def test_meminfo_values_are_bytes_and_counts_stay_counts():
    info = um.parse_meminfo(read_fixture("meminfo", "gb10-idle.txt"))
    assert info["MemTotal"] == 127602792 * 1024
    assert info["HugePages_Total"] == 0
    assert info["Hugepagesize"] == 2048 * 1024


def test_meminfo_without_memtotal_names_the_path():
    with pytest.raises(ProbeError, match=r"/x/proc/meminfo has no MemTotal"):
        um.parse_meminfo(read_fixture("meminfo", "no-memtotal.txt"), "/x/proc/meminfo")


def test_gb10_reports_no_memory_of_its_own():
    gpus = um.parse_gpu_query(read_fixture("nvidia_smi", "gb10-query-gpu.csv"))
    assert gpus == [{"name": "NVIDIA GB10", "driver": "580.95.05", "compute_capability": "12.1",
                     "memory_total_bytes": None, "unified": True}]


def test_discrete_gpu_reports_its_memory():
    gpu = um.parse_gpu_query(read_fixture("nvidia_smi", "h100-query-gpu.csv"))[0]
    assert gpu["unified"] is False
    assert gpu["memory_total_bytes"] == 81559 * 1024 * 1024


def test_idle_node_has_little_unaccounted_memory():
    fact = facts("gb10-idle.txt")
    assert fact["unified"] is True
    assert fact["gpu"]["name"] == "NVIDIA GB10"
    assert fact["unaccounted_bytes"] < 1 * GIB


def test_serving_node_memory_is_explained_by_the_engine_gpu_context():
    fact = facts("gb10-serving.txt", "gb10-compute-apps-serving.csv")
    assert fact["gpu_process_bytes"] == 99328 * 1024 * 1024
    assert fact["gpu_processes"][0]["pid"] == 48213
    # ~102 GiB used, almost all of it the engine's CUDA allocations that RSS does not show.
    assert fact["mem_used_bytes"] > 100 * GIB
    assert fact["unaccounted_bytes"] < 1 * GIB


def test_killed_container_leaves_unaccounted_memory():
    fact = facts("gb10-leaked.txt")
    assert fact["gpu_process_bytes"] == 0
    assert 55 * GIB < fact["unaccounted_bytes"] < 62 * GIB


def test_page_cache_makes_vllm_refuse_until_caches_are_dropped():
    fact = facts("gb10-page-cache.txt", utilization=0.91)
    # vLLM sizes its request from CUDA's total (119.67 GiB on a GB10), not MemTotal (121.69 GiB): 108.9 GiB of 108.2
    assert fact["cuda_total_bytes"] == int(119.67 * GIB) and fact["vllm_requested_bytes"] == -(-int(119.67 * GIB) * 91 // 100)
    assert fact["fits"] is False
    assert facts("gb10-page-cache.txt", utilization=0.9)["fits"]  # 107.7 GiB: MemTotal's 109.5 would have said no
    assert fact["shortfall_bytes"] == fact["vllm_requested_bytes"] - fact["mem_available_bytes"]
    assert fact["fits_after_drop_caches"] is True
    assert fact["page_cache_bytes"] > 60 * GIB


def test_caches_are_dropped_where_the_plan_would_refuse_the_node_not_only_where_vllm_would():
    """The captured page-cache GB10 (108.2 GiB available, 111.9 GiB after a drop) at 0.80: vLLM's request alone
    (95.7 GiB) fits, so a check of the request alone drops nothing; but the plan keeps the runtime beside the pool
    (9.35 GiB) and the 6 GiB floor too, 111.1 GiB, and would refuse the node ("lower gpu_memory_utilization to
    0.77"). The probe's verdict is the plan's: not fitting, fitting after the drop, so the drop happens."""
    need = {"runtime_bytes": plan_memory.RUNTIME_BYTES, "floor_bytes": plan_memory.HEADROOM_FLOOR_BYTES}
    alone = facts("gb10-page-cache.txt", utilization=0.8)
    assert alone["fits"] and alone["needed_bytes"] == alone["vllm_requested_bytes"]  # vLLM's own check passes
    fact = facts("gb10-page-cache.txt", utilization=0.8, need=need)
    assert fact["needed_bytes"] == memory_model.needed_bytes(int(119.67 * GIB), 0.8, plan_memory.RUNTIME_BYTES, plan_memory.HEADROOM_FLOOR_BYTES)
    assert not fact["fits"] and fact["fits_after_drop_caches"]
    assert round(fact["shortfall_bytes"] / GIB, 1) == 2.9
    assert facts("gb10-idle.txt", utilization=0.8, need=need)["fits"]  # an idle Spark needs no drop
    assert not facts("gb10-page-cache.txt", utilization=0.82, need=need)["fits_after_drop_caches"]  # the drop alone is not enough


def test_idle_node_fits_a_common_utilization():
    fact = facts("gb10-idle.txt", utilization=0.85)
    assert fact["fits"] is True and fact["shortfall_bytes"] == 0


@pytest.mark.parametrize("bad", [0, -0.1, 1.01, 2, True, "0.5"])
def test_utilization_outside_zero_one_is_refused(bad):
    with pytest.raises(ProbeError, match="gpu_memory_utilization must be in \\(0, 1\\]"):
        um.validate_utilization(bad)


def test_old_kernel_without_memavailable_is_estimated():
    fact = um.summarize(um.parse_meminfo(read_fixture("meminfo", "old-kernel.txt")))
    assert fact["mem_available_estimated"] is True
    assert fact["mem_available_bytes"] == (2015000 + 201500 + 3010000 - 10000 + 100000) * 1024
    assert fact["gpu"] is None and fact["unified"] is None


def test_orphaned_vllm_engine_is_found(tmp_path):
    proc = build_proc(tmp_path / "proc", "gb10-idle.txt", [
        (1, "systemd", 0, 12000),
        (900, "dockerd", 1, 80000),
        (4100, "python3", 900, 900000),          # a live API server
        (4180, "VLLM::EngineCor", 4100, 2100000),  # its engine: not orphaned
        (5200, "VLLM::EngineCor", 1, 1800000),     # server killed: re-parented to init
        (5230, "VLLM::Worker_TP", 5200, 1500000),  # child of the orphan: alive, holds memory
    ])
    processes = um.read_processes(proc)
    assert [p["pid"] for p in processes] == [1, 900, 4100, 4180, 5200, 5230]
    found = {p["pid"]: p["orphan"] for p in um.vllm_processes(processes)}
    assert found == {4180: False, 5200: True, 5230: False}


def test_missing_proc_root_is_named(tmp_path):
    with pytest.raises(ProbeError, match="cannot list .*/nope"):
        um.read_processes(str(tmp_path / "nope"))
