#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_firewall
short_description: Apply the plan's firewall on a node, in one call
version_added: 1.0.0
description:
  - Ray's ports answer any host that reaches them, Ray runs whatever a client sends, and vLLM's ranks open ports of
    their own choosing; the collection refuses every host but the cluster's nodes, except on SSH, the front door and
    the inventory's allow list, with an nftables table of its own (module_utils/plan/firewall.py says why a firewall
    and not the programs' options).
  - Writes the table's ruleset and its boot unit where they differ from the plan's, enables the unit at boot (the link
    C(systemctl enable) makes, so that the table is loaded before Docker starts the containers again), and loads the
    table when any of it changed. Loading it twice leaves one copy (the ruleset recreates the table atomically).
  - node_teardown takes it back.
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
  firewall:
    description:
      - The plan's firewall of this node (C(plan.nodes[<node>].firewall)), its C(files) (the ruleset, then the unit) and
        C(wants) (the boot link), C(table) and C(record) (where the loaded table's listing is recorded).
    type: dict
    required: true
  reload:
    description:
      - Load the table even when no file changed (the probe found the live table missing, changed or unrecorded, as
        module_utils/node/firewall_state.py says). After every load, the table's listing is recorded for the next probe.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Let other hosts than the cluster's nodes reach only SSH and the front door
  dgx_spark.vllm.node_firewall:
    firewall: "{{ plan.nodes[inventory_hostname].firewall }}"
  become: true
"""

RETURN = r"""
written:
  description: The files written (or that would be).
  returned: always
  type: list
  elements: str
linked:
  description: Whether the boot link was made (or would be).
  returned: always
  type: bool
loaded:
  description: Whether the table was loaded (or would be).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import firewall
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import read_text, run


def main():
    module = AnsibleModule(argument_spec=dict(firewall=dict(type="dict", required=True), reload=dict(type="bool", default=False)),
                           supports_check_mode=True)
    planned = module.params["firewall"]
    before = read_text(planned["files"][0]["path"])
    written, linked, loaded, problem = firewall.apply(planned, lambda argv: run(module, argv), module.check_mode, module.params["reload"])
    result = dict(changed=bool(written or linked or loaded), written=written, linked=linked, loaded=loaded)
    if module._diff and result["changed"]:
        result["diff"] = dict(before=before or "", after=planned["files"][0]["content"], before_header=planned["files"][0]["path"],
                              after_header=planned["files"][0]["path"])
    if problem:
        module.fail_json(msg=problem, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
