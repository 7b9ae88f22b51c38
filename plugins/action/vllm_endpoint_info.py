# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgx_spark.vllm.vllm_endpoint_info: the endpoint is asked from the controller, as a client would ask it,
in this process (module_utils/verify/endpoint_check.py): no module is sent anywhere, so each check costs its requests and no
round trip of its own. The result is the module's."""

from __future__ import annotations


from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify.endpoint_check import (
    ARGUMENT_SPEC, MUTUALLY_EXCLUSIVE, REQUIRED_ONE_OF, answer, errors_of)
from ansible_collections.dgx_spark.vllm.plugins.plugin_utils.controller import ControllerAction


class ActionModule(ControllerAction):
    """Check a vLLM endpoint from the controller."""

    ARGUMENT_SPEC = ARGUMENT_SPEC
    REQUIRED_ONE_OF = REQUIRED_ONE_OF
    MUTUALLY_EXCLUSIVE = MUTUALLY_EXCLUSIVE

    def act(self, result, args, task_vars):
        warnings = []
        result.update(answer(args, warnings.append), changed=False)
        if warnings:
            result["warnings"] = warnings
        errors = errors_of(result)
        if errors and args["fail_on_error"]:
            result.update(failed=True, msg="; ".join(errors))
        return result
