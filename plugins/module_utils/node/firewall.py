# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan's firewall applied on a node (module_utils/plan/firewall.py says why a firewall and what it holds): a new
ruleset checked by nft first (``nft -c``: a ruleset nft would refuse never replaces the one that loads at boot), its
ruleset and boot unit written where they differ, the unit enabled at boot (the link ``systemctl enable`` makes) and
systemd told (``daemon-reload``, where systemd runs), and the table loaded when any of it changed. node_teardown takes
it back. ``run(argv)`` returns (rc, stdout, stderr)."""

from __future__ import annotations

import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import firewall_state, supervisor
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import read_text, systemd_runs
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.firewall_state import NFT


def checked(rules, run):
    """None when nft accepts the ruleset ``rules`` (its planned file) as it would load it, else nft's refusal. The
    text is checked from a file of its own beside the ruleset (root's folder), removed after."""
    trial = rules["path"] + ".check"
    supervisor.write_text(trial, rules["content"], 0o600)
    try:
        rc, out, err = run([NFT, "-c", "-f", trial])
    finally:
        os.remove(trial)
    return None if rc == 0 else "%s -c refused the planned ruleset (%s kept as it was): %s" % (NFT, rules["path"], (err or out).strip())


def apply(planned, run, check=False, reload=False, systemd=None):
    """Apply the node's firewall ``planned`` (the plan's ``nodes.<host>.firewall``); ``reload``: load the table even
    when no file changed. After a load, the table's listing is recorded (node/firewall_state.py). ``systemd``: whether
    systemd runs here (read from /run/systemd/system when None). Returns (written paths, whether the boot link was made,
    whether the table was loaded, an error message or None)."""
    rules, unit = planned["files"][0], planned["files"][1]
    stale = [f for f in planned["files"] if read_text(f["path"]) != f["content"]]
    relink = os.path.realpath(planned["wants"]) != os.path.realpath(unit["path"]) or not os.path.islink(planned["wants"])
    load = bool(stale) or relink or reload
    if check or not load:
        return [f["path"] for f in stale], relink, load, None
    refused = checked(rules, run) if rules in stale else None
    if refused:
        return [], False, False, refused
    for entry in stale:
        supervisor.write_text(entry["path"], entry["content"], int(entry["mode"], 8))
    systemd = systemd_runs() if systemd is None else systemd
    if relink and os.path.lexists(planned["wants"]):
        os.remove(planned["wants"])  # a link elsewhere, or a file: made anew
    if relink and not systemd:  # a node without systemd: the link its [Install] section asks for, by hand
        os.makedirs(os.path.dirname(planned["wants"]), exist_ok=True)
        os.symlink(unit["path"], planned["wants"])
    if (unit in stale or relink) and systemd:
        for argv in [["systemctl", "daemon-reload"]] + ([["systemctl", "enable", os.path.basename(unit["path"])]] if relink else []):
            rc, out, err = run(argv)
            if rc != 0:
                return [f["path"] for f in stale], relink, False, "%s failed: %s%s" % (
                    " ".join(argv), (err or out).strip(), "; the unit is not enabled at boot until serve.yml runs again" if relink else "")
    rc, out, err = run([NFT, "-f", rules["path"]])
    if rc != 0:
        return [f["path"] for f in stale], relink, False, "%s -f %s failed: %s" % (NFT, rules["path"], (err or out).strip())
    rc, out, err = run(firewall_state.list_argv(planned["table"]))
    if rc != 0:
        return [f["path"] for f in stale], relink, True, "the table %s was loaded, but %s failed: %s" % (
            planned["table"], " ".join(firewall_state.list_argv(planned["table"])), (err or out).strip())
    supervisor.write_text(planned["record"], firewall_state.record(planned["table"], out), 0o644)
    return [f["path"] for f in stale], relink, True, None
