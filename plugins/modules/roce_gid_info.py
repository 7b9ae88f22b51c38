#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: roce_gid_info
short_description: Read a node's RoCE ports and GID tables, and the NCCL choices they imply
version_added: 1.0.0
description:
  - Walks C(<sysfs_root>/class/infiniband/*/ports/*) and returns, for every RDMA port, its state, link
    layer, netdev and GID table (index, GID, RoCE type, netdev, IPv4 address).
  - Returns the GID index NCCL's automatic choice takes on each port (the lowest valid IPv4-mapped
    RoCE v2 GID), the ACTIVE ports with a usable GID in C(NCCL_IB_HCA) exact-match form, and one
    C(NCCL_IB_GID_INDEX) only when all those ports agree.
  - The GID index is a per-host fact (index 3 on one Spark, 5 on another when an extra IPv6 address
    shifts the table); never hard-code one value for a cluster.
  - A node without C(class/infiniband) returns an empty list and a warning, not a failure.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.INFO_MODULE
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
options:
  sysfs_root:
    description:
      - Root of the sysfs tree to read. Tests and the simulated cluster point it at a fake tree.
    type: path
    default: /sys
"""

EXAMPLES = r"""
- name: Read RoCE GIDs
  dgx_spark.vllm.roce_gid_info:
  register: roce

- name: Show what NCCL will use on this node
  ansible.builtin.debug:
    msg: "NCCL_IB_HCA={{ roce.nccl_ib_hca }} NCCL_IB_GID_INDEX={{ roce.nccl_gid_index | default('auto', true) }}"
"""

RETURN = r"""
roce_devices:
  description: One entry per RDMA device port.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: RDMA device name.
      type: str
      sample: rocep1s0f1
    port:
      description: Port number.
      type: int
      sample: 1
    state:
      description: Port state (C(ACTIVE), C(DOWN), ...). NCCL considers only ACTIVE ports.
      type: str
      sample: ACTIVE
    phys_state:
      description: Physical state.
      type: str
      sample: LinkUp
    link_layer:
      description: C(Ethernet) for RoCE.
      type: str
    netdev:
      description: The network interface of the port's IPv4 RoCE v2 GID (else of the device).
      type: str
      sample: enp1s0f1np1
    netdevs:
      description: Network interfaces of the device's PCI function.
      type: list
      elements: str
    gids:
      description: Usable GIDs (empty, zero and fe80::/64 link-local entries are skipped).
      type: list
      elements: dict
      contains:
        index:
          description: GID index.
          type: int
        gid:
          description: The GID, long form.
          type: str
        type:
          description: C(RoCE v1) or C(RoCE v2); null when the type cannot be read.
          type: str
        netdev:
          description: Network interface bound to the GID.
          type: str
        ipv4:
          description: IPv4 address of an IPv4-mapped GID, else null.
          type: str
    ipv4_addresses:
      description: IPv4 addresses carried by the port's RoCE v2 GIDs.
      type: list
      elements: str
    nccl_gid_index:
      description: The index NCCL's automatic choice takes on this port; null when no IPv4 RoCE v2 GID exists.
      type: int
nccl_ib_hca:
  description: ACTIVE ports with a usable GID in exact-match form (one leading C(=)); null when none.
  returned: always
  type: str
  sample: =rocep1s0f1:1,roceP2p1s0f1:1
nccl_gid_index:
  description: One GID index when every port in RV(nccl_ib_hca) agrees, else null (leave NCCL on automatic).
  returned: always
  type: int
  sample: 3
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_probe
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.errors import ProbeError


def main():
    module = AnsibleModule(
        argument_spec=dict(sysfs_root=dict(type="path", default="/sys")),
        supports_check_mode=True,
    )
    try:
        found = node_probe.roce(module.params["sysfs_root"], module.warn)
    except ProbeError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
