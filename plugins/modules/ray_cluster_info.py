#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_cluster_info
short_description: Read a Ray cluster's nodes and GPUs, and wait until the expected ones have joined
version_added: 1.0.0
description:
  - Runs a short Ray driver on a cluster node (inside the container named by O(container), or on the
    host) that reads C(ray.nodes()). Works with the Ray dashboard off, which is how this collection
    runs Ray (the dashboard's jobs API is unauthenticated).
  - Returns alive and dead nodes with their IPs and resources, the GPU total over alive nodes, and
    RV(ray.ready).
  - With O(timeout), waits until O(expected_nodes), O(expected_gpus) and O(expected_ips) are met; on
    timeout it fails and names the expected IPs that never joined.
  - Ray not running, or the container missing, fails with a message saying so.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.INFO_MODULE
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
options:
  container:
    description:
      - Docker container to read Ray state in (the node's Ray container). Omit to run on the host.
    type: str
  docker:
    description:
      - Docker CLI used with O(container).
    type: str
    default: docker
  python:
    description:
      - Python interpreter that can import C(ray), inside the container or on the host.
    type: str
    default: python3
  address:
    description:
      - Ray GCS address to connect to, C(auto) or C(HEAD_IP:6379).
      - A Ray Client address (C(ray://...)) is refused; vLLM must run as a cluster member.
    type: str
    default: auto
  expected_nodes:
    description:
      - Number of alive nodes the cluster must have. At least 1.
    type: int
  expected_gpus:
    description:
      - GPUs the alive nodes must offer in total (one per DGX Spark).
    type: float
  expected_ips:
    description:
      - Node IPs (each node's fabric IP, its C(--node-ip-address)) that must be alive.
    type: list
    elements: str
  timeout:
    description:
      - Seconds to wait for the expectations to be met. C(0) reads once and reports.
    type: int
    default: 0
  interval:
    description:
      - Seconds between two looks while waiting. Each look runs Python in the container; the join gate, which waits
        while vLLM loads on the same cores, looks less often.
    type: float
    default: 1
"""

EXAMPLES = r"""
- name: Wait until both Sparks have joined with one GPU each
  dgx_spark.vllm.ray_cluster_info:
    container: dgx-spark-ray-spark1
    expected_nodes: 2
    expected_gpus: 2
    expected_ips: [192.168.100.10, 192.168.100.11]
    timeout: 120
  register: ray_state

- name: Show the cluster
  ansible.builtin.debug:
    msg: "{{ ray_state.ray.alive_count }} nodes, {{ ray_state.ray.gpu_total }} GPUs"
"""

RETURN = r"""
ray:
  description: Ray cluster state as seen from this node.
  returned: success, and on a failed wait
  type: dict
  contains:
    version:
      description: Ray version of the driver that read the state.
      type: str
      sample: 2.60.0
    alive_nodes:
      description: Alive nodes, head first.
      type: list
      elements: dict
      contains:
        node_id:
          description: Ray node ID.
          type: str
        node_ip:
          description: The node's IP (its C(--node-ip-address)).
          type: str
        hostname:
          description: Host name the raylet reported.
          type: str
        is_head:
          description: True for the head node.
          type: bool
        resources:
          description: Total resources (C(CPU), C(GPU), C(memory), C(object_store_memory), C(node:<ip>)).
          type: dict
    dead_nodes:
      description: Nodes Ray lists as dead whose IP has not rejoined.
      type: list
      elements: dict
    alive_count:
      description: Number of alive nodes.
      type: int
    gpu_total:
      description: GPUs over alive nodes.
      type: float
    alive_ips:
      description: IPs of the alive nodes.
      type: list
      elements: str
    token_required:
      description:
        - True when the container presents Ray's token (C(RAY_AUTH_TOKEN_PATH)) and Ray refused the same question
          without it; false when Ray answered it, authentication not enforced (the module then fails at once, naming
          the Ray version); null when the container has no token to present.
      type: bool
    ready:
      description: True when every expectation given is met (always true without expectations) and Ray enforces its token.
      type: bool
    missing_ips:
      description: Expected IPs that are not alive.
      type: list
      elements: str
    unexpected_ips:
      description: Alive IPs that were not expected (for example a node that joined on the wrong interface).
      type: list
      elements: str
    reasons:
      description: What is not met yet.
      type: list
      elements: str
progress:
  description: On a wait not yet met, how many nodes and GPUs have joined (what a loop of short calls shows).
  returned: on a failed wait
  type: str
  sample: 1 of 2 nodes joined Ray, 1 of 2 GPUs
waited:
  description: Seconds spent waiting.
  returned: always
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import run
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report.progress import joined
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.ray_state import (
    RayStateError,
    UNAUTHENTICATED,
    evaluate,
    parse_probe_output,
    probe_argv,
    summarize,
    validate_address,
)

PROBE_SECONDS = 20


def read_state(module):
    params = module.params
    where = params["container"] or "this host"
    argv = probe_argv(params["address"], params["python"], params["container"], params["docker"], PROBE_SECONDS)
    rc, out, err = run(module, argv)
    data = parse_probe_output(rc, out, err, where, params["address"], PROBE_SECONDS)
    return evaluate(summarize(data), params["expected_nodes"], params["expected_gpus"], params["expected_ips"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str"),
            docker=dict(type="str", default="docker"),
            python=dict(type="str", default="python3"),
            address=dict(type="str", default="auto"),
            expected_nodes=dict(type="int"),
            expected_gpus=dict(type="float"),
            expected_ips=dict(type="list", elements="str"),
            timeout=dict(type="int", default=0),
            interval=dict(type="float", default=1),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["expected_nodes"] is not None and params["expected_nodes"] < 1:
        module.fail_json(msg="expected_nodes must be at least 1, got %d" % params["expected_nodes"])
    if params["interval"] <= 0:
        module.fail_json(msg="interval must be more than 0 seconds, got %g" % params["interval"])
    if params["timeout"] < 0:
        module.fail_json(msg="timeout must be 0 or more seconds, got %d" % params["timeout"])
    try:
        validate_address(params["address"])
    except RayStateError as exc:
        module.fail_json(msg=str(exc))

    started = time.monotonic()
    deadline = started + params["timeout"]
    state, last_error = None, None
    while True:
        try:
            state = read_state(module)
            last_error = None
        except RayStateError as exc:
            if "does not exist" in str(exc) or "not installed" in str(exc):
                module.fail_json(msg=str(exc), waited=round(time.monotonic() - started, 1))
            last_error = str(exc)
        if state is not None and last_error is None and state["ready"]:
            break
        if state is not None and state.get("token_required") is False:  # no wait cures it
            module.fail_json(msg=UNAUTHENTICATED % state.get("version"), ray=state, waited=round(time.monotonic() - started, 1))
        if time.monotonic() + params["interval"] > deadline:
            break
        time.sleep(params["interval"])

    waited = round(time.monotonic() - started, 1)
    if last_error is not None:
        module.fail_json(msg=last_error, waited=waited)
    if not state["ready"]:
        where = params["container"] or "this host"
        msg = "Ray cluster seen from %s is not ready after %g s: %s" % (where, waited, "; ".join(state["reasons"]))
        if state["missing_ips"]:
            msg += ". Check that Ray runs on %s, that each node's --node-ip-address and VLLM_HOST_IP are its fabric IP, " \
                   "and that the head's port 6379 is reachable from it" % ", ".join(state["missing_ips"])
        module.fail_json(msg=msg, ray=state, waited=waited,
                         progress=joined(state["alive_count"], params["expected_nodes"] or state["alive_count"], state["gpu_total"],
                                         params["expected_gpus"] or state["gpu_total"]))
    module.exit_json(changed=False, ray=state, waited=waited)


if __name__ == "__main__":
    main()
