"""nccl_log: the transport NCCL really used, from real NCCL 2.28.9 logs (fixtures/nccl/README.md)."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import nccl_log

from helpers import read_fixture


def test_silent_socket_fallback_is_caught():
    result = nccl_log.verdict(read_fixture("nccl", "nccl-socket-fallback.log"), expect_ib=True)
    assert result["status"] == "fallback"
    assert sorted(result["ranks"]) == ["vm:687", "vm:688"]
    assert all(r["network"] == "Socket" and r["channels"] == {"NET/Socket": 4} for r in result["ranks"].values())
    assert "NCCL fell back to TCP sockets on vm:687, vm:688" in result["messages"][0]


def test_strict_mode_failure_names_the_cause():
    result = nccl_log.verdict(read_fixture("nccl", "nccl-strict-ib-missing.log"), expect_ib=True, strict=True)
    assert result["status"] == "failed"
    assert "found no usable network" in result["messages"][0] and "(strict mode)" in result["messages"][0]


def test_intra_node_p2p_is_not_a_fallback_when_ib_is_not_expected():
    result = nccl_log.verdict(read_fixture("nccl", "nccl-p2p-default.log"), expect_ib=False)
    assert result["status"] == "ok"
    assert all(r["channels"].get("P2P", 0) > 0 for r in result["ranks"].values())


def test_roce_channels_through_ray_prefixes():
    log = "\n".join([
        "(RayWorkerWrapper pid=2211, ip=192.168.100.11) spark2:2211:2290 [0] NCCL INFO Using network IB",
        "(RayWorkerWrapper pid=2211, ip=192.168.100.11) spark2:2211:2290 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0",
        "spark1:1880:1950 [0] NCCL INFO Using network IB",
        "spark1:1880:1950 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0",
    ])
    result = nccl_log.verdict(log)
    assert result["status"] == "ok" and result["messages"] == ["NCCL uses NET/IB on 2 rank(s)"]


def test_gdr_claimed_on_gb10_is_flagged():
    log = "spark1:1880:1950 [0] NCCL INFO Using network IB\nspark1:1880:1950 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via NET/IB/0/GDRDMA"
    result = nccl_log.verdict(log)
    assert "GB10 has none" in result["messages"][-1]


def test_no_nccl_lines_is_absent_not_ok():
    assert nccl_log.verdict("INFO 11-22 01:07:44 [cpu_worker.py:260] KV cache")["status"] == "absent"


def test_each_ranks_nccl_version_is_read_and_shown_with_the_transport():
    result = nccl_log.verdict(read_fixture("nccl", "nccl-socket-fallback.log"), expect_ib=True)
    assert result["versions"] == ["2.28.9+cuda13.0"] and all(r["version"] == "2.28.9+cuda13.0" for r in result["ranks"].values())
    assert result["messages"][0].startswith("NCCL 2.28.9+cuda13.0: NCCL fell back to TCP sockets")
    result = nccl_log.verdict(read_fixture("nccl", "nccl-p2p-default.log"), expect_ib=False)
    assert result["messages"][0].startswith("NCCL 2.28.9+cuda13.0: NCCL uses its local transports on 2 rank(s)")


def test_ranks_that_loaded_different_versions_are_named():
    # the captured log with one rank's banner as another build would print it
    before, after = "vm:627:627 [1] NCCL INFO NCCL version 2.28.9+cuda13.0", "vm:627:627 [1] NCCL INFO NCCL version 2.27.3+cuda12.9"
    log = read_fixture("nccl", "nccl-p2p-default.log").replace(before, after)
    result = nccl_log.verdict(log, expect_ib=False)
    assert result["versions"] == ["2.27.3+cuda12.9", "2.28.9+cuda13.0"]
    assert "vm:626 2.28.9+cuda13.0, vm:627 2.27.3+cuda12.9" in result["messages"][-1]
