# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a node's firewall table is the one serve.yml loaded: read, never assumed.

The table can vanish or change under a serving cluster (``nft flush ruleset``, a restart of nftables.service, whose
ruleset starts with a flush, a hand edit) while every container keeps running. So, after loading it, the apply step
records the sha256 of ``nft list table`` (the kernel's own listing of what is loaded, the same text for the same
table); the probe, the supervisor and status.yml list it again and compare: ``loaded`` when it is the same,
``changed`` when it differs, ``missing`` when the table is gone, ``unrecorded`` when nothing was recorded (a node
whose table was loaded before records existed: serve.yml loads it again and records it). Stdlib only: the supervisor
copies it to the node.
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import command

NFT = "/usr/sbin/nft"
LOADED = "loaded"


def list_argv(table, nft=NFT):
    """The collection's own table listed (no other is read)."""
    return [nft, "list", "table", "inet", table]


def digest(listing):
    return hashlib.sha256((listing or "").encode("utf-8")).hexdigest()


def record(table, listing):
    """The record the apply step writes after loading the table."""
    return json.dumps({"table": table, "listing_sha256": digest(listing)}, indent=2, sort_keys=True) + "\n"


def judge(rc, listing, recorded):
    """``loaded``, ``changed``, ``missing`` or ``unrecorded``, from ``nft list table``'s answer and the record (a
    mapping, or None)."""
    if rc != 0:
        return "missing"
    if not isinstance(recorded, dict) or not recorded.get("listing_sha256"):
        return "unrecorded"
    return LOADED if recorded["listing_sha256"] == digest(listing) else "changed"


def state(run, table, record_path):
    """This node's table judged (``run(argv)`` returns (rc, out, err))."""
    rc, out, dummy = run(list_argv(table))
    return judge(rc, out, command.read_record(record_path))


def why(table, found, unit):
    """What a table not ``loaded`` means, and what to do."""
    said = {"missing": "is not loaded", "changed": "differs from the one serve.yml loaded",
            "unrecorded": "was loaded without a record of it"}.get(found, found)
    return ("the firewall table %s %s: Ray's and vLLM's ports may answer anyone. Run serve.yml (it loads the table "
            "again), or systemctl restart %s" % (table, said, unit))
