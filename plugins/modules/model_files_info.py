#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: model_files_info
short_description: Say whether a model is complete on a node, and what is missing
version_added: 1.0.0
description:
  - Finds the model under O(models_dir) (the Hugging Face cache layout C(huggingface/hub/models--<org>--<name>) for a
    repository id, C(<models_dir>/<folder>) for a path C(/models/<folder>)) and checks the copy, B(before) vLLM
    loads it for twenty minutes and crashes on a truncated shard.
  - Complete means C(config.json), a tokenizer, every shard the safetensors index names, and every file of the
    manifest (the listing the hub gave when the head fetched the model) at its size; with O(verify_checksums),
    at its sha256 too.
  - Also returns the free space of the file system that holds O(models_dir), so a copy can be refused before it
    starts.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.INFO_MODULE
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
options:
  models_dir:
    description: The node's models folder (mounted at C(/models) in the containers).
    type: path
    required: true
  model:
    description: A Hugging Face repository id (C(org/name)) or a path C(/models/<folder>).
    type: str
    required: true
  revision:
    description: Branch, tag or commit of a repository; default C(main). Ignored when O(manifest) names a commit.
    type: str
  manifest:
    description:
      - The listing a complete copy must match (the head's, for a worker). Default, the manifest kept on this node.
    type: dict
  verify_checksums:
    description: Compare the sha256 of every LFS file with the manifest (reads every byte; slow for 100 GB).
    type: bool
    default: false
  copy_from:
    description:
      - On a worker, where its copy comes from, so that RV(model.pull) says what to pull. C(url) is the head's rsync
        module of its cache folder, C(password_file) the 0600 file of the copy's one-time secret on this node, C(sources)
        the head's RV(model.sources), and C(each_min_bytes) the size from which a file is pulled on its own (its bytes
        shown while it comes).
    type: dict
"""

EXAMPLES = r"""
- name: Is the model complete on every node?
  dgx_spark.vllm.model_files_info:
    models_dir: /var/lib/dgx-spark-vllm/models
    model: saricles/MiniMax-M2.7-NVFP4-GB10-AC
  register: model_files

- name: Stop when it is not
  ansible.builtin.assert:
    that: model_files.model.complete
    fail_msg: "{{ model_files.model.message }}"
"""

RETURN = r"""
model:
  description: Where the model is on this node and what a complete copy still lacks.
  returned: always
  type: dict
  contains:
    kind:
      description: C(hub) (repository in the cache layout) or C(path).
      type: str
    root:
      description: The folder a copy transfers (the repository's cache folder, or the path model's folder).
      type: str
    snapshot:
      description: The folder vLLM reads; null when the revision is not on the node.
      type: str
    commit:
      description: The commit the revision resolves to on this node (or the manifest's).
      type: str
    complete:
      description: True when nothing is missing, no size or checksum differs and the repository is consistent.
      type: bool
    missing:
      description: Files a complete copy has and this one lacks.
      type: list
      elements: str
    wrong_size:
      description: Files whose size differs from the manifest (a truncated shard), with both sizes.
      type: list
      elements: dict
    corrupt:
      description: Files whose sha256 differs from the manifest (only with O(verify_checksums)).
      type: list
      elements: str
    broken:
      description: What no copy can fix, such as an index naming a shard the repository does not have.
      type: list
      elements: str
    bytes_expected:
      description: Bytes of a complete copy (from the manifest; 0 without one).
      type: int
    bytes_present:
      description: Bytes of it already here.
      type: int
    free_bytes:
      description: Free space of the file system holding O(models_dir) (or its nearest existing parent).
      type: int
    pull:
      description:
        - With O(copy_from), what to pull (not C(copy), which Jinja reads as the dict's method). C(pulls) are the large
          files this node lacks, each with C(path), C(bytes), C(dest) and the rsync C(argv) that appends to it.
          C(oversized) are the files larger than the head's, removed first. C(rest_argv) is the rsync that brings the rest.
      type: dict
    manifest:
      description: The manifest used (O(manifest), the one kept on this node, or null).
      type: dict
    message:
      description: One line saying what is wrong, or C(complete).
      type: str
    sources:
      description: For every file present, its real path relative to RV(model.root) (C(blobs/<id>) in the cache).
      type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import read_text
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import model_files as mf


def free_bytes(path):
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    st = os.statvfs(path or "/")
    return st.f_bavail * st.f_frsize


def read_json(path):
    text = read_text(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            models_dir=dict(type="path", required=True),
            model=dict(type="str", required=True),
            revision=dict(type="str"),
            manifest=dict(type="dict"),
            verify_checksums=dict(type="bool", default=False),
            copy_from=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    manifest = params["manifest"]
    try:
        revision = (manifest or {}).get("commit") or params["revision"]
        where = mf.locate(params["models_dir"], params["model"], revision)
        if manifest is None:
            key = mf.manifest_key(params["model"], where["commit"])
            manifest = read_json(os.path.join(params["models_dir"], mf.MANIFESTS, key + ".json"))
        snapshot = where["snapshot"]
        present = mf.walk(snapshot) if snapshot and os.path.isdir(snapshot) else {}
        index_text = read_text(os.path.join(snapshot, mf.INDEX)) if snapshot else None
        checksums = None
        if params["verify_checksums"] and manifest:
            checksums = {p: mf.sha256_of(os.path.join(snapshot, p)) for p, meta in manifest.get("files", {}).items()
                         if meta.get("sha256") and present.get(p) == meta.get("size")}
        result = mf.check(present, manifest, index_text, checksums)
    except (mf.ModelError, OSError) as exc:
        module.fail_json(msg=str(exc))
    if not present:
        result["complete"] = False
        result["message"] = "not on this node (%s)" % (snapshot or where["root"])
    else:
        result["message"] = mf.describe(result)
    result.update(where)
    # Where each file really is under root (the cache's snapshots link into blobs/): what a copy transfers.
    result["sources"] = {p: os.path.relpath(os.path.realpath(os.path.join(snapshot, p)), os.path.realpath(where["root"]))
                         for p, size in present.items() if size is not None}
    result["free_bytes"] = free_bytes(params["models_dir"])
    result["manifest"] = manifest
    given = params["copy_from"]
    if given:  # what this worker pulls from the head to complete its copy (model_files.copy_plan)
        result["pull"] = mf.copy_plan(result, where["root"], given["sources"], given["url"], given["password_file"],
                                      given.get("each_min_bytes") or 0)
    module.exit_json(changed=False, model=result)


if __name__ == "__main__":
    main()
