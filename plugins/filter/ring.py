# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of a switchless ring's proof: the links that failed, the table of link ends, the addresses the planner gives
each ring port, and ib_write_bw's run and verdict. Thin adapters of module_utils/plan/ring.py and
module_utils/verify/perftest.py; each is documented beside this file (``ansible-doc -t filter dgx_spark.vllm.<name>``)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import ring
from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import perftest


def ring_failures(report):
    """Each failed link once, with its ends, and the nodes that answered nothing (swapped or pulled cables)."""
    return ring.failures(report)


def ring_table(nodes):
    """A line per link end: address, MTU, the RDMA port and the GID index NCCL takes there."""
    return ring.table(nodes)


def ring_ends(given, hosts):
    """{host: [[port, IPv4], ...]}: the addresses the planner gives each ring port (the simulated cluster's GID tables)."""
    return {host: [[end["interface"], end["address"].split("/")[0]] for end in ends]
            for host, ends in ring.plan(given, list(hosts))["ends"].items()}


def perftest_argv(ends, side, found=""):
    """ib_write_bw's argv on a ring node: the server on its end b, the client on its end a, writing to that link's b;
    its result as JSON where ``found`` (what the look for ib_write_bw printed) lists perftest's JSON option."""
    for end in ends:
        if side == "client" and end["side"] == "a":
            return perftest.client_argv(end["rdma"], end["gid_index"], end["peer_address"], as_json=perftest.JSON_OPTION in (found or ""))
        if side == "server" and end["side"] == "b":
            return perftest.server_argv(end["rdma"], end["gid_index"])
    raise AnsibleFilterError("no ring end for the %s side of ib_write_bw in %s" % (side, ends))


def perftest_verdict(output, ends, errors=""):
    """The client's result on this node's end a (its JSON on ``errors``, its stderr, else its table), judged: a warning
    line, or the figure beside the published one."""
    link = next((e["link"] for e in ends if e["side"] == "a"), "?")
    result = perftest.result(output, errors)
    return perftest.judge(result, True, link) or "link %s: %.1f Gb/s (published: at least %.0f Gb/s in a ring)" % (
        link, result["average_gbps"], perftest.PUBLISHED_GBPS["ring"])


class FilterModule:
    """dgx_spark.vllm's ring filters."""

    def filters(self):
        return {"ring_failures": ring_failures, "ring_table": ring_table, "ring_ends": ring_ends,
                "perftest_argv": perftest_argv, "perftest_verdict": perftest_verdict}
