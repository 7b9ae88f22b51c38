#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_node_info
short_description: Read everything the planner needs from one node, in one call
version_added: 1.0.0
description:
  - One module call per node instead of one per fact, since a task costs a round trip to the node and a re-run on a
    healthy cluster should take seconds. It reads what the single-purpose probes read, with their code.
  - Unified memory (as M(dgx_spark.vllm.unified_memory_info)), RoCE ports and GIDs (as
    M(dgx_spark.vllm.roce_gid_info)), Docker's version and runtimes, the image's ID and, with O(read_image), its vLLM,
    flags and parsers (as M(dgx_spark.vllm.vllm_image_info)), every container (C(docker ps --all)) and the
    environment of O(containers), the listening TCP ports (C(ss)), vLLM's process group in O(serve_container), and
    the model's C(config.json) and weights size under O(models_dir).
  - The planner turns these into findings before anything changes (pinned memory, orphaned engines, foreign
    containers or ports, a hand-made container's environment) and into what changes per container.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.INFO_MODULE
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
options:
  proc_root:
    description: Root of the proc tree (the simulated cluster's is the real one).
    type: path
    default: /proc
  sysfs_root:
    description: Root of the sysfs tree; tests and the simulated cluster point it at a fake tree.
    type: path
    default: /sys
  nvidia_smi:
    description: The nvidia-smi to ask.
    type: str
    default: nvidia-smi
  gpu_memory_utilization:
    description: The plan's utilization; the memory fact then says whether vLLM fits.
    type: float
  memory_need:
    description:
      - What the memory plan keeps beside vLLM's pool (C(runtime_bytes)) and leaves to the OS (C(floor_bytes); none
        for no floor). With them, the memory fact's C(fits), C(fits_after_drop_caches) and C(drop_caches) are the plan's
        own verdict (module_utils/plan/memory_fit.py), so page caches are dropped where the plan would refuse the node for
        memory that dropping gives back.
    type: dict
  image:
    description: The cluster's image; its ID is read.
    type: str
  read_image:
    description: Also read the image's vLLM, flags and parsers (on the head), once per image ID.
    type: bool
    default: false
  image_cache_dir:
    description: Where the image's answer is kept per image ID.
    type: path
  gpus:
    description: C(--gpus) for the container that reads the image.
    type: str
  containers:
    description: Names of the collection's containers on this node whose environment is read back.
    type: list
    elements: str
    default: []
  serve_container:
    description: The container vLLM runs in on this node (the head's Ray container), if any.
    type: str
  serve_state_file:
    description: vLLM's state file inside O(serve_container).
    type: str
    default: /dgx-spark/run/vllm.json
  serve_state_file_host:
    description: The same file where this node holds it (the container's state folder); read here, no exec for it.
    type: path
  models_dir:
    description: The node's models folder; with O(model), the model's C(config.json) and weights are read.
    type: path
  model:
    description: The model's repository id or C(/models/...) path.
    type: str
  revision:
    description: The model's revision.
    type: str
  ray_container:
    description:
      - The head's Ray container; when given, Ray's nodes and GPUs are read there (RV(ray)), meanwhile the rest is read, so
        a run that changes nothing proves the join gate without a task of its own.
    type: str
  paths:
    description: Folders and small files of the plan to look for; RV(state) says which are there, and each file's sha256.
    type: list
    elements: path
    default: []
  records:
    description:
      - Small JSON files the collection keeps on the node (the head's last-known-good record); RV(records) gives each one
        parsed. The cluster keeps its own state, so a run needs nothing kept on the controller to know what serves.
    type: list
    elements: path
    default: []
  supervisor:
    description:
      - The node's supervisor (C(paths) with its C(status) and C(config) files, C(unit_name)); RV(supervisor_running) says
        whether it runs, so that a run that finds it stopped installs and starts it again.
    type: dict
  kept_reference:
    description: The reference filter of the cluster's kept image tags; RV(kept_images) lists the tags on this node.
    type: str
  door_image:
    description:
      - The front door's image (on the head); RV(door_image_id) says whether the node has it, so that the apply builds it
        only where it is missing and asks Docker nothing more.
    type: str
  firewall:
    description:
      - The cluster's firewall table on the node (C(table), in family C(inet)) and the record of the one serve.yml
        loaded (C(record)); RV(firewall) says whether the live table is still that one. Nothing else reads it.
    type: dict
  devices:
    description:
      - Host paths the containers get with C(--device) (a Spark's C(/dev/infiniband)); RV(devices) lists the device nodes
        under each. Docker passes an empty folder without a word, and NCCL then falls back to sockets on that node only.
    type: list
    elements: path
    default: []
  docker:
    description: The Docker CLI.
    type: str
    default: docker
  deployments:
    description:
      - Every deployment placed on this node, by name, each with the options above that are a deployment's (from
        O(gpu_memory_utilization) to O(disk), all but O(proc_root), O(sysfs_root), O(nvidia_smi) and O(docker)). The node
        is then read once for all of them, and RV(deployments) gives each one's facts, whole; without it the options
        above are one deployment's and its facts are returned at the top level.
      - The preflight role passes the inventory check's plan (its C(probes) of this node).
    type: dict
  resolve:
    description:
      - A name to resolve on the node (the head's C(ansible_host)); RV(resolved) lists its IPv4 addresses. The endpoint
        binds to that address unless C(vllm_bind_address) says otherwise, and only the node's own resolver knows it.
    type: str
  disk:
    description:
      - Folders the launch writes to (the cluster's state folder); RV(disk) gives the free space of each one's filesystem,
        and of Docker's data root, where Ray's session files and vLLM's compile caches grow inside the containers.
    type: list
    elements: path
    default: []
"""

EXAMPLES = r"""
- name: Read the node
  dgx_spark.vllm.spark_node_info:
    image: nvcr.io/nvidia/vllm:26.09-py3
    containers: [dgx-spark-ray-spark1]
  register: node

- name: Read the node once for both deployments placed on it
  dgx_spark.vllm.spark_node_info:
    deployments:
      chat: {image: dgx-spark-sim/runtime:sim, containers: [dgx-spark-chat-ray-spark1]}
      coder: {image: dgx-spark-sim/runtime:sim, containers: [dgx-spark-coder-ray-spark1]}
  register: node
"""

RETURN = r"""
deployments:
  description: With O(deployments), each deployment's facts by name, each as the keys below are without it.
  type: dict
  returned: with O(deployments)
memory:
  description:
    - The C(unified_memory) fact of M(dgx_spark.vllm.unified_memory_info).
    - Where nvidia-smi lists no compute process, C(cuda) adds CUDA's own C(free_bytes) and C(total_bytes), read through
      the node's driver (cuMemGetInfo, the call under vLLM's cudaMemGetInfo); null where the node has no CUDA driver;
      C(unanswered_seconds) (and C(earlier) when an earlier read still waits) where the driver gave no answer in time.
      Memory a killed container left pinned shows there, short of MemFree, when /proc/meminfo and nvidia-smi show none.
  type: dict
  returned: without O(deployments)
roce:
  description: C(roce_devices), C(nccl_ib_hca) and C(nccl_gid_index) as M(dgx_spark.vllm.roce_gid_info) returns them.
  type: dict
  returned: always
docker:
  description: Docker's C(version), C(runtimes) and C(root_dir) (its data root); null when no daemon answers.
  type: dict
  returned: always
image_id:
  description: The image's ID on this node; null when the node lacks it.
  type: str
  returned: always
image:
  description: The image's C(image_info) (M(dgx_spark.vllm.vllm_image_info)); null unless O(read_image) and the image is here.
  type: dict
  returned: always
docker_ps:
  description: C(docker ps --all --no-trunc --format '{{json .}}') lines.
  type: list
  elements: str
  returned: always
container_env:
  description: The environment each existing container of O(containers) was created with.
  type: dict
  returned: always
listening:
  description: C(ss -H -t -l -n) lines.
  type: list
  elements: str
  returned: always
vllm:
  description: C(running), C(config_hash) and C(pgid) of vLLM's process group in O(serve_container); null without one.
  type: dict
  returned: always
model_config:
  description: The model's C(config.json); null when the model is not here.
  type: dict
  returned: always
ray:
  description:
    - Ray's alive and dead nodes, their IPs and the GPU total (as M(dgx_spark.vllm.ray_cluster_info) returns them, without
      the judgement), or C(error) saying why Ray could not be read.
  type: dict
  returned: when O(ray_container) is given
weights_bytes:
  description: The size of the model's C(*.safetensors); null when the model is not here.
  type: int
  returned: always
state:
  description: For each of O(paths), C(dir), the file's sha256, or null when absent.
  type: dict
  returned: always
records:
  description: For each of O(records), the file's JSON, or null when absent or not JSON.
  type: dict
  returned: always
supervisor_running:
  description: Whether the supervisor of O(supervisor) runs; null without O(supervisor).
  type: bool
  returned: always
firewall:
  description:
    - The live table against the record of O(firewall) (module_utils/node/firewall_state.py) C(loaded), C(changed),
      C(missing) or C(unrecorded); null without O(firewall).
  type: str
  returned: always
door_image_id:
  description: The ID of O(door_image) on this node; null when it is not here, or without O(door_image) or Docker.
  type: str
  returned: always
kept_images:
  description: The image tags matching O(kept_reference) on this node (C(repository:tag)); null without it or without Docker.
  type: list
  elements: str
  returned: always
devices:
  description: For each of O(devices), the names of the character devices there (a device path gives its own name), or
    null when absent.
  type: dict
  returned: always
  sample: {"/dev/infiniband": ["rdma_cm", "uverbs0", "uverbs1", "uverbs2", "uverbs3"]}
interfaces:
  description: The node's interfaces with their IPv4 addresses and prefixes (C(ip -j -4 addr show)); null when C(ip) could not tell.
  type: dict
  returned: always
  sample: {"enP7s7": ["10.0.0.11/24"], "enp1s0f0np0": ["192.168.10.1/24"], "lo": ["127.0.0.1/8"]}
connection_interface:
  description:
    - The interface the Ansible connection arrived on (the address in C(SSH_CONNECTION), read from the SSH session's
      shell when sudo dropped it from the module's environment); null for a local connection. A ring link there would
      cut the operator off the node.
  type: str
  returned: always
addresses:
  description: The node's IPv4 addresses (C(ip -j -4 addr show)); null when C(ip) could not tell.
  type: list
  elements: str
  returned: always
disk:
  description: For each of O(disk) and Docker's data root, C(at) (the nearest existing folder) and C(free_bytes) there.
  type: dict
  returned: always
  sample: {"/var/lib/dgx-spark-vllm/dgx-spark": {"at": "/var/lib/dgx-spark-vllm", "free_bytes": 812345344}}
resolved:
  description: The IPv4 addresses O(resolve) resolves to on the node, in the resolver's order; null without O(resolve).
  type: list
  elements: str
  returned: always
system_nccl:
  description:
    - The node's system NCCL (DGX OS's C(libnccl2)), read without loading it; null where the node has none. C(file) is
      the library the link resolves to, C(build_id) its GNU build ID, which tells two builds of one version apart.
  type: dict
  returned: always
  sample: {"path": "/usr/lib/aarch64-linux-gnu/libnccl.so.2", "file": "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9",
           "version": "2.28.9", "build": "+cuda13.0", "build_id": "fbefce04199ecbd92995b01de72af21ccdc01787"}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import command
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import run
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_read
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.errors import ProbeError
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.image_info import ImageInfoError

DEPLOYMENT_OPTIONS = dict(
    gpu_memory_utilization=dict(type="float"),
    memory_need=dict(type="dict"),
    image=dict(type="str"),
    read_image=dict(type="bool", default=False),
    image_cache_dir=dict(type="path"),
    gpus=dict(type="str"),
    containers=dict(type="list", elements="str", default=[]),
    serve_container=dict(type="str"),
    serve_state_file=dict(type="str", default=node_read.SERVE_STATE_FILE),
    serve_state_file_host=dict(type="path"),
    models_dir=dict(type="path"),
    model=dict(type="str"),
    revision=dict(type="str"),
    paths=dict(type="list", elements="path", default=[]),
    records=dict(type="list", elements="path", default=[]),
    supervisor=dict(type="dict"),
    kept_reference=dict(type="str"),
    door_image=dict(type="str"),
    firewall=dict(type="dict"),
    devices=dict(type="list", elements="path", default=[]),
    ray_container=dict(type="str"),
    resolve=dict(type="str"),
    disk=dict(type="list", elements="path", default=[]),
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            proc_root=dict(type="path", default="/proc"),
            sysfs_root=dict(type="path", default="/sys"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            docker=dict(type="str", default="docker"),
            deployments=dict(type="dict"),
            **DEPLOYMENT_OPTIONS
        ),
        supports_check_mode=True,
    )
    p = module.params
    smi = p["nvidia_smi"]
    node = {"proc_root": p["proc_root"], "sysfs_root": p["sysfs_root"], "nvidia_smi": smi, "docker": p["docker"],
            "smi_path": smi if os.path.sep in smi else module.get_bin_path(smi)}
    if p["deployments"] is not None:
        specs = {name: dict({k: v.get("default") for k, v in DEPLOYMENT_OPTIONS.items()}, **(spec or {}))
                 for name, spec in p["deployments"].items()}
    else:
        specs = {"": {k: p[k] for k in DEPLOYMENT_OPTIONS}}
    try:
        answers = node_read.read(specs, node, lambda argv: run(module, argv), module.warn, module.check_mode,
                                 command.ssh_session())
    except (ProbeError, ImageInfoError) as exc:
        module.fail_json(msg=str(exc))
    if p["deployments"] is not None:
        module.exit_json(changed=False, deployments=answers)
    module.exit_json(changed=False, **answers[""])


if __name__ == "__main__":
    main()
