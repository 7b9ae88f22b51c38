# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host guard (fact 21): what keeps a Spark reachable under memory pressure, as files on the node, and what the
node's swap layout says. Pure; the host_guard role writes the files and reads the swap layout.

vLLM takes most of the GB10's unified memory, and when the kernel's OOM killer acts late the node stops answering SSH
for minutes. earlyoom acts earlier and picks vLLM's ranks first (Ray and vLLM restart them; nothing restarts a lost
sshd); a systemd drop-in gives sshd (and, when asked, Docker) an OOM score the kernel never picks. Swapping the model's
pages stalls every rank: at most a low swappiness, and swap only on zram (compressed memory), not on disk.
"""

from __future__ import annotations

import shlex

EARLYOOM_DEFAULTS = "/etc/default/earlyoom"
UNIT_DIR = "/etc/systemd/system"
DROP_IN = "50-oom-score-adjust.conf"


def plan(settings):
    """The files the role writes: earlyoom's settings and each protected service's drop-in (its folder with it).
    ``settings``: the role's host_guard_* values, without the prefix."""
    args = "-m %s -s %s -r %s --avoid %s --prefer %s" % (
        settings["earlyoom_mem_percent"], settings["earlyoom_swap_percent"], settings["earlyoom_report_seconds"],
        shlex.quote(settings["earlyoom_avoid"]), shlex.quote(settings["earlyoom_prefer"]))
    services = [settings["sshd_service"]] + (["docker"] if settings.get("protect_docker") else [])
    return {
        "earlyoom": {"path": EARLYOOM_DEFAULTS, "content": (
            "# Written by dgx_spark.vllm (role host_guard): act before the kernel's OOM killer, pick vLLM's ranks first, "
            "never sshd.\nEARLYOOM_ARGS=\"%s\"\n" % args.replace('"', '\\"'))},
        "drop_ins": [{"service": service, "folder": "%s/%s.service.d" % (UNIT_DIR, service),
                      "path": "%s/%s.service.d/%s" % (UNIT_DIR, service, DROP_IN),
                      "content": "# Written by dgx_spark.vllm (role host_guard): the kernel's OOM killer never picks this "
                                 "service.\n[Service]\nOOMScoreAdjust=%s\n" % settings["sshd_oom_score_adj"]}
                     for service in services],
        "score": int(settings["sshd_oom_score_adj"]),
    }


def swap_findings(node, lines, swappiness_max, disk_swap_allowed):
    """What the node's swap layout (its swappiness, then one swap device a line) says against the role's: each a
    sentence naming the node, the value and the fix; none when it is as documented."""
    lines = [line.strip() for line in lines or [] if line.strip()]
    if not lines:
        return []
    found = []
    swappiness = int(lines[0])
    if swappiness > int(swappiness_max):
        found.append("%s: vm.swappiness is %d, above %d: the kernel would swap the model out of unified memory. Set it "
                     "(sysctl -w vm.swappiness=%d, and in /etc/sysctl.d) or raise host_guard_swappiness_max"
                     % (node, swappiness, int(swappiness_max), int(swappiness_max)))
    on_disk = [device for device in lines[1:] if not device.startswith("/dev/zram")]
    if on_disk and not disk_swap_allowed:
        found.append("%s: swap on disk (%s): pages of a rank swapped to disk stall every rank. Use zram, or swapoff them, "
                     "or set host_guard_disk_swap_allowed" % (node, ", ".join(on_disk)))
    return found
