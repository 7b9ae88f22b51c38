#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_files
short_description: Make the plan's folders and write its files on a node, in one call
version_added: 1.0.0
description:
  - The plan says which folders and files a node needs (the state folders, the launcher, the baseline of memory before
    a launch, Prometheus's configuration). Made with one C(file) or C(copy) task per entry, each costs a round trip
    to the node, and a launch waits for them; this module makes them all in one call.
  - A folder is made where it is missing and given its mode (and owner) where they differ. A file is written whole
    (a reader never sees half of it) where its content, mode or owner differ. Nothing else is touched.
  - A file the plan no longer wants where it was (the head's API key where a release before kept it) is named in
    O(absent) and removed in the same call; a link there is removed as a link, never followed.
  - A secret (the head's API key) goes in O(secret_files), never in O(files); its content is never logged, returned
    or shown in a diff (only its path is). O(files) are shown in diff mode.
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
options:
  folders:
    description:
      - The folders to make.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The folder.
        type: path
        required: true
      mode:
        description: Its mode, as octal text.
        type: str
        required: true
      owner:
        description: Its owner, a user name or number; left as it is when omitted.
        type: str
  files:
    description:
      - The files to write. Shown in diff mode.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      content:
        description: Its whole text.
        type: str
        required: true
      mode:
        description: Its mode, as octal text.
        type: str
        required: true
      owner:
        description: Its owner, a user name or number; left to the writer when omitted.
        type: str
  secret_files:
    description:
      - Files as in O(files) whose content is a secret (the head's API key), written the same way; their content is
        never logged, returned or shown in a diff, their path is.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      content:
        description: Its whole text, a secret.
        type: str
        required: true
      mode:
        description: Its mode, as octal text.
        type: str
        required: true
      owner:
        description: Its owner, a user name or number; left to the writer when omitted.
        type: str
  absent:
    description:
      - Files to remove where they are (a link as the link). A folder is refused.
    type: list
    elements: path
    default: []
  exclusive:
    description:
      - Folders that hold only what O(files) and O(secret_files) write there (Prometheus's keys, one per deployment).
        Anything else in them is removed as O(absent) is, in the same call. A folder inside one is refused before
        anything is written.
    type: list
    elements: path
    default: []
"""

EXAMPLES = r"""
- name: Make the node's state folders and files
  dgx_spark.vllm.node_files:
    folders: "{{ plan.nodes[inventory_hostname].writes.folders }}"
    files: "{{ plan.nodes[inventory_hostname].writes.files }}"
"""

RETURN = r"""
made:
  description: The folders made or given their mode or owner (or that would be).
  returned: always
  type: list
  elements: str
written:
  description: The files written (or that would be).
  returned: always
  type: list
  elements: str
removed:
  description: The files of O(absent), and what O(exclusive) folders held beside the plan's, removed (or that would be).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import files as node_files


def main():
    folder = dict(path=dict(type="path", required=True), mode=dict(type="str", required=True), owner=dict(type="str"))
    text = dict(folder, content=dict(type="str", required=True))
    secret = dict(folder, content=dict(type="str", required=True, no_log=True))
    module = AnsibleModule(argument_spec=dict(folders=dict(type="list", elements="dict", default=[], options=folder),
                                              files=dict(type="list", elements="dict", default=[], options=text),
                                              # its content alone is a secret (no_log on that suboption)
                                              secret_files=dict(type="list", elements="dict", default=[], options=secret, no_log=False),
                                              absent=dict(type="list", elements="path", default=[]),
                                              exclusive=dict(type="list", elements="path", default=[])),
                           supports_check_mode=True)
    params = module.params
    try:
        strays = node_files.strays(params["exclusive"], set(f["path"] for f in params["files"] + params["secret_files"]))
        node_files.remove(params["absent"] + strays, check=True)  # a folder there is refused before anything is written
        made, written, before = node_files.apply(params["folders"], params["files"] + params["secret_files"], module.check_mode)
        removed = node_files.remove(params["absent"] + strays, module.check_mode)
    except (OSError, KeyError, ValueError) as exc:
        module.fail_json(msg="Could not make the node's folders and files: %s" % exc)
    result = dict(changed=bool(made or written or removed), made=made, written=written, removed=removed)
    contents = {f["path"]: f["content"] for f in params["files"]}
    shown = [p for p in written if p in contents]
    if module._diff and shown:
        result["diff"] = [dict(before=before[p], after=contents[p], before_header=p, after_header=p) for p in shown]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
