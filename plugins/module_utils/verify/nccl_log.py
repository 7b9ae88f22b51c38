# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which transport NCCL really used, read from the ranks' logs (``NCCL_DEBUG=INFO``).

NCCL falls back from IB to TCP sockets silently: the job works at a fraction of the speed. The
log says it: ``Using network Socket`` and channels ``via NET/Socket/N``. With ``NCCL_NET=IB``
(strict) the communicator fails instead: ``Failed to initialize any NET plugin``. On GB10 channels
never say ``/GDRDMA`` (no GPUDirect RDMA).
"""

from __future__ import annotations

import re

# "host:pid:tid [dev] NCCL INFO ..."; WARN lines carry the source location: "[dev] plugin/net.cc:379 NCCL WARN ..."
_RANK = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[\d+\] (?:\S+:\d+ )?NCCL (?P<level>INFO|WARN) (?P<text>.*)")
_NETWORK = re.compile(r"Using network (\S+)")
_CHANNEL = re.compile(r"\bvia (\S+)")
_VERSION = re.compile(r"^NCCL version (\S+)")  # each rank's first line: the library it loaded (plan/nccl_library.py)


def transport_of(channel):
    """'NET/IB/0/GDRDMA' -> 'NET/IB'; 'NET/Socket/0' -> 'NET/Socket'; 'P2P/CUMEM' -> 'P2P'."""
    parts = channel.split("/")
    return "/".join(parts[:2]) if parts[0] == "NET" else parts[0]


def parse(text):
    """Per rank (host:pid): network plugin, channel transports with counts, warnings."""
    ranks = {}
    for line in (text or "").splitlines():
        match = _RANK.search(line)
        if not match:
            continue
        rank = ranks.setdefault("%s:%s" % (match.group("host"), match.group("pid")),
                                {"network": None, "channels": {}, "gdr": False, "warnings": [], "version": None})
        body = match.group("text")
        version = _VERSION.search(body)
        if version:
            rank["version"] = version.group(1)
        network = _NETWORK.search(body)
        if network:
            rank["network"] = network.group(1)
        channel = _CHANNEL.search(body)
        if channel:
            kind = transport_of(channel.group(1))
            rank["channels"][kind] = rank["channels"].get(kind, 0) + 1
            if "GDRDMA" in channel.group(1):
                rank["gdr"] = True
        if match.group("level") == "WARN":
            rank["warnings"].append(body.strip())
    return ranks


def verdict(text, expect_ib=True, strict=False):
    """Summarize the transport. ``status`` is ok, fallback, failed or absent (no NCCL lines)."""
    ranks = parse(text)
    result = {"ranks": ranks, "status": "absent", "messages": [], "versions": []}
    if not ranks:
        result["messages"].append("no NCCL lines in the logs (NCCL_DEBUG=INFO not set, or no NCCL communicator: "
                                  "the CPU build uses Gloo)")
        return result
    failed = [r for r, v in ranks.items() if any("Failed to initialize any NET plugin" in w for w in v["warnings"])]
    sockets = [r for r, v in ranks.items() if v["network"] == "Socket" or v["channels"].get("NET/Socket")]
    ib = [r for r, v in ranks.items() if v["network"] and v["network"].startswith("IB") or v["channels"].get("NET/IB")]
    gdr = [r for r, v in ranks.items() if v["gdr"]]
    if failed:
        result["status"] = "failed"
        result["messages"].append("NCCL found no usable network on %s%s: check /dev/infiniband in the containers, "
                                  "NCCL_IB_HCA and the RoCE link" % (", ".join(sorted(failed)), " (strict mode)" if strict else ""))
    elif expect_ib and sockets:
        result["status"] = "fallback"
        result["messages"].append("NCCL fell back to TCP sockets on %s (NET/Socket): the RoCE path is not used. Check "
                                  "--device /dev/infiniband, NCCL_IB_HCA and the GID index; set vllm_nccl_strict to fail "
                                  "instead" % ", ".join(sorted(sockets)))
    else:
        result["status"] = "ok"
        result["messages"].append("NCCL uses %s on %d rank(s)" % ("NET/IB" if ib else "its local transports", len(ranks)))
    versions = sorted({v["version"] for v in ranks.values() if v["version"]})
    result["versions"] = versions
    if len(versions) > 1:
        result["messages"].append("the ranks loaded different NCCL versions (%s): every rank must load one; see "
                                  "vllm_nccl_library" % ", ".join("%s %s" % (r, v["version"]) for r, v in sorted(ranks.items())))
    elif versions:
        result["messages"][-1] = "NCCL %s: %s" % (versions[0], result["messages"][-1])
    if gdr:
        result["messages"].append("GPUDirect RDMA claimed on %s; GB10 has none: set NCCL_NET_GDR_LEVEL=LOC" % ", ".join(sorted(gdr)))
    return result
