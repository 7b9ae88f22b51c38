"""roce: GID tables from sysfs captures, and NCCL's choices from them."""

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import roce
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.errors import ProbeError

from helpers import build_sysfs


def ports_of(capture, tmp_path):
    ports, warnings = roce.read_devices(build_sysfs(capture, tmp_path))
    return {"%s:%s" % (p["name"], p["port"]): p for p in ports}, warnings


def test_spark_one_cable(tmp_path):
    ports, warnings = ports_of("spark-one-cable.txt", tmp_path)
    assert warnings == []
    assert sorted(ports) == ["roceP2p1s0f0:1", "roceP2p1s0f1:1", "rocep1s0f0:1", "rocep1s0f1:1"]
    active = ports["rocep1s0f1:1"]
    assert active["state"] == "ACTIVE" and active["phys_state"] == "LinkUp"
    assert active["link_layer"] == "Ethernet"
    assert active["netdev"] == "enp1s0f1np1"
    assert active["nccl_gid_index"] == 3
    assert active["ipv4_addresses"] == ["192.168.100.10"]
    # link-local and empty slots are skipped; v1 and v2 of the IPv4 address remain
    assert [(g["index"], g["type"], g["ipv4"]) for g in active["gids"]] == [
        (2, "RoCE v1", "192.168.100.10"), (3, "RoCE v2", "192.168.100.10")]
    assert active["gids"][1]["gid"] == "0000:0000:0000:0000:0000:ffff:c0a8:640a"
    down = ports["rocep1s0f0:1"]
    assert down["state"] == "DOWN" and down["gids"] == [] and down["nccl_gid_index"] is None
    assert down["netdev"] == "enp1s0f0np0"

    hca, index, notes = roce.nccl_choice(list(ports.values()))
    assert hca == "=roceP2p1s0f1:1,rocep1s0f1:1"
    assert index == 3 and notes == []


def test_global_ipv6_pushes_ipv4_gid_to_index_5(tmp_path):
    ports, dummy = ports_of("spark-ipv6-shift.txt", tmp_path)
    assert ports["rocep1s0f1:1"]["nccl_gid_index"] == 5
    v6 = ports["rocep1s0f1:1"]["gids"][1]
    assert v6["index"] == 3 and v6["ipv4"] is None and v6["type"] == "RoCE v2"
    hca, index, dummy = roce.nccl_choice(list(ports.values()))
    assert index == 5 and hca.startswith("=") and hca.count("=") == 1


def test_ports_disagreeing_on_the_index_leave_nccl_on_automatic(tmp_path):
    ports, dummy = ports_of("spark-mixed-index.txt", tmp_path)
    hca, index, notes = roce.nccl_choice(list(ports.values()))
    assert hca == "=roceP2p1s0f1:1,rocep1s0f1:1"
    assert index is None
    assert "roceP2p1s0f1:1=5" in notes[0] and "rocep1s0f1:1=3" in notes[0]


def test_link_up_without_ipv4_gives_no_hca(tmp_path):
    ports, dummy = ports_of("spark-no-ipv4.txt", tmp_path)
    hca, index, notes = roce.nccl_choice(list(ports.values()))
    assert hca is None and index is None
    assert "no ACTIVE RDMA port has an IPv4 RoCE v2 GID" in notes[0]
    assert "rocep1s0f1:1 ACTIVE" in notes[0]


def test_node_without_roce_is_a_warning_not_an_error(tmp_path):
    (tmp_path / "class").mkdir()
    ports, warnings = roce.read_devices(str(tmp_path))
    assert ports == []
    assert "has no RoCE" in warnings[0]


def test_missing_sysfs_root_is_named(tmp_path):
    with pytest.raises(ProbeError, match="sysfs_root .*/absent does not exist"):
        roce.read_devices(str(tmp_path / "absent"))


@pytest.mark.parametrize("text,expected", [
    ("0000:0000:0000:0000:0000:0000:0000:0000", None),
    ("fe80:0000:0000:0000:4ebb:47ff:fe0a:1b2b", None),
    ("fe80:0000:0000:0000:0000:0000:0000:0000", None),
    ("not a gid", None),
    ("", None),
    ("0000:0000:0000:0000:0000:ffff:0a00:0001", "::ffff:a00:1"),
    ("2001:0db8:0100:0000:0000:0000:0000:0011", "2001:db8:100::11"),
])
def test_parse_gid(text, expected):
    parsed = roce.parse_gid(text)
    assert (str(parsed) if parsed else None) == expected
