#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: unified_memory_info
short_description: Read a node's unified CPU/GPU memory as vLLM on a GB10 will see it
version_added: 1.0.0
description:
  - Reads C(<proc_root>/meminfo), the processes under O(proc_root) and C(nvidia-smi), and returns
    what vLLM on an integrated GPU (DGX Spark, GB10) will find at start-up.
  - On a GB10 the GPU has no memory of its own; C(nvidia-smi) reports C([N/A]) for memory totals, CUDA
    allocations are invisible in a process's RSS, and the page cache shares the same pool. vLLM refuses
    to start when C(MemAvailable) is below total times C(gpu_memory_utilization).
  - Memory that no live process, GPU context or kernel structure explains is returned as
    RV(unified_memory.unaccounted_bytes); many GiB of it on an idle node is the trace of a container
    killed hard, which only a reboot frees.
  - Without C(nvidia-smi) the GPU facts are null and a warning is returned; the module does not fail.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.INFO_MODULE
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
options:
  proc_root:
    description:
      - Root of the proc filesystem to read. Tests and the simulated cluster point it elsewhere.
    type: path
    default: /proc
  nvidia_smi:
    description:
      - Name or path of the C(nvidia-smi) executable.
    type: str
    default: nvidia-smi
  gpu_memory_utilization:
    description:
      - The C(--gpu-memory-utilization) vLLM will be started with, in (0, 1].
      - When given, the result says what vLLM will request and whether it RV(unified_memory.fits).
    type: float
"""

EXAMPLES = r"""
- name: Read unified memory facts with the utilization vLLM will use
  dgx_spark.vllm.unified_memory_info:
    gpu_memory_utilization: 0.85
  register: mem

- name: Stop when vLLM would refuse to start
  ansible.builtin.assert:
    that: mem.unified_memory.fits
    fail_msg: >-
      {{ inventory_hostname }}: vLLM requests {{ mem.unified_memory.vllm_requested_bytes | human_readable }}
      but only {{ mem.unified_memory.mem_available_bytes | human_readable }} is available
"""

RETURN = r"""
unified_memory:
  description: Memory facts of the node.
  returned: always
  type: dict
  contains:
    mem_total_bytes:
      description: C(MemTotal).
      type: int
      returned: always
      sample: 128526278656
    mem_available_bytes:
      description: C(MemAvailable), the figure vLLM compares with its request on an integrated GPU.
      type: int
      returned: always
    mem_available_estimated:
      description: True when the kernel has no C(MemAvailable) line and the value was estimated.
      type: bool
      returned: always
    mem_free_bytes:
      description: C(MemFree).
      type: int
      returned: always
    mem_used_bytes:
      description: C(MemTotal) minus C(MemAvailable).
      type: int
      returned: always
    page_cache_bytes:
      description: Page cache that dropping caches can free (C(Buffers) + C(Cached) - C(Shmem)).
      type: int
      returned: always
    shmem_bytes:
      description: C(Shmem) (tmpfs and C(/dev/shm), not freed by dropping caches).
      type: int
      returned: always
    anon_bytes:
      description: C(AnonPages), anonymous memory of all user processes.
      type: int
      returned: always
    kernel_bytes:
      description: Unreclaimable kernel memory (slab, stacks, page tables, per-CPU, huge pages).
      type: int
      returned: always
    unified:
      description: True when the GPU reports no memory of its own (GB10); null without C(nvidia-smi).
      type: bool
      returned: always
    gpu:
      description: The first GPU as C(nvidia-smi) reports it; null when there is no C(nvidia-smi).
      type: dict
      returned: always
      contains:
        name:
          description: GPU name.
          type: str
          sample: NVIDIA GB10
        driver:
          description: Driver version.
          type: str
          sample: 580.95.05
        compute_capability:
          description: Compute capability.
          type: str
          sample: "12.1"
        memory_total_bytes:
          description: The GPU's own memory; null on a unified-memory GPU.
          type: int
        unified:
          description: True when the GPU reports no memory of its own.
          type: bool
    gpu_count:
      description: Number of GPUs C(nvidia-smi) lists.
      type: int
      returned: always
    gpu_processes:
      description: Compute processes with their GPU memory (C(--query-compute-apps)).
      type: list
      elements: dict
      returned: always
    gpu_process_bytes:
      description: GPU memory held by live compute processes.
      type: int
      returned: always
    explained_bytes:
      description: Used memory explained by processes, caches, kernel structures and GPU contexts.
      type: int
      returned: always
    unaccounted_bytes:
      description:
        - Used memory that nothing live explains. Many GiB on an idle GB10 means memory pinned by a
          container that was killed hard; reboot the node to get it back.
      type: int
      returned: always
    vllm_processes:
      description:
        - Live C(VLLM::EngineCore) and C(VLLM::Worker_*) processes; C(orphan) is true when their API server
          is gone (they still hold the weights).
      type: list
      elements: dict
      returned: always
    gpu_memory_utilization:
      description: The utilization the request was computed for.
      type: float
      returned: when O(gpu_memory_utilization) is set
    vllm_requested_bytes:
      description: What vLLM will request, C(ceil(cuda_total_bytes * gpu_memory_utilization)).
      type: int
      returned: when O(gpu_memory_utilization) is set
    cuda_total_bytes:
      description: What CUDA reports as the device's memory, which vLLM sizes its request from (on a GB10 119.67 GiB, not C(MemTotal)).
      type: int
      returned: when O(gpu_memory_utilization) is set
    needed_bytes:
      description: What must be available; here the request (the collection's plan adds what it keeps beside the pool).
      type: int
      returned: when O(gpu_memory_utilization) is set
    fits:
      description: True when C(MemAvailable) covers the request, so vLLM will start.
      type: bool
      returned: when O(gpu_memory_utilization) is set
    shortfall_bytes:
      description: How much C(MemAvailable) falls short of the request (0 when it fits).
      type: int
      returned: when O(gpu_memory_utilization) is set
    fits_after_drop_caches:
      description: True when free memory plus droppable caches would cover the request.
      type: bool
      returned: when O(gpu_memory_utilization) is set
    drop_caches:
      description:
        - True when the node does not fit now and would after dropping page caches, by the memory plan's own figures
          (module_utils/plan/memory_fit.py); the preflight role drops caches where this is true.
      type: bool
      returned: when O(gpu_memory_utilization) is set
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import run
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_probe
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.errors import ProbeError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            proc_root=dict(type="path", default="/proc"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            gpu_memory_utilization=dict(type="float"),
        ),
        supports_check_mode=True,
    )
    smi = module.params["nvidia_smi"]
    try:
        fact = node_probe.memory(lambda argv: run(module, argv), module.warn, module.params["proc_root"],
                                 smi if os.path.sep in smi else module.get_bin_path(smi), smi, module.params["gpu_memory_utilization"])
    except ProbeError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, unified_memory=fact)


if __name__ == "__main__":
    main()
