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


# What perftest 23.04 and later write with --out_json (src/perftest_parameters.c: write_test_info_to_file and
# write_bw_report_to_file, REPORT_FMT_JSON), here to the client's stderr after a warning it printed there first.
JSON_ON_STDERR = """ Conflicting CPU frequency values detected: 1000.000000 != 3400.000000. CPU Frequency is not max.
{
"test_info": {
"test": "RDMA_Write_BW_Test",
"Dual_port": "OFF",
"Device": "rocep1s0f0",
"Number_of_qps": 1,
"Transport_type": "IB",
"Connection_type": "RC",
"Using_SRQ": "OFF",
"PCIe_relax_order": "ON",
"Use_ROCm_memory": "OFF",
"Use_MUSA_memory": "OFF",
"Data_ex_method": "Ethernet"
},
"results": {
"MsgSize": 65536,
"n_iterations": 5000,
"BW_peak": 98.12,
"BW_average": 97.85,
"MsgRate": 0.186701
}
}
"""


def test_the_json_result_is_read_before_the_table_and_the_table_is_the_fallback():
    assert perftest.parse_json(JSON_ON_STDERR) == {"bytes": 65536, "iterations": 5000, "peak_gbps": 98.12, "average_gbps": 97.85}
    # Both given: the JSON wins (the table below says 10 Gb/s, as if rounded differently); no JSON: the table.
    assert perftest.result(GBITS.replace("97.85", "10.00"), JSON_ON_STDERR)["average_gbps"] == 97.85
    assert perftest.result(GBITS, "")["average_gbps"] == 97.85
    assert perftest.result(GBITS, "failed to open /dev/stderr\n")["average_gbps"] == 97.85
    assert perftest.parse_json(JSON_ON_STDERR.split('"results"', maxsplit=1)[0]) is None  # cut off: no result, no exception
    assert perftest.result("", "") is None


def test_the_client_writes_json_only_where_its_perftest_can():
    plain = perftest.client_argv("rocep1s0f0:1", 3, "192.168.10.2")
    with_json = perftest.client_argv("rocep1s0f0:1", 3, "192.168.10.2", as_json=True)
    assert with_json == plain[:-1] + ["--out_json", "--out_json_file=/dev/stderr", "192.168.10.2"]
