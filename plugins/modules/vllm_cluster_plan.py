#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_cluster_plan
short_description: Plan a multi-node vLLM deployment from the inventory, probe facts and a model profile
version_added: 1.0.0
description:
  - Runs on the controller (action plugin). Reads the inventory groups (O(head_group), O(worker_group)), each
    host's C(spark_fabric_ip) and C(spark_fabric_interfaces), and the probe facts each host holds in
    O(probe_fact), by deployment (C(memory) from M(dgx_spark.vllm.unified_memory_info), C(roce) from
    M(dgx_spark.vllm.roce_gid_info), C(image) from M(dgx_spark.vllm.vllm_image_info)).
  - Loads the model profile (O(profile) from O(profile_dirs), then the collection's C(profiles/) folder, or
    O(profile_file)) and returns one plan; per node its rank, fabric IP, environment split into the part
    identical on every rank and the per-node part, container specs with a config hash, and commands; for the
    cluster the backend, parallel sizes, memory plan, vLLM argv and endpoint.
  - Every failed check is listed in RV(plan.errors) naming the host, the value and the fix; with
    O(fail_on_error) the task fails before anything is changed.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
attributes:
  check_mode:
    support: full
    details:
      - The planner only computes; it never changes anything.
  diff_mode:
    support: N/A
    details:
      - Nothing is changed.
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
    details:
      - The whole module runs on the controller.
options:
  profile:
    description: Name of a model profile, a file of C(profiles/) or of O(profile_dirs) without C(.yml) (for example C(minimax_m25_nvfp4_ep)).
    type: str
  profile_file:
    description: Path of a profile file of your own, instead of O(profile).
    type: path
  profile_dirs:
    description: Folders searched for O(profile) before the collection's own profiles.
    type: list
    elements: path
    default: []
  backend:
    description:
      - C(ray) (the seeds' way, vLLM inside the head's Ray container) or C(mp) (vLLM's own multi-node launcher).
      - Defaults to the profile's backend.
    type: str
    choices: [ray, mp]
  stage:
    description:
      - C(inventory) checks only what needs no probe facts (groups, fabric IPs, backend, parallel sizes).
      - C(paths) needs no profile, and returns only every node's paths and container names and the endpoint (teardown.yml, status.yml).
    type: str
    default: full
    choices: [paths, inventory, full]
  head_group:
    description: Group holding exactly one head host.
    type: str
    default: spark_head
  worker_group:
    description: Group of worker hosts.
    type: str
    default: spark_workers
  probe_fact:
    description:
      - Name of the host variable holding each node's probe, the registered result of M(dgx_spark.vllm.spark_node_info)
        (its C(deployments), the facts by deployment name; the whole cluster's is its name).
    type: str
    default: preflight_node_info
  settings:
    description:
      - Cluster settings; keys C(cluster_name), C(image), C(port), C(public_url), C(state_dir), C(models_dir),
        C(network_mode), C(ipc_mode), C(shm_size), C(devices), C(gpus), C(capabilities), C(ulimits),
        C(nccl_transport) (C(auto), C(roce), C(socket)), C(nccl_strict), C(nccl_debug), C(ring)
        (C({subnet_prefix_len})), C(simulated), C(api_key_file). C({node}) in C(network_mode), C(state_dir) and
        C(models_dir) is replaced by the host name.
    type: dict
    default: {}
  overrides:
    description: Values that override the profile (C(max_model_len), C(gpu_memory_utilization), parallel sizes).
    type: dict
    default: {}
  extra_flags:
    description: Extra C(vllm serve) flags, mapped to values (C(true) for a bare flag).
    type: dict
    default: {}
  extra_env:
    description: Extra environment, identical on every rank.
    type: dict
    default: {}
  model_config:
    description: The model's C(config.json), when it is on the head; else the profile's architecture is used.
    type: dict
  weights_bytes:
    description: Size of the model's weights, when measured; else the profile's figure.
    type: int
  fail_on_error:
    description: Fail the task when the plan has errors.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Plan the deployment
  dgx_spark.vllm.vllm_cluster_plan:
    profile: minimax_m25_nvfp4_ep
    settings:
      image: nvcr.io/nvidia/vllm:26.09-py3
      nccl_strict: true
  register: planned

- name: Print it
  ansible.builtin.debug:
    msg: "{{ planned.plan_text }}"
"""

RETURN = r"""
plan:
  description: The plan.
  returned: always
  type: dict
  contains:
    ok:
      description: True when no check failed.
      type: bool
    errors:
      description: Failed checks, each with C(host), C(value) and C(message) (which says the fix).
      type: list
      elements: dict
    warnings:
      description: Things to know that do not stop the deployment.
      type: list
      elements: str
    parallel:
      description: C(tensor_parallel_size), C(pipeline_parallel_size), C(data_parallel_size), C(expert_parallel), C(world_size), C(nodes).
      type: dict
    cluster:
      description: Backend-wide settings, endpoint, memory plan, common environment, expected Ray nodes and GPUs, vLLM argv.
      type: dict
      returned: when O(stage=full) and the inventory checks passed
    nodes:
      description: Per node its rank, fabric IP, environment (C(env_common), C(env_node), C(env)), containers, serve command and config hash.
      type: dict
      returned: when O(stage=full) and the inventory checks passed
plan_text:
  description: The plan as lines of text (a table per node, every command, the memory plan, warnings, errors).
  returned: always
  type: list
  elements: str
"""
