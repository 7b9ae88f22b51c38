#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: container
short_description: Apply one container as the plan specifies it
version_added: 1.0.0
description:
  - Turns a container spec of the plan of M(dgx_spark.vllm.vllm_cluster_plan) (C(nodes.<host>.containers), C(gateway.container),
    C(monitoring.container)) into a C(community.docker.docker_container) call; the same call for the Ray head, the workers,
    the C(mp) ranks, Prometheus and the gateway.
  - O(change) is the plan's decision (C(nodes.<host>.changes), C(gateway.change), C(monitoring.change)); with C(none) the
    node is not asked at all, the probe having found the container running with the planned config hash and environment.
    C(remove) takes away a container its plan turned off; the planner made sure it carries this collection's labels.
  - Only the image (strictly) and the labels are compared, so a container is recreated only when its config hash
    (a label) changed.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
options:
  spec:
    description: The planned container (name, image, command, env, network_mode, ipc_mode, shm_size, devices, capabilities,
      ulimits, gpus, volumes, init, restart_policy, labels).
    type: dict
    required: true
  change:
    description: What the plan decided for it.
    type: str
    default: create
    choices: [none, create, start, recreate, restart, remove]
"""

EXAMPLES = r"""
- name: Start this node's Ray container as planned
  dgx_spark.vllm.container:
    spec: "{{ plan.nodes[inventory_hostname].containers[0] }}"
    change: "{{ plan.nodes[inventory_hostname].changes[plan.nodes[inventory_hostname].containers[0].name] }}"
"""

RETURN = r"""
change:
  description: The change applied.
  type: str
  returned: always
container:
  description: The container's inspect data (community.docker.docker_container's C(container)); absent with C(change=none).
  type: dict
  returned: when the node was asked
"""
