# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter dgx_spark.vllm.nccl_env: one node's RoCE facts to its NCCL/Gloo/UCX environment."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.dgx_spark.vllm.plugins.module_utils.nccl_env import NcclEnvError, nccl_env
from ansible_collections.dgx_spark.vllm.plugins.module_utils.ring import RingError, links_of


def nccl_env_filter(roce, socket_ifname=None, strict=False, ring=False, subnet_prefix_len=24, roce_enabled=True, host=None):
    try:
        return nccl_env(roce, socket_ifname=socket_ifname, strict=strict, ring=ring,
                        subnet_prefix_len=subnet_prefix_len, roce_enabled=roce_enabled, host=host)
    except NcclEnvError as exc:
        raise AnsibleFilterError(str(exc))


def ring_links(links, host):
    try:
        return links_of(links, host)
    except RingError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    """dgx_spark.vllm filters."""

    def filters(self):
        return {"nccl_env": nccl_env_filter, "ring_links": ring_links}
