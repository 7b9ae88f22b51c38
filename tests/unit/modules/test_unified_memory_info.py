"""Module unified_memory_info, run as on a node against a proc tree from a captured idle GB10."""

from helpers import build_proc, run_module


def test_an_idle_gb10_without_nvidia_smi(tmp_path):
    result = run_module("unified_memory_info", {"proc_root": build_proc(tmp_path / "proc", "gb10-idle.txt"),
                                                "nvidia_smi": str(tmp_path / "no-nvidia-smi"), "gpu_memory_utilization": 0.8})
    memory = result["unified_memory"]
    assert memory["mem_available_bytes"] == 122997964 * 1024 and memory["gpu"] is None
    assert "no-nvidia-smi not found: GPU facts are null" in str(result["warnings"][0])


def test_a_missing_proc_root_fails_naming_it(tmp_path):
    result = run_module("unified_memory_info", {"proc_root": str(tmp_path / "nope")})
    assert result["failed"] and "proc_root %s does not exist" % (tmp_path / "nope") in result["msg"]
