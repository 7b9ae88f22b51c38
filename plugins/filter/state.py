# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of status.yml and recover.yml: each node's state from what state.yml read, the report, and what restores
service. Thin adapters of module_utils/report/status.py and module_utils/plan/recover.py; each is documented beside
this file (``ansible-doc -t filter dgx_spark.vllm.<name>``)."""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import recover
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import status


def node_state(read):
    """One node's state, from (its fabric IP, its registered docker ps, its registered supervisor probe)."""
    return status.node(read)


def status_report(states, gateway=None):
    """status.yml's report of every deployment (and the gateway): its lines and whether it is healthy."""
    return status.report(states, gateway)


def recover_decision(states):
    """recover.yml's decision for each deployment, from state.yml's ``cluster_states``."""
    return recover.decide_each(states)


def recover_refusal(nodes, plan_nodes, waited):
    """The message when nodes did not come back within the wait."""
    return recover.refusal(nodes, plan_nodes, int(waited))


class FilterModule:
    """dgx_spark.vllm's status and recover filters."""

    def filters(self):
        return {"node_state": node_state, "status_report": status_report, "recover_decision": recover_decision,
                "recover_refusal": recover_refusal}
