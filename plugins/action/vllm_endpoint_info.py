# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgx_spark.vllm.vllm_endpoint_info: the endpoint is asked from the controller, as a client would ask it,
in this process (module_utils/verify/endpoint_check.py): no module is sent anywhere, so each check costs its requests and no
round trip of its own. The result is the module's."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify.endpoint_check import ARGUMENT_SPEC, check


class ActionModule(ActionBase):
    """Check a vLLM endpoint from the controller."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        warnings = []
        endpoint = check(args, warnings.append)
        result.update(changed=False, endpoint=endpoint)
        if warnings:
            result["warnings"] = warnings
        if endpoint["errors"] and args["fail_on_error"]:
            result.update(failed=True, msg="; ".join(endpoint["errors"]))
        return result
