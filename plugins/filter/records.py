# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the last-known-good deployment and upgrade.yml: the record of a verified deployment, what plans it
again, what an upgrade changes and its report. Thin adapters of module_utils/plan/records.py and
module_utils/report/upgrade.py; each is documented beside this file (``ansible-doc -t filter dgx_spark.vllm.<name>``)."""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import records
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import upgrade


def last_known_good_record(plan, previous=None, verified_at=None):
    """The record of the verified deployment ``plan``, keeping the ``previous`` record's images."""
    return records.record(plan, previous, verified_at)


def deployment_restore(recorded):
    """What plans a recorded deployment again, whatever -e says (a value of ``preflight_restore``)."""
    return records.restore(recorded)


def upgrade_change(recorded, plan):
    """What a plan changes from the recorded deployment, one ``what: before -> after`` line each."""
    return upgrade.change(recorded or {}, plan)


def upgrade_failure_line(failure):
    """One failure of upgrade.yml, as ``host: task: message``."""
    return upgrade.failure_line(failure)


def upgrade_report(recorded, planned, changed, failed, rollback_failed, began, ended, rolled_back=None, check=False):
    """upgrade.yml's report: outcome, message, both deployments and their seconds."""
    return upgrade.upgrade_report(recorded, planned, changed, failed, rollback_failed, began, ended, rolled_back, check)


class FilterModule:
    """dgx_spark.vllm's last-known-good and upgrade filters."""

    def filters(self):
        return {"last_known_good_record": last_known_good_record, "deployment_restore": deployment_restore,
                "upgrade_change": upgrade_change,
                "upgrade_failure_line": upgrade_failure_line, "upgrade_report": upgrade_report}
