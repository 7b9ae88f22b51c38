# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""serve.yml's summaries: of a verified deployment, and of every endpoint a run that changed nothing asked. Thin adapters
of module_utils/report/summary.py, documented beside this file (``ansible-doc -t filter dgx_spark.vllm.serve_summary``,
``dgx_spark.vllm.serve_summaries``)."""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import summary


def serve_summary(plan, launched, seconds_to_ready, endpoint, canary=None, transport=None):
    """The summary of one verified deployment: where it answers, what it runs, what was launched, the checks."""
    return summary.summary(plan, launched, seconds_to_ready, endpoint, canary, transport)


def serve_summaries(results, names, plans):
    """Each endpoint a run that changed nothing asked at once: the deployments ``names`` first, then the gateway."""
    return summary.summaries(results, names, plans)


class FilterModule:
    """dgx_spark.vllm's serve summary filters."""

    def filters(self):
        return {"serve_summary": serve_summary, "serve_summaries": serve_summaries}
