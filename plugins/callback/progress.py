# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: progress
type: stdout
short_description: Ansible's default output, with every wait shown as progress instead of a red line per poll
version_added: 1.0.0
description:
  - A task that waits polls (C(until) with C(retries)); Ansible's default output prints
    C(FAILED - RETRYING ... (N retries left)) in red for every poll, which reads as a failure when nothing failed and
    says nothing of how far the wait is.
  - This callback prints one line per poll instead, C(... waiting [host] task - what it waits for now), from the
    C(progress) the polling module returns (vLLM's load from its log, the nodes joined, the bytes copied). Everything
    else is Ansible's default output.
  - Set it as the stdout callback (this collection's C(ansible.cfg) does); in AWX, the execution environment sets
    C(ORIGINAL_STDOUT_CALLBACK) so that AWX's own callback builds on it (docs/awx.md).
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - set as stdout callback in configuration
"""

from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

from ansible_collections.dgx_spark.vllm.plugins.module_utils.report.progress import waiting_line


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "dgx_spark.vllm.progress"

    def v2_runner_retry(self, result):
        answer = result.result if hasattr(result, "result") else result._result
        task = result.task_name or getattr(result, "task", None) or result._task
        line = waiting_line(str(task), self.host_label(result), answer)
        if self._run_is_verbose(result, verbosity=2):
            line += " Result was: %s" % self._dump_results(answer)
        self._display.display(line, color=C.COLOR_VERBOSE)
