# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What is read of a node's supervisor (module_utils/node/supervisor.py) without touching it: its status file, and
whether it runs. The probe, the vllm_boot module and the daemon itself read it; stdlib only, and nothing else, so that
the probe's call to the node carries no more than it needs.
"""

from __future__ import annotations

import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import systemd_runs


def supervisor_pid(status, config_path):
    """The running supervisor's PID (its status file names it; its command line must name this plan file)."""
    pid = (status or {}).get("pid")
    if not pid:
        return None
    try:
        with open("/proc/%s/cmdline" % pid, encoding="utf-8") as handle:
            cmdline = handle.read()
    except OSError:
        return None
    return pid if config_path in cmdline.split("\0") else None


def read_status(where):
    """The supervisor's status file (state, detail, since, events, pid), or None when there is none or it is broken.
    Where there is none, the one an earlier release kept beside its plan (``legacy_status``): a supervisor started then
    still writes it, until the next install stops it."""
    for path in (where["status"], where.get("legacy_status")):
        try:
            with open(path or "", encoding="utf-8") as handle:
                status = json.load(handle)
        except (OSError, ValueError):
            continue
        return status if isinstance(status, dict) else None
    return None


def supervisor_running(where, name, run):
    """Whether the node's supervisor runs: its unit is active (systemd), or the process its status names runs this
    plan (a node without systemd). ``run`` runs an argv and returns (rc, out, err)."""
    if systemd_runs():
        return run(["systemctl", "is-active", "--quiet", name])[0] == 0
    return bool(supervisor_pid(read_status(where), where["config"]))
