#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: bench_report
short_description: Write a benchmark run's CSV, JSON, plots and summary on the controller
version_added: 1.0.0
description:
  - Writes, in O(folder), C(bench.csv) and C(bench.json) (one row per point of the sweep), C(throughput.png) and
    C(latency.png) against concurrency (matplotlib, headless), and C(summary.md).
  - The throughput plot draws the decode bound (the nodes' memory bandwidth over the bytes read per token, times the
    concurrency) and the profile's published figures as reference lines.
  - The summary compares every figure with the newest earlier run of the same profile under O(runs_dir), and flags
    one worse by more than O(share).
  - Runs in the controller's Ansible process (an action plugin). A report is not state of the cluster; the task never
    reports a change. In check mode nothing is written.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
attributes:
  check_mode:
    support: full
    details:
      - Nothing is written; the summary is returned.
  diff_mode:
    support: none
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
    details:
      - The whole module runs on the controller.
options:
  folder:
    description: The run's folder, made when missing.
    type: path
    required: true
  runs_dir:
    description: The folder of every run, searched for the previous run of the same profile.
    type: path
    required: true
  rows:
    description: The rows of the sweep (module_utils/plan/bench.py row()).
    type: list
    elements: dict
    required: true
  meta:
    description: What was measured - C(profile), C(image), C(image_id), C(vllm_version), C(config_hash), C(nodes), C(taken_at).
    type: dict
    required: true
  bound:
    description: The decode bound of one stream in tokens per second; omitted when unknown.
    type: float
  published:
    description: The profile's published figures, each with C(concurrency), C(output_tokens_per_s) and C(source).
    type: list
    elements: dict
    default: []
  share:
    description: How much worse than the previous run a figure may be before it is flagged.
    type: float
    default: 0.1
  recorded:
    description:
      - The head's record of the profile's last run (its bench.json, read by the probe from the head's state folder).
        It is the run compared with, before any run under O(runs_dir), because the cluster keeps it while an AWX job's
        fresh copy of the project has no earlier run. Where the controller's newest run differs, the summary says so.
    type: dict
"""

EXAMPLES = r"""
- name: Write the benchmark's files
  dgx_spark.vllm.bench_report:
    folder: "{{ inventory_dir }}/.artifacts/bench/20261124T120000Z"
    runs_dir: "{{ inventory_dir }}/.artifacts/bench"
    rows: "{{ bench_rows }}"
    meta: {profile: sim_tiny, image: dgx-spark-sim/runtime:sim, nodes: [sim-head, sim-worker1]}
"""

RETURN = r"""
summary:
  description: The Markdown summary.
  type: str
  returned: always
regressions:
  description: The figures worse than the previous run's by more than O(share), as sentences.
  type: list
  elements: str
  returned: always
run:
  description: The run as written to C(bench.json) (C(meta), C(rows), C(decode_bound), C(published)), for the head's record.
  type: dict
  returned: always
files:
  description: The files in O(folder).
  type: list
  elements: str
  returned: when not in check mode
"""
