"""perftest: ib_write_bw's documented table parsed and judged against the published figures (no real output could
be captured here: the rows below follow perftest's documented format, not a capture)."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import perftest

GBITS = """
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Link type       : Ethernet
 GID index       : 3
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      5000             98.12              97.85                0.186701
---------------------------------------------------------------------------------------
"""

MBYTES = """
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]
 65536      5000           11000.00           10000.00
"""


def test_the_last_row_in_gbits_and_megabytes():
    assert perftest.parse(GBITS) == {"bytes": 65536, "iterations": 5000, "peak_gbps": 98.12, "average_gbps": 97.85}
    assert perftest.parse(MBYTES)["average_gbps"] == 83.89  # 10000 x 2^20 bytes x 8
    assert perftest.parse("Couldn't connect to 192.168.10.2:18515") is None


def test_judged_against_the_published_figures():
    row = perftest.parse(GBITS)
    assert perftest.judge(row, ring=True, link="L") is None  # >= 80 Gb/s in a ring
    assert perftest.judge(row, ring=False, link="L").startswith("link L: RDMA write bandwidth 97.8 Gb/s, below the 175 Gb/s")
    assert "printed no bandwidth table" in perftest.judge(None, ring=True, link="L")


def test_argv_names_the_device_port_and_gid():
    assert perftest.client_argv("rocep1s0f0:1", 3, "192.168.10.2") == [
        "ib_write_bw", "-d", "rocep1s0f0", "-i", "1", "-x", "3", "--report_gbits", "-D", "3", "192.168.10.2"]
