# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every action plugin that runs wholly on the controller shares: no connection to a node, no file sent, its
arguments validated against its ``ARGUMENT_SPEC`` before ``act`` runs (the planner, the endpoint check, the reports)."""

from __future__ import annotations

from ansible.plugins.action import ActionBase


class ControllerAction(ActionBase):
    """An action that runs in the controller's process: ``act(result, args, task_vars)`` does the work."""

    TRANSFERS_FILES = False
    _requires_connection = False
    ARGUMENT_SPEC = {}
    REQUIRED_ONE_OF = None
    MUTUALLY_EXCLUSIVE = None

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        dummy, args = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC, required_one_of=self.REQUIRED_ONE_OF,
                                                  mutually_exclusive=self.MUTUALLY_EXCLUSIVE)
        return self.act(result, args, task_vars or {})

    def act(self, result, args, task_vars):
        raise NotImplementedError
