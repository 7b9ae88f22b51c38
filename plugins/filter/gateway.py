# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gateway's configuration file with every key in it: only a no_log task may use this filter. A thin adapter of
module_utils/plan/gateway.py, documented beside this file (``ansible-doc -t filter dgx_spark.vllm.gateway_config``)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import gateway


def gateway_config(routes, keys, client_key, interval):
    """The gateway's configuration file (its keys in it: only a no_log task may use this)."""
    missing = sorted(r["deployment"] for r in routes if not (keys.get(r["deployment"]) or "").strip())
    if missing or not (client_key or "").strip():
        raise AnsibleFilterError("the gateway needs every key: the key file of %s is empty"
                                 % (", ".join("deployment " + m for m in missing) or "the cluster (vllm_api_key)"))
    return gateway.config_text(routes, {k: v.strip() for k, v in keys.items()}, client_key.strip(), interval)


class FilterModule:
    """dgx_spark.vllm's gateway filter."""

    def filters(self):
        return {"gateway_config": gateway_config}
