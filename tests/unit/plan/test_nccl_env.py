"""nccl_env: one node's RoCE facts to its environment, per node and never for the cluster."""

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.nccl_env import nccl_env, NcclEnvError
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import roce as roce_utils

from helpers import build_sysfs


def facts(capture, tmp_path):
    ports, dummy = roce_utils.read_devices(build_sysfs(capture, tmp_path))
    hca, index, dummy = roce_utils.nccl_choice(ports)
    return {"roce_devices": ports, "nccl_ib_hca": hca, "nccl_gid_index": index}


def test_spark_pair_each_node_gets_its_own_gid_index(tmp_path):
    head = nccl_env(facts("spark-one-cable.txt", tmp_path / "a"), "enp1s0f1np1")
    worker = nccl_env(facts("spark-ipv6-shift.txt", tmp_path / "b"), "enp1s0f1np1")
    assert head == {
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "=roceP2p1s0f1:1,rocep1s0f1:1",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_NET_GDR_LEVEL": "LOC",
        "NCCL_SOCKET_IFNAME": "=enp1s0f1np1",
        "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
        "TP_SOCKET_IFNAME": "enp1s0f1np1",
        "UCX_NET_DEVICES": "enp1s0f1np1",
        "OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1",
    }
    assert worker["NCCL_IB_GID_INDEX"] == "5"


def test_interface_defaults_to_the_active_ports_netdev(tmp_path):
    env = nccl_env(facts("spark-one-cable.txt", tmp_path))
    assert env["GLOO_SOCKET_IFNAME"] in ("enp1s0f1np1", "enP2p1s0f1np1")


def test_disagreeing_ports_leave_gid_index_unset(tmp_path):
    env = nccl_env(facts("spark-mixed-index.txt", tmp_path), "enp1s0f1np1")
    assert "NCCL_IB_GID_INDEX" not in env
    assert env["NCCL_IB_HCA"] == "=roceP2p1s0f1:1,rocep1s0f1:1"


def test_strict_mode_forbids_the_socket_fallback(tmp_path):
    env = nccl_env(facts("spark-one-cable.txt", tmp_path), "enp1s0f1np1", strict=True)
    assert env["NCCL_NET"] == "IB"


def test_ring_adds_subnet_aware_routing(tmp_path):
    env = nccl_env(facts("spark-one-cable.txt", tmp_path), "enp1s0f1np1", ring=True, subnet_prefix_len=30)
    assert env["NCCL_IB_SUBNET_AWARE_ROUTING"] == "1"
    assert env["NCCL_IB_SUBNET_PREFIX_LEN"] == "30"
    assert env["NCCL_ALGO"] == "Ring"


def test_no_roce_gives_sockets_and_gloo(tmp_path):
    env = nccl_env(facts("spark-no-ipv4.txt", tmp_path), "enP7s7")
    assert env == {
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "=enP7s7",
        "GLOO_SOCKET_IFNAME": "enP7s7",
        "TP_SOCKET_IFNAME": "enP7s7",
        "UCX_NET_DEVICES": "enP7s7",
        "OMPI_MCA_btl_tcp_if_include": "enP7s7",
        "NCCL_P2P_DISABLE": "1",
    }


def test_roce_can_be_turned_off(tmp_path):
    env = nccl_env(facts("spark-one-cable.txt", tmp_path), "enp1s0f1np1", roce_enabled=False)
    assert env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in env


def test_strict_without_roce_is_refused_naming_the_host(tmp_path):
    with pytest.raises(NcclEnvError, match=r"^spark2: strict NCCL \(NCCL_NET=IB\) needs RoCE"):
        nccl_env(facts("spark-no-ipv4.txt", tmp_path), "enP7s7", strict=True, host="spark2")


def test_ring_without_roce_is_refused(tmp_path):
    with pytest.raises(NcclEnvError, match="switchless ring needs RoCE"):
        nccl_env(facts("spark-no-ipv4.txt", tmp_path), "enP7s7", ring=True)


@pytest.mark.parametrize("bad", [0, 33, "x", None])
def test_ring_prefix_out_of_range(tmp_path, bad):
    with pytest.raises(NcclEnvError, match="subnet_prefix_len must be 1..32"):
        nccl_env(facts("spark-one-cable.txt", tmp_path), "enp1s0f1np1", ring=True, subnet_prefix_len=bad)


def test_no_interface_at_all_is_refused(tmp_path):
    with pytest.raises(NcclEnvError, match="set spark_fabric_interfaces"):
        nccl_env(facts("spark-no-ipv4.txt", tmp_path), host="spark3")
