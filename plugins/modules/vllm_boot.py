#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_boot
short_description: Install, hold, release or remove the node's supervisor that brings the model back after a boot
version_added: 0.2.0
description:
  - A node that reboots, or a head whose vLLM dies when a worker reboots, comes back to serving with no operator
    action only if something on the node starts it again. C(vllm serve) is a process exec'd into the head's Ray
    container, so a Docker restart policy cannot; and a restart policy would start the containers before anything
    looked at the node's memory (pinned memory after a hard kill, fact 3).
  - This module installs the plan's supervisor (module_utils/plan/boot.py says what it does), that is its plan file, its unit
    (ordered after Docker), a copy of the collection's modules it runs, and starts it. The order and the waits are
    the plan's data (O(boot)); the module writes them and changes nothing else.
  - O(state=held) makes the supervisor keep its hands off while a playbook changes the cluster; O(state=present)
    releases it. O(state=absent) stops it and removes every file it wrote, and only those.
  - On a node without systemd (the simulated cluster), the unit's command is started detached instead, and its
    C(multi-user.target.wants) link is what the node's init reads at boot.
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
  boot:
    description: The plan's C(boot) section of this node (C(plan.nodes[<node>].boot)).
    type: dict
    required: true
  state:
    description:
      - C(present) installs and releases it (and starts it when C(boot.enabled)); C(held) holds it; C(absent) removes
        it; C(probed) changes nothing and reports.
    type: str
    default: present
    choices: [present, held, absent, probed]
  holder:
    description: Who holds the supervisor (shown by status.yml), with O(state=held).
    type: str
    default: a playbook
"""

EXAMPLES = r"""
- name: Hold the supervisor while the cluster changes
  dgx_spark.vllm.vllm_boot:
    boot: "{{ plan.nodes[inventory_hostname].boot }}"
    state: held
    holder: serve.yml

- name: Install it, start it and release it
  dgx_spark.vllm.vllm_boot:
    boot: "{{ plan.nodes[inventory_hostname].boot }}"
"""

RETURN = r"""
written:
  description: The files written (or that would be).
  returned: always
  type: list
  elements: str
running:
  description: Whether the supervisor runs after the module.
  returned: always
  type: bool
status:
  description: The supervisor's status file (state, detail, since, events), when there is one.
  returned: always
  type: dict
next_boot:
  description: What the node does at its next boot.
  returned: always
  type: dict
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import read_text

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import supervisor
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import run
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.supervisor_control import Supervisor
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import boot


def main():
    module = AnsibleModule(
        argument_spec=dict(boot=dict(type="dict", required=True),
                           state=dict(type="str", default="present", choices=["present", "held", "absent", "probed"]),
                           holder=dict(type="str", default="a playbook")),
        supports_check_mode=True,
    )
    sup = Supervisor(module.params["boot"], lambda argv: run(module, argv), module.fail_json)
    where, state, enabled = sup.where, module.params["state"], bool(sup.plan.get("enabled"))
    linked = os.path.islink(where["wants"])
    held = os.path.exists(where["hold"])
    result = dict(changed=False, written=[], running=sup.running())
    if state == "held":
        result["changed"] = not held and os.path.exists(where["config"])  # nothing installed: nothing to hold
        if result["changed"] and not module.check_mode:
            supervisor.write_text(where["hold"], "%s since %s\n" % (module.params["holder"], time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())), 0o644)
    elif state == "absent":
        present, lib = sup.installed()
        result["changed"] = bool(present) or lib
        if result["changed"] and not module.check_mode:
            sup.remove()
        result["running"] = False if not module.check_mode else result["running"]
    elif state == "present":
        files = boot.files(sup.plan)  # boot imports every module it copies, so AnsiballZ carries them all
        stale = [(path, content, mode) for path, content, mode in files if read_text(path) != content]
        code_changed = any(path.endswith(".py") for path, dummy, dummy2 in stale)
        relink = enabled != linked
        result["written"] = [path for path, dummy, dummy2 in stale]
        start = enabled and (not result["running"] or code_changed or held)
        result["changed"] = bool(stale) or relink or held or start or (not enabled and result["running"])
        before = read_text(where["config"])
        if module._diff:
            result["diff"] = dict(before=dict(plan=before, at_boot=linked, held=held),
                                  after=dict(plan=files[0][1], at_boot=enabled, held=False))
        if result["changed"] and not module.check_mode:
            for path, content, mode in stale:
                supervisor.write_text(path, content, mode)
            if relink and enabled:
                os.makedirs(os.path.dirname(where["wants"]), exist_ok=True)
                os.symlink(where["unit"], where["wants"])
            elif relink:
                os.remove(where["wants"])
            if held:
                os.remove(where["hold"])
            if not enabled:
                sup.stop()
                if os.path.exists(where["status"]):  # its last look is history now; status.yml must not show it as current
                    supervisor.write_status(where["status"], {"state": "off", "detail": "vllm_boot_start is false",
                                                              "events": (sup.status() or {}).get("events") or []})
            elif start:
                sup.start(restart=result["running"])
            result["running"] = sup.running()
    status = sup.status()
    result["status"] = status or {}
    if state == "present":
        config, at_boot = sup.plan["config"], enabled
    else:  # what is installed on the node now
        try:
            config = json.loads(read_text(where["config"]) or "null")
        except ValueError:
            config = None
        at_boot = os.path.islink(where["wants"])
    result["next_boot"] = boot.next_boot(config, at_boot, status)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
