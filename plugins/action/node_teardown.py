# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgx_spark.vllm.node_teardown: the node taken back in one module call, then every log it kept copied
to the controller over the same connection (one transfer per file, no module round trip per file as a fetch task
would make). Without ``logs_dest`` the logs stay on the node."""

from __future__ import annotations

import os
import shlex

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    """Take a node back, then copy its logs to the controller."""

    TRANSFERS_FILES = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        dest = args.get("logs_dest")
        result.update(self._execute_module(module_name="dgx_spark.vllm.node_teardown", module_args=args, task_vars=task_vars))
        if result.get("failed") or not dest or self._task.check_mode:
            return result
        os.makedirs(dest, mode=0o755, exist_ok=True)
        copied = []
        staged = result.get("logs_staged") or {}  # a non-root SSH user's copies of root's logs (the module's RETURN)
        try:
            for remote in result.get("logs") or []:
                local = os.path.join(dest, os.path.basename(remote))
                if result.get("logs_staging") and remote not in staged:  # not a regular file: root's, out of reach
                    result.setdefault("warnings", []).append("%s: %s is not a regular file; it was not copied" % (
                        task_vars.get("inventory_hostname"), remote))
                    continue
                try:
                    self._connection.fetch_file(staged.get(remote, remote), local)
                except Exception as exc:  # pylint: disable=broad-except
                    raise AnsibleActionFail("could not copy %s from %s to %s: %s" % (remote, task_vars.get("inventory_hostname"), local, exc))
                copied.append(local)
        finally:
            if result.get("logs_staging"):  # that user's own folder: removed as that user, without sudo
                self._low_level_execute_command("rm -rf -- %s" % shlex.quote(result["logs_staging"]), sudoable=False)
        result["logs_copied"] = copied
        return result
