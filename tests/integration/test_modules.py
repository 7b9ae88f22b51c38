"""The probe modules run as Ansible runs them, against captured trees, and their answers to bad input."""

import json
import os

import pytest

from helpers import build_proc, build_sysfs
from runner import run


def module(name, args, log=None, check_mode=False):
    """Run a module ad hoc on localhost; returns (rc, its result) through the JSON callback."""
    argv = ["ansible", "localhost", "-m", "dgx_spark.vllm." + name] + (["-a", json.dumps(args)] if args else [])
    argv += ["--check"] if check_mode else []
    rc, out = run(log or "module-%s-%d" % (name, abs(hash(json.dumps(args, sort_keys=True))) % 10000), argv, check=False,
                  env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"})
    data = json.loads(out[out.index("{"):])
    return rc, data["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_roce_gid_info_on_a_spark_tree(tmp_path):
    rc, result = module("roce_gid_info", {"sysfs_root": build_sysfs("spark-ipv6-shift.txt", tmp_path)})
    assert rc == 0, result
    assert result["changed"] is False
    assert result["nccl_gid_index"] == 5
    assert result["nccl_ib_hca"] == "=roceP2p1s0f1:1,rocep1s0f1:1"


def test_unified_memory_info_on_a_leaked_gb10(tmp_path):
    proc = build_proc(tmp_path / "proc", "gb10-leaked.txt", [(1, "systemd", 0, 12000)])
    rc, result = module("unified_memory_info", {"proc_root": proc, "nvidia_smi": "/nonexistent/nvidia-smi",
                                                "gpu_memory_utilization": 0.8})
    assert rc == 0, result
    assert result["unified_memory"]["unaccounted_bytes"] > 55 * 1024 ** 3
    assert result["unified_memory"]["gpu"] is None
    assert any("nvidia-smi not found: GPU facts are null" in w for w in result["warnings"])  # a warning, not a failure


def test_check_mode_is_supported():
    rc, result = module("unified_memory_info", {}, check_mode=True)
    assert rc == 0 and result["changed"] is False and result["unified_memory"]["mem_total_bytes"] > 0


@pytest.mark.parametrize("name,args,message", [
    ("roce_gid_info", {"sysfs_root": "/nonexistent/sys"}, "sysfs_root /nonexistent/sys does not exist"),
    ("unified_memory_info", {"proc_root": "/nonexistent/proc"}, "proc_root /nonexistent/proc does not exist"),
    ("unified_memory_info", {"gpu_memory_utilization": 0}, "gpu_memory_utilization must be in (0, 1], got 0"),
    ("unified_memory_info", {"gpu_memory_utilization": 1.2}, "gpu_memory_utilization must be in (0, 1], got 1.2"),
    ("ray_cluster_info", {"container": "x", "expected_nodes": 0}, "expected_nodes must be at least 1, got 0"),
    ("ray_cluster_info", {"address": "ray://10.0.0.1:10001"}, "is a Ray Client address"),
    ("ray_cluster_info", {"container": "dgx-spark-no-such-container"}, "container dgx-spark-no-such-container does not exist"),
])
def test_bad_input_names_the_value(name, args, message):
    rc, result = module(name, args)
    assert rc != 0 and result["failed"]
    assert message in result["msg"]


def test_meminfo_without_memtotal(tmp_path):
    proc = tmp_path / "proc"
    os.makedirs(proc)
    (proc / "meminfo").write_text("MemFree: 1000 kB\n")
    rc, result = module("unified_memory_info", {"proc_root": str(proc)})
    assert rc != 0 and "%s/meminfo has no MemTotal line" % proc in result["msg"]
