# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgx_spark.vllm.container: apply one planned container with community.docker.docker_container.

The plan says what changes (none, create, start, recreate, restart, remove); with none the node is not asked at all
(the probe found the container running with the planned config hash, and its environment as planned). A container
started here is read back at once: every variable of its plan must be in its environment with the planned value
(fact 7), or the task fails naming the node, the variable and both values, before anything is launched into it. The
nodes run one image ID (fact 14), so what the image adds is the same on every rank.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.container_apply import CHANGES, docker_container_args
from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import parity

ARGUMENT_SPEC = dict(
    spec=dict(type="dict", required=True),
    change=dict(type="str", default="create", choices=list(CHANGES)),
)


class ActionModule(ActionBase):
    """Apply a planned container."""

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if args["change"] == "none":
            result.update(changed=False, skipped_reason="running as planned", change="none", name=args["spec"]["name"])
            return result
        try:
            module_args = docker_container_args(args["spec"], args["change"])
        except (KeyError, ValueError) as exc:
            raise AnsibleActionFail("container spec of %s: %s" % (args["spec"].get("name"), exc))
        applied = self._execute_module(module_name="community.docker.docker_container", module_args=module_args,
                                       task_vars=task_vars)
        applied["change"] = args["change"]
        result.update(applied)
        started = (applied.get("container") or {}).get("Config")
        if started and not applied.get("failed") and not self._task.check_mode:
            node = (task_vars or {}).get("inventory_hostname")
            problems = parity.check({node: {"env_node": args["spec"].get("env") or {}}},
                                    {node: [parity.parse_env_list(started.get("Env"))]}, "container %s" % args["spec"]["name"])
            if problems:
                result.update(failed=True, msg="Environment parity failed (fact 7): " + "; ".join(problems))
        return result
