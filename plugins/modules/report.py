#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: report
short_description: Write a report of this run (plan.json, summary.json) on the controller
version_added: 1.0.0
description:
  - Writes O(data) as indented JSON to O(path) on the controller, making its folder; atomically (a reader never
    sees half a file).
  - Runs in the controller's Ansible process (an action plugin), so it costs no module start.
  - A report is not state of the cluster; the task never reports a change. In check mode nothing is written.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
attributes:
  check_mode:
    support: full
    details:
      - Nothing is written.
  diff_mode:
    support: none
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
    details:
      - The whole module runs on the controller.
options:
  path:
    description: The file to write.
    type: path
    required: true
  data:
    description: What to write.
    type: raw
    required: true
  copy_of:
    description:
      - What O(data) is a copy of, when it is a record kept on the cluster (the head's last-known-good record, say).
      - When O(path) holds something else, the task warns, naming O(path), this and the fields that differed; the
        cluster's record wins and the file is written from it.
    type: str
"""

EXAMPLES = r"""
- name: Write the plan as JSON
  dgx_spark.vllm.report:
    path: "{{ planned.plan.reports.plan }}"
    data: "{{ planned.plan }}"
"""

RETURN = r"""
path:
  description: The file written.
  type: str
  returned: always
"""
