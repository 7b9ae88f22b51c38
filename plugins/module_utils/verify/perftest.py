# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A short RDMA bandwidth check of a ring link with perftest's ``ib_write_bw``, judged against NVIDIA's published
figures for DGX Spark (fact 9): at least 175 Gb/s between two Sparks, at least 80 Gb/s per link in a ring.

``ib_write_bw --report_gbits`` ends with a table whose header is
``#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]`` (older builds omit the message rate; without
``--report_gbits`` the unit is MB/sec). perftest 23.04 and later also write their result as JSON (``--out_json``,
to the file ``--out_json_file`` names): an object whose ``results`` hold ``MsgSize``, ``n_iterations``, ``BW_peak`` and
``BW_average`` in the table's unit. Where the node's ib_write_bw lists that option, the client writes the JSON to its
stderr (the table stays on stdout) and the JSON is read; the table is the fallback for older perftest. No real output
could be captured on this project's machines (no ConnectX): both follow perftest's source, and docs/fabric.md says so.
Pure.
"""

from __future__ import annotations

import json
import re

PUBLISHED_GBPS = {"pair": 175.0, "ring": 80.0}
HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(Gb|MB)/sec\]\s+BW average\[(Gb|MB)/sec\]")


def server_argv(rdma, gid_index, seconds=3):
    """The listening end: ``rdma`` is ``device:port``; ``-D`` bounds it in time."""
    device, port = rdma.split(":")
    return ["ib_write_bw", "-d", device, "-i", port, "-x", str(gid_index), "--report_gbits", "-D", str(seconds)]


# What ``ib_write_bw --help`` lists when it can write its result as JSON (perftest 23.04 and later).
JSON_OPTION = "--out_json_file"
JSON_TO = "/dev/stderr"  # perftest opens the file it is given; its stderr keeps the JSON apart from the table


def client_argv(rdma, gid_index, peer_address, seconds=3, as_json=False):
    """The writing end; with ``as_json`` (the node's ib_write_bw lists JSON_OPTION), its result as JSON on stderr."""
    return server_argv(rdma, gid_index, seconds) + (["--out_json", JSON_OPTION + "=" + JSON_TO] if as_json else []) + [peer_address]


def parse_json(text):
    """The result perftest wrote as JSON (its object, after any warning it printed on the same stream): {"bytes",
    "iterations", "peak_gbps", "average_gbps"}, or None when there is none. ``--report_gbits`` makes its unit Gb/s."""
    start = (text or "").find('"test_info"')
    start = text.rfind("{", 0, start) if start > 0 else -1
    if start < 0:
        return None
    try:
        found = json.JSONDecoder().raw_decode(text[start:])[0].get("results") or {}
        return {"bytes": int(found["MsgSize"]), "iterations": int(found["n_iterations"]),
                "peak_gbps": round(float(found["BW_peak"]), 2), "average_gbps": round(float(found["BW_average"]), 2)}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def result(stdout, stderr=""):
    """The client's result: its JSON where it wrote one (``stderr``), else its table (``stdout``), else None."""
    return parse_json(stderr) or parse(stdout)


def parse(output):
    """The last row of the bandwidth table: {"bytes", "iterations", "peak_gbps", "average_gbps"}, or None when the
    output has no table (the test did not run)."""
    lines = (output or "").splitlines()
    for index, line in enumerate(lines):
        found = HEADER.search(line)
        if not found:
            continue
        scale = 1.0 if found.group(2) == "Gb" else 8 * 1048576 / 1e9  # perftest's MB is 2^20 bytes
        rows = []
        for row in lines[index + 1:]:
            fields = row.split()
            if len(fields) < 4 or not fields[0].isdigit():
                break
            rows.append({"bytes": int(fields[0]), "iterations": int(fields[1]), "peak_gbps": round(float(fields[2]) * scale, 2),
                         "average_gbps": round(float(fields[3]) * scale, 2)})
        if rows:
            return rows[-1]
    return None


def judge(result, ring, link):
    """A message when the link's average is below the published figure (or nothing was measured), else None."""
    floor = PUBLISHED_GBPS["ring" if ring else "pair"]
    if result is None:
        return "link %s: ib_write_bw printed no bandwidth table; run it by hand on both ends to see why" % link
    if result["average_gbps"] < floor:
        return ("link %s: RDMA write bandwidth %.1f Gb/s, below the %.0f Gb/s NVIDIA publishes for %s; check the cable, the "
                "link speed (ethtool) and that both ends use the RoCE v2 GID of the link's address"
                % (link, result["average_gbps"], floor, "a ring link" if ring else "two Sparks"))
    return None
