# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgx_spark.vllm.report: write a report of this run (plan.json, summary.json) on the controller.

It runs in the controller's Ansible process: no module to start, so a report costs milliseconds, not the second
a local copy task takes. A report is not state of the cluster: the task never reports a change. A report whose content
is already in the file is not written again: a run that changes nothing writes nothing. A report that copies a record
kept on the cluster (``copy_of`` names it) and finds the file different says so in a warning, naming the fields.
"""

from __future__ import annotations

import json
import os

from ansible.errors import AnsibleActionFail
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import json_text
from ansible_collections.dgx_spark.vllm.plugins.plugin_utils.controller import ControllerAction

ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    data=dict(type="raw", required=True),
    copy_of=dict(type="str"),
)


def replaced_copy(path, kept, data, copy_of):
    """What a user is told when the controller's copy of a record on the cluster differed from it (the cluster's wins),
    or None when only its layout differed."""
    try:
        old = json.loads(kept)
    except ValueError:
        old = None
    if isinstance(old, dict) and isinstance(data, dict):
        fields = sorted(key for key in set(old) | set(data) if old.get(key) != data.get(key))
        if not fields:  # the same record written otherwise (an older writer's layout): nothing to tell
            return None
        what = "in %s" % ", ".join(fields)
    else:
        what = "(it was no JSON object)"
    return ("The controller's copy %s differed from %s %s: the cluster's record wins, and the copy is now the same."
            % (path, copy_of, what))


class ActionModule(ControllerAction):
    """Write a JSON report on the controller."""

    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, result, args, task_vars):
        path = args["path"]
        result.update(changed=False, path=path)
        if self._task.check_mode:
            result["msg"] = "check mode: %s not written" % path
            return result
        text = json_text(args["data"])
        try:
            with open(path, encoding="utf-8") as handle:
                kept = handle.read()
            if kept == text:
                os.chmod(path, 0o600)  # a file left by an older run keeps no wider mode
                result["written"] = False
                return result
            warning = replaced_copy(path, kept, args["data"], args["copy_of"]) if args.get("copy_of") else None
            if warning:
                result["warnings"] = [warning]
        except (OSError, ValueError):
            pass
        result["written"] = True
        try:
            os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
            with os.fdopen(os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(path + ".tmp", 0o600)  # a file left by an older run keeps its mode through O_TRUNC
            os.replace(path + ".tmp", path)
        except OSError as exc:
            raise AnsibleActionFail("cannot write %s: %s" % (path, exc))
        return result
