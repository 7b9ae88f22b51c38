"""Module roce_gid_info, run as on a node against a sysfs tree rebuilt from a captured Spark."""

from helpers import build_sysfs, run_module


def test_a_spark_with_one_cable(tmp_path):
    result = run_module("roce_gid_info", {"sysfs_root": build_sysfs("spark-one-cable.txt", tmp_path)})
    assert result["changed"] is False and result["nccl_ib_hca"].startswith("=") and result["nccl_gid_index"] == 3
    assert {d["name"] for d in result["roce_devices"]} >= {"rocep1s0f1"}


def test_a_node_without_infiniband_warns_and_returns_nothing(tmp_path):
    result = run_module("roce_gid_info", {"sysfs_root": str(tmp_path)})
    assert result["roce_devices"] == [] and result["nccl_ib_hca"] is None and result.get("warnings")
