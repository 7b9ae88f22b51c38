"""Module spark_node_info, run as on a node: captured proc and sysfs trees, a node without a Docker daemon."""

from helpers import build_proc, build_sysfs, run_module


def test_one_call_reads_memory_roce_and_says_docker_is_absent(tmp_path):
    result = run_module("spark_node_info", {"proc_root": build_proc(tmp_path / "proc", "gb10-idle.txt"), "nvidia_smi": "none",
                                            "sysfs_root": build_sysfs("spark-ipv6-shift.txt", tmp_path / "sys"),
                                            "gpu_memory_utilization": 0.8, "image": "img:1", "docker": "false",
                                            "models_dir": str(tmp_path / "models"), "model": "org/m", "ray_container": "ray-c"})
    assert result["changed"] is False
    assert result["memory"]["mem_available_bytes"] == 122997964 * 1024
    assert result["roce"]["nccl_gid_index"] == 5
    assert result["docker"] is None and result["docker_ps"] == [] and result["image_id"] is None
    assert result["model_config"] is None and result["weights_bytes"] is None
    assert result["ray"]["error"].startswith("could not read Ray state on ray-c (rc=1)")
