# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the host_guard role: the files it writes and what the node's swap layout says. Thin adapters of
module_utils/plan/host_guard.py; each is documented beside this file (``ansible-doc -t filter dgx_spark.vllm.<name>``)."""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import host_guard


def host_guard_files(settings):
    """earlyoom's settings file, each protected service's drop-in and the OOM score, from the role's values."""
    return host_guard.plan(settings)


def swap_findings(lines, node, swappiness_max, disk_swap_allowed):
    """What the node's swap layout says against the role's, one sentence each; none when it is as documented."""
    return host_guard.swap_findings(node, lines, swappiness_max, disk_swap_allowed)


class FilterModule:
    """dgx_spark.vllm's host_guard filters."""

    def filters(self):
        return {"host_guard_files": host_guard_files, "swap_findings": swap_findings}
