# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A short RDMA bandwidth check of a ring link with perftest's ``ib_write_bw``, judged against NVIDIA's published
figures for DGX Spark (fact 9): at least 175 Gb/s between two Sparks, at least 80 Gb/s per link in a ring.

``ib_write_bw --report_gbits`` ends with a table whose header is
``#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]`` (older builds omit the message rate; without
``--report_gbits`` the unit is MB/sec). No real output could be captured on this project's machines (no ConnectX):
this parses the documented format, and docs/fabric.md says so. Pure.
"""

from __future__ import annotations

import re

PUBLISHED_GBPS = {"pair": 175.0, "ring": 80.0}
HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(Gb|MB)/sec\]\s+BW average\[(Gb|MB)/sec\]")


def server_argv(rdma, gid_index, seconds=3):
    """The listening end: ``rdma`` is ``device:port``; ``-D`` bounds it in time."""
    device, port = rdma.split(":")
    return ["ib_write_bw", "-d", device, "-i", port, "-x", str(gid_index), "--report_gbits", "-D", str(seconds)]


def client_argv(rdma, gid_index, peer_address, seconds=3):
    return server_argv(rdma, gid_index, seconds) + [peer_address]


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
