# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of bench.yml: the sweep and its rows. Thin adapters of module_utils/plan/bench.py and
module_utils/report/bench.py; each is documented beside this file (``ansible-doc -t filter dgx_spark.vllm.<name>``)."""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import bench
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import bench as bench_results


def bench_sweep(bench_target, given, stamp, reports_dir, client=None, stage=None, user=None):
    """bench.yml's sweep: {config, points (each with its argv and result file), errors, dirs}; from vllm_bench_from's
    host with the folder ``stage`` staged there, as its ``user`` (uid:gid), asking ``client``."""
    return bench.sweep(bench_target, given, stamp, reports_dir, client, stage, user)


def bench_from_refusals(bench_from, known, cluster, client_url, addresses=None):
    """What refuses vllm_bench_from before anything runs: a host unknown, a node of the cluster, an endpoint on loopback."""
    return bench.from_refusals(bench_from, known, cluster, client_url, addresses)


def bench_rows(points_run, runs, deployment):
    """One row per point from the result file its command printed, or a failed row saying why."""
    return bench_results.rows(points_run, runs, deployment)


class FilterModule:
    """dgx_spark.vllm's bench filters."""

    def filters(self):
        return {"bench_sweep": bench_sweep, "bench_from_refusals": bench_from_refusals, "bench_rows": bench_rows}
