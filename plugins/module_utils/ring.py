# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Switchless rings (fact 9): one subnet per link, the first host address at end ``a``, the second at ``b``."""

from __future__ import annotations

import ipaddress


class RingError(Exception):
    """A ring link is malformed; the message names the link."""


def links_of(links, host):
    """This host's ends of the ring's links: interface, own address (with prefix) and the peer's address."""
    ends = []
    for index, link in enumerate(links or []):
        try:
            network = ipaddress.ip_network(str(link["subnet"]), strict=True)
            hosts = list(network.hosts())[:2]
            if len(hosts) < 2:
                raise ValueError("fewer than two host addresses")
        except (KeyError, ValueError) as exc:
            raise RingError("ring link %d (%r): %s; give a subnet like 192.168.10.0/24 and ends a, a_if, b, b_if" % (index, link, exc))
        for here, there, number in (("a", "b", 0), ("b", "a", 1)):
            if link.get(here) == host:
                ends.append({
                    "interface": link["%s_if" % here],
                    "address": "%s/%d" % (hosts[number], network.prefixlen),
                    "peer": link[there],
                    "peer_address": str(hosts[1 - number]),
                    "prefix_len": network.prefixlen,
                })
    return ends


def prefix_len(links):
    """The one prefix length of the ring's subnets (NCCL_IB_SUBNET_PREFIX_LEN must match them)."""
    lengths = set()
    for index, link in enumerate(links or []):
        try:
            lengths.add(ipaddress.ip_network(str(link["subnet"]), strict=False).prefixlen)
        except (KeyError, TypeError, ValueError) as exc:
            raise RingError("ring link %d (%r) has no valid subnet (%s); give a subnet like 192.168.10.0/24 and ends a, a_if, b, "
                            "b_if" % (index, link, exc))
    if len(lengths) > 1:
        raise RingError("the ring's subnets have different prefix lengths %s; NCCL_IB_SUBNET_PREFIX_LEN takes one" % sorted(lengths))
    return lengths.pop() if lengths else 24
