#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_image_info
short_description: Read what a vLLM image offers, the vLLM and Ray versions, its serve flags and parsers
version_added: 1.0.0
description:
  - Runs the image once (C(docker run --rm --network none)) and builds vLLM's own argument parser to list every
    option string C(vllm serve) accepts with its choices, and the reasoning and tool-call parsers it registers.
  - Flags move between vLLM releases; the planner drops or refuses flags the image lacks, naming each.
  - With O(cache_dir), the answer is kept per image ID, so an unchanged image is read once (importing vLLM
    takes several seconds).
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.INFO_MODULE
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
options:
  image:
    description: The image, by name or ID.
    type: str
    required: true
  docker:
    description: Docker CLI.
    type: str
    default: docker
  gpus:
    description: Value of C(--gpus) for the probe container (C(all) on a DGX Spark); none when omitted.
    type: str
  cache_dir:
    description: Folder keeping one answer per image ID. Not written in check mode.
    type: path
"""

EXAMPLES = r"""
- name: Read the image's vLLM
  dgx_spark.vllm.vllm_image_info:
    image: nvcr.io/nvidia/vllm:26.09-py3
    gpus: all
    cache_dir: /var/lib/dgx-spark-vllm/image-info
  register: image

- name: Show its version
  ansible.builtin.debug:
    msg: "vLLM {{ image.image_info.version }}, Ray {{ image.image_info.ray_version | default('missing', true) }}"
"""

RETURN = r"""
image_info:
  description: What the image offers.
  returned: success
  type: dict
  contains:
    image:
      description: The image as given.
      type: str
    id:
      description: Image ID.
      type: str
    version:
      description: vLLM version (C(vllm.__version__)).
      type: str
      sample: 0.32.0
    ray_version:
      description: Ray version, null when the image has no Ray (NGC vLLM images from 26.05).
      type: str
    options:
      description: Every option string of C(vllm serve), mapped to its choices (null when free).
      type: dict
    reasoning_parsers:
      description: Registered reasoning parser names.
      type: list
      elements: str
    tool_parsers:
      description: Registered tool-call parser names.
      type: list
      elements: str
    nccl:
      description:
        - The NCCL the image's torch loads (C(loaded)), else the pip wheel's a CUDA torch would load; its C(path),
          C(version), C(build_id). Null when the image carries none (vLLM's CPU build).
      type: dict
      sample: {"path": "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2", "version": "2.28.9",
               "build": "+cuda13.0", "build_id": "7afb65ac8ed8030904bcb5811c04553294308fc6", "loaded": true}
    cached:
      description: True when the answer came from O(cache_dir).
      type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import run
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_probe
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.image_info import ImageInfoError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            docker=dict(type="str", default="docker"),
            gpus=dict(type="str"),
            cache_dir=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    image, docker = module.params["image"], module.params["docker"]

    def runner(argv):
        return run(module, argv)

    the_id = node_probe.image_id(runner, image, docker)
    if the_id is None:
        module.fail_json(msg="image %s is not on this node; build or load it first (the image role does)" % image)
    try:
        info = node_probe.image(runner, image, the_id, docker, module.params["gpus"], module.params["cache_dir"],
                                write_cache=not module.check_mode)
    except ImageInfoError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, image_info=info)


if __name__ == "__main__":
    main()
