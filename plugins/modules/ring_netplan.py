#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: ring_netplan
short_description: Try a switchless ring's netplan with a rollback armed, then confirm it or roll it back
version_added: 1.0.0
description:
  - C(netplan try) made non-interactive (see C(module_utils/node/netplan_try.py) for why the steps are split).
  - O(state=tried) validates O(content) with netplan's own generator (C(netplan generate --root-dir)), keeps the
    previous file, arms a rollback that fires after O(rollback_after) seconds unless confirmed (a detached process that
    outlives the SSH session), writes the file and applies it. When the apply itself fails, it rolls back at once.
  - O(state=confirmed) disarms the rollback and keeps the file. O(state=rolled_back) puts the previous file back now,
    flushes the tried addresses and applies again.
  - A node that runs O(content) already, with nothing pending, is not touched. Check mode shows the diff.
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
  path:
    description: The netplan file of the ring (under C(/etc/netplan)).
    type: path
    required: true
  content:
    description: The netplan the plan rendered for this node (required for O(state=tried)).
    type: str
  state:
    description: What to do.
    type: str
    choices: [tried, confirmed, rolled_back]
    default: tried
  interfaces:
    description: The ring ports; a rollback flushes their tried addresses.
    type: list
    elements: str
    default: []
  pending_dir:
    description: The folder of the pending try (in the node's state folder); the rollback script is written beside it.
    type: path
    required: true
  rollback_after:
    description: Seconds after which a try not confirmed is rolled back.
    type: int
    default: 120
  apply_command:
    description: The command that applies netplan (run by C(sh -c)).
    type: str
    default: netplan apply
  generate_command:
    description: netplan's generator, given C(--root-dir) to validate the file alone.
    type: list
    elements: str
    default: [netplan, generate]
"""

EXAMPLES = r"""
- name: Try the ring's netplan with a rollback armed
  dgx_spark.vllm.ring_netplan:
    path: /etc/netplan/60-dgx-spark-ring.yaml
    content: "{{ node.ring.netplan.content }}"
    interfaces: [enp1s0f0np0, enp1s0f1np1]
    pending_dir: /var/lib/dgx-spark-vllm/dgx-spark/run/ring-try
  become: true
"""

RETURN = r"""
pending:
  description: Whether a try is pending (armed, not yet confirmed or rolled back) when the module returns.
  type: bool
  returned: always
"""

import os
import shutil
import signal
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import read_text

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import netplan_try


def write(path, content, mode=0o600):
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(content)
    os.chmod(path + ".tmp", mode)
    os.replace(path + ".tmp", path)


def disarm(folder, script):
    """Kill the armed timer of ``folder`` (only a process whose command line is that timer's)."""
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            with open("/proc/%s/cmdline" % pid, encoding="utf-8", errors="replace") as handle:
                if netplan_try.is_our_timer(handle.read(), script, folder):
                    os.killpg(int(pid), signal.SIGTERM)
        except (OSError, ProcessLookupError):
            continue


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            content=dict(type="str"),
            state=dict(type="str", choices=["tried", "confirmed", "rolled_back"], default="tried"),
            interfaces=dict(type="list", elements="str", default=[]),
            pending_dir=dict(type="path", required=True),
            rollback_after=dict(type="int", default=120),
            apply_command=dict(type="str", default="netplan apply"),
            generate_command=dict(type="list", elements="str", default=["netplan", "generate"]),
        ),
        required_if=[("state", "tried", ["content"])],
        supports_check_mode=True,
    )
    p = module.params
    folder, path = p["pending_dir"], p["path"]
    script = os.path.join(os.path.dirname(folder), "ring-rollback")
    pending = os.path.exists(os.path.join(folder, "pending"))
    if p["state"] == "confirmed" or p["state"] == "rolled_back":
        if not pending or module.check_mode:
            module.exit_json(changed=pending, pending=pending)
        disarm(folder, script)
        if p["state"] == "rolled_back":
            rc, out, err = module.run_command(["sh", script, folder, "0"])
            if rc != 0:
                module.fail_json(msg="the rollback of %s ran, but applying the previous netplan failed: %s" % (path, (err or out).strip()))
        else:
            for name in ("pending", "backup"):
                if os.path.exists(os.path.join(folder, name)):
                    os.unlink(os.path.join(folder, name))
        module.exit_json(changed=True, pending=False)
    current = read_text(path)
    if netplan_try.decide(current, p["content"], pending) == "none":
        module.exit_json(changed=False, pending=False)
    diff = {"before": current or "", "after": p["content"], "before_header": path, "after_header": path}
    generate = [module.get_bin_path(p["generate_command"][0], required=True)] + list(p["generate_command"][1:])
    root = tempfile.mkdtemp(prefix="ring-netplan-")
    try:
        os.makedirs(os.path.join(root, "etc", "netplan"))
        write(os.path.join(root, "etc", "netplan", os.path.basename(path)), p["content"])
        rc, out, err = module.run_command(generate + ["--root-dir", root])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if rc != 0:
        module.fail_json(msg="netplan's generator refused the ring's netplan for %s: %s" % (path, (err or out).strip()), diff=diff)
    if module.check_mode:
        module.exit_json(changed=True, pending=False, diff=diff)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if pending:
        disarm(folder, script)  # one timer per try
    write(script, netplan_try.ROLLBACK_SCRIPT, 0o755)
    previous = read_text(os.path.join(folder, "backup")) if pending else current  # a try left pending keeps its first backup
    for name, content in netplan_try.pending_files(folder, path, previous, p["interfaces"], p["apply_command"]).items():
        write(name, content)
    write(os.path.join(folder, "pending"), "armed\n")
    rc, out, err = module.run_command(netplan_try.detached(netplan_try.timer_argv(script, folder, p["rollback_after"])))
    if rc != 0:
        os.unlink(os.path.join(folder, "pending"))
        module.fail_json(msg="could not arm the rollback of %s (nothing was applied): %s" % (path, (err or out).strip()))
    write(path, p["content"])
    rc, out, err = module.run_command(["sh", "-c", p["apply_command"]])
    if rc != 0:
        disarm(folder, script)
        module.run_command(["sh", script, folder, "0"])
        module.fail_json(msg="applying the ring's netplan on this node failed, so it was rolled back: %s" % (err or out).strip(), diff=diff)
    module.exit_json(changed=True, pending=True, diff=diff)


if __name__ == "__main__":
    main()
