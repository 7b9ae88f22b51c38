#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_boot
short_description: Install, hold, release or remove the node's supervisor that brings the model back after a boot
version_added: 1.0.0
description:
  - A node that reboots, or a head whose vLLM dies when a worker reboots, comes back to serving with no operator
    action only if something on the node starts it again. C(vllm serve) is a process exec'd into the head's Ray
    container, so a Docker restart policy cannot; and a restart policy would start the containers before anything
    looked at the node's memory (pinned memory after a hard kill, fact 3).
  - This module installs the plan's supervisor (module_utils/plan/boot.py says what it does), that is its plan file, its unit
    (ordered after Docker), a copy of the collection's modules it runs, and starts it. The order and the waits are
    the plan's data (O(boot)); the module writes them and changes nothing else.
  - O(state=held) installs it held before a playbook changes the cluster (the hold first, so that a supervisor
    already running never acts on a plan not verified yet); held, it brings nothing back and serves the node's
    figures. O(state=present) installs it and releases it once the deployment is verified; the hold goes and the
    supervisor is woken to look at once, not restarted. O(state=absent) stops it and removes every file it wrote,
    and only those.
  - With O(record), O(state=present) is serve.yml's whole commit on the node in one call
    (module_utils/node/kept_image.py), that is the verified image kept under the record's C(kept_image) tag, this cluster's
    kept tags the record no longer lists let go of, and on the head the record (O(record_path)) and the canary's
    references (O(references_path)) written where they differ.
  - On a host without systemd, the unit's command is started detached instead. No node the collection serves on is
    one (DGX OS and the simulated nodes run systemd); the unit tests use that path on a controller without it.
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
  verified:
    description:
      - With O(state=present), this run launched or asked the vLLM that runs now, and its smoke tests and canary
        passed. The release names that process (its process group and start time) in the supervisor's
        C(verified.json), and the woken supervisor does not ask it its completion and canary again. Without it, the
        supervisor asks.
      - O(state=held) removes that file.
    type: bool
    default: false
  record:
    description:
      - The verified deployment's last-known-good record (the filter P(dgx_spark.vllm.last_known_good_record#filter)).
        Its C(kept_image) is the tag this node keeps the image under, its C(kept_images) the kept tags that stay.
      - With O(state=present) only.
    type: dict
  record_path:
    description:
      - Where this node keeps the record (C(plan.nodes[<node>].paths.last_known_good_file)), on the nodes of
        C(plan.cluster.records_on) (the head and the next node); omitted on the others.
    type: str
  cache_dir:
    description:
      - This node's folder of vLLM's compile caches (C(plan.nodes[<node>].paths.compile_cache_dir)), one per image and
        compile-relevant configuration. With O(record), the caches of an image no kept tag of this cluster names any more
        are removed with it, following no link. Omitted, none is removed.
    type: path
  references:
    description:
      - The canary's references as the controller keeps them (C(plan.cluster.reports.canary)), which the supervisor asks
        after a boot. With O(record) only.
    type: dict
  references_path:
    description:
      - Where this node keeps them (C(plan.nodes[<node>].paths.canary_file)), on the nodes of C(plan.cluster.records_on);
        omitted on the others.
    type: str
  image:
    description: The verified image (C(plan.cluster.image)), with O(record).
    type: str
  cluster:
    description: The deployment's name, which this cluster's kept tags carry (C(plan.cluster.name)), with O(record).
    type: str
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

- name: Release it, keep the verified image and record the deployment on the head
  dgx_spark.vllm.vllm_boot:
    boot: "{{ plan.nodes[inventory_hostname].boot }}"
    record: "{{ record }}"
    record_path: "{{ plan.nodes[inventory_hostname].paths.last_known_good_file if inventory_hostname in plan.cluster.records_on else omit }}"
    image: "{{ plan.cluster.image }}"
    cluster: "{{ plan.cluster.name }}"
"""

RETURN = r"""
removed:
  description:
    - What was in the supervisor's code folder beside its copied sources (a file or link an earlier release's
      containers could plant there), removed (or that would be).
  type: list
  elements: str
  returned: when the supervisor is installed
written:
  description: The supervisor's files written (or that would be).
  returned: always
  type: list
  elements: str
kept:
  description: With O(record), what the commit did (or would do) besides the supervisor, one line each.
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
firewall:
  description:
    - With O(state=probed) and the firewall on, the live table against the record of the one serve.yml loaded
      (module_utils/node/firewall_state.py) C(loaded), C(changed), C(missing) or C(unrecorded).
  returned: when O(state=probed) and the boot names a firewall
  type: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import firewall_state, kept_image
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import read_text, run
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.supervisor_control import Supervisor
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import boot


def main():
    module = AnsibleModule(
        argument_spec=dict(boot=dict(type="dict", required=True),
                           state=dict(type="str", default="present", choices=["present", "held", "absent", "probed"]),
                           holder=dict(type="str", default="a playbook"),
                           verified=dict(type="bool", default=False),
                           record=dict(type="dict"),
                           record_path=dict(type="str"),
                           references=dict(type="dict"),
                           references_path=dict(type="str"),
                           image=dict(type="str"),
                           cluster=dict(type="str"),
                           cache_dir=dict(type="path")),
        required_by={"record": ("image", "cluster")},
        supports_check_mode=True,
    )
    params = module.params
    sup = Supervisor(params["boot"], lambda argv: run(module, argv), module.fail_json)
    where, state = sup.where, params["state"]
    result = dict(changed=False, written=[], kept=[], running=sup.running())
    if state == "absent":
        present, lib = sup.installed()
        result["changed"] = bool(present) or lib
        if result["changed"] and not module.check_mode:
            sup.remove()
        result["running"] = False if not module.check_mode else result["running"]
    elif state in ("present", "held"):
        done = sup.install(params["holder"] if state == "held" else None, module.check_mode,
                           verified=params["verified"] and state == "present")
        result.update(changed=done["changed"], written=done["written"], removed=done.get("removed") or [])
        if module._diff:
            result["diff"] = done["diff"]
        if params["record"] and state == "present":
            record_files = {params[k + "_path"]: params[k] for k in ("record", "references") if params[k + "_path"] and params[k]}
            result["kept"], problem = kept_image.keep(params["record"], params["image"], params["cluster"],
                                                      lambda argv: run(module, argv), module.check_mode, record_files,
                                                      params["cache_dir"])
            result["changed"] = result["changed"] or bool(result["kept"])
            if problem:
                module.fail_json(msg=problem, **result)
        result["running"] = sup.running() if not module.check_mode else result["running"]
    status = sup.status()
    result["status"] = status or {}
    if state in ("present", "held"):
        config, at_boot = sup.plan["config"], bool(sup.plan.get("enabled"))
    else:  # what is installed on the node now
        try:
            config = json.loads(read_text(where["config"]) or "null")
        except ValueError:
            config = None
        at_boot = os.path.islink(where["wants"])
    result["next_boot"] = boot.next_boot(config, at_boot, status)
    if state == "probed" and sup.plan.get("firewall"):  # the live table, read: status.yml names a node that lost it
        result["firewall"] = firewall_state.state(lambda argv: run(module, argv), sup.plan["firewall"]["table"], sup.plan["firewall"]["record"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
