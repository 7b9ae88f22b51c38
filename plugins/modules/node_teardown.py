#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_teardown
short_description: Take one node of a cluster back, in one call, touching only what the collection made there
version_added: 1.0.0
description:
  - Finds the containers of O(cluster) on O(node) that carry the collection's C(managed) label; nothing else is touched,
    whatever its name.
  - Stops vLLM in O(serve_container) by its process group (TERM, then KILL after O(stop_timeout)); killing only the API
    server would leave the engine and its workers holding the weights, on a GB10 until they die (fact 3).
  - Stops every container with one C(docker stop) (Ray stops on SIGTERM in a second or two; the plan turns off its
    drain, made for Ray Serve), keeps each container's log in O(logs_dir) beside vLLM's (fact 16), then removes the
    containers and vLLM's state file.
  - Compares the node's C(MemAvailable) with the baseline written before the launch, waiting up to O(memory_wait)
    seconds while the kernel takes back what was freed, and says whether the node needs a reboot (RV(memory)).
  - First removes the node's supervisor (O(boot)), so that it starts nothing again, and last the cluster's firewall
    (O(firewall), its nftables table, only that one, and its boot unit, link and ruleset).
  - One module call instead of a task per step, since each task costs a round trip to the node; its action plugin then
    copies every log to the controller (O(logs_dest)) over the same connection.
  - Needs root (C(become)) for the supervisor and the firewall.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  cluster:
    description: The cluster's name (the C(dgx_spark.vllm.cluster) label).
    type: str
    required: true
  node:
    description: This node's inventory name (the C(dgx_spark.vllm.node) label).
    type: str
    required: true
  serve_container:
    description: The container vLLM runs in on this node (the head's Ray container), if any.
    type: str
  serve_state_file:
    description: vLLM's state file inside O(serve_container) (its process group).
    type: str
    default: /dgx-spark/run/vllm.json
  vllm_state_file:
    description: The same state file as the node sees it, removed once the container is gone.
    type: path
  logs_dir:
    description:
      - The node's log folder, out of every container's reach; each container's log is written there, and the logs
        in O(container_logs_dir) are copied there.
    type: path
    required: true
  container_logs_dir:
    description:
      - The log folder the containers write (vLLM's log, the fetch's). Its regular files are copied to O(logs_dir),
        never read through a link.
    type: path
  baseline_file:
    description: The node's memory before the launch (JSON with C(mem_available_bytes)), written by the plan.
    type: path
  proc_root:
    description: Root of the proc tree.
    type: path
    default: /proc
  nvidia_smi:
    description: The nvidia-smi to ask.
    type: str
    default: nvidia-smi
  memory_tolerance_gib:
    description: GiB a node may miss against its baseline before it is named for a reboot.
    type: float
    default: 4
  memory_wait:
    description: Seconds to wait for the memory to come back before judging.
    type: int
    default: 10
  stop_timeout:
    description: Seconds vLLM and each container get to stop on TERM before they are killed.
    type: int
    default: 60
  docker:
    description: Docker CLI.
    type: str
    default: docker
  boot:
    description: The node's supervisor as the plan names it (C(paths), C(unit_name)); removed first. Omit to leave it.
    type: dict
  firewall:
    description:
      - The cluster's firewall on the node, removed last. C(table) (the nftables table, in family C(inet)) and
        C(files) (its boot unit's link, the unit and the ruleset).
    type: dict
  logs_dest:
    description:
      - The controller's folder the action plugin copies every log in RV(logs) into (as C(<logs_dest>/<name>)). Omit to
        leave the logs on the node.
    type: path
  shared:
    description:
      - What the deployments share, taken back with them when every deployment goes (the plan's C(shared) section of
        the paths stage, on its host). C(cluster) is the cluster's own name, whose label they carry; C(containers) their
        names (the gateway, Prometheus), removed like the node's own containers and only when this collection made
        them; C(folders) are removed whole (the gateway's, which holds every key).
    type: dict
"""

EXAMPLES = r"""
- name: Take this node back
  dgx_spark.vllm.node_teardown:
    cluster: dgx-spark
    node: spark1
    serve_container: dgx-spark-ray-spark1
    logs_dir: /var/lib/dgx-spark/state/dgx-spark/logs
    baseline_file: /var/lib/dgx-spark/state/dgx-spark/run/baseline.json
    logs_dest: /home/me/inventory/.artifacts/logs/spark1
  become: true
  register: taken_back
"""

RETURN = r"""
containers:
  description: The containers found and removed (in check mode, that would be removed).
  type: list
  elements: str
  returned: always
left_alone:
  description: Containers carrying the cluster's label without the C(managed) label; named in a warning, never touched.
  type: list
  elements: str
  returned: always
vllm_killed:
  description: True when vLLM did not stop on TERM within O(stop_timeout) and its process group was killed.
  type: bool
  returned: always
logs:
  description: The log files in O(logs_dir) after the containers' logs were written there.
  type: list
  elements: str
  returned: always
logs_staging:
  description:
    - With O(logs_dest), when the module ran through sudo for a non-root SSH user (as on DGX OS), the folder that user
      alone owns holding copies of RV(logs) (the last 256 MiB of each at most), which the connection transfers as that
      user; the action plugin copies from there and removes it.
  type: str
  returned: when the logs were staged for a non-root SSH user
logs_staged:
  description: Each log of RV(logs) and its copy in RV(logs_staging).
  type: dict
  returned: when the logs were staged for a non-root SSH user
supervisor_removed:
  description: True when the node's supervisor was there and was removed.
  type: bool
  returned: always
firewall_removed:
  description: The firewall's table and files that were there and were removed.
  type: list
  elements: str
  returned: always
folders_removed:
  description: The folders of O(shared) that were there and were removed (in check mode, that would be removed).
  type: list
  elements: str
  returned: always
memory:
  description:
    - C(judged) (false without a baseline), C(ok), C(missing_gib) against the baseline and a C(message) that names the
      node and, when it did not get its memory back, says to reboot it.
  type: dict
  returned: always
"""

import glob
import json
import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import firewall_state, process_group as pg, teardown as td
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import (
    collect, copy_regular, run, stage_for, start, sudo_caller, systemd_runs, to_file)
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.supervisor_control import Supervisor
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_probe
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.errors import ProbeError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster=dict(type="str", required=True),
            node=dict(type="str", required=True),
            serve_container=dict(type="str"),
            serve_state_file=dict(type="str", default="/dgx-spark/run/vllm.json"),
            vllm_state_file=dict(type="path"),
            logs_dir=dict(type="path", required=True),
            container_logs_dir=dict(type="path"),
            baseline_file=dict(type="path"),
            proc_root=dict(type="path", default="/proc"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            memory_tolerance_gib=dict(type="float", default=4),
            memory_wait=dict(type="int", default=10),
            stop_timeout=dict(type="int", default=60),
            docker=dict(type="str", default="docker"),
            boot=dict(type="dict"),
            firewall=dict(type="dict"),
            logs_dest=dict(type="path"),
            shared=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    docker = p["docker"]

    def runner(argv):
        return run(module, argv)

    rc, out, err = runner(td.find_argv(docker, p["cluster"], p["node"]))
    if rc != 0:
        module.fail_json(msg="%s: docker ps failed (rc=%d): %s; is Docker running there?" % (p["node"], rc, (err or out).strip()))
    found = td.parse_found(out)
    shared = p["shared"] or {}
    if shared and shared.get("cluster") != p["cluster"]:  # what the deployments share, ours, when every one goes
        rc, out, err = runner(td.find_argv(docker, shared["cluster"], p["node"]))
        if rc != 0:
            module.fail_json(msg="%s: docker ps failed (rc=%d): %s" % (p["node"], rc, (err or out).strip()))
        found = sorted(set(found) | {f for f in td.parse_found(out) if f[0] in (shared.get("containers") or [])})
    folders = [f for f in shared.get("folders") or [] if os.path.isdir(f)]
    names = [name for name, dummy in found]
    rc, out, err = runner(td.labelled_argv(docker, p["cluster"]))
    left = td.not_ours(out) if rc == 0 else []
    if left:
        module.warn("%s: container(s) %s carry cluster %s's label but not %s=true: this collection did not make "
                    "them, so they are left alone; remove them yourself if they are yours" % (p["node"], ", ".join(left), p["cluster"], td.labels.MANAGED))
    result = dict(changed=bool(names), containers=names, left_alone=left, vllm_killed=False, logs=[], memory=None,
                  supervisor_removed=False, firewall_removed=[])
    supervisor = Supervisor(p["boot"], runner, module.fail_json) if p["boot"] else None
    nft = module.get_bin_path("nft")
    firewall = firewall_present(runner, p["firewall"], nft)
    result["changed"] = (result["changed"] or bool(firewall["table"] or firewall["files"]) or bool(folders)
                         or bool(supervisor and any(supervisor.installed())))
    result["folders_removed"] = folders
    if module.check_mode:
        module.exit_json(**result)
    reloading = None
    if supervisor:  # systemd forgets its unit while vLLM stops (a daemon-reload takes a fifth of a second)
        result["supervisor_removed"] = supervisor.remove(reload=False)
        reloading = start(["systemctl", "daemon-reload"]) if result["supervisor_removed"] and supervisor.systemd else None
    running = [name for name, state in found if state == "running"]
    if p["serve_container"] in running:  # its group is stopped whether it runs or not: a group already gone is left at once
        vllm = node_probe.serving_state(runner, p["serve_container"], p["serve_state_file"], docker, p["vllm_state_file"])
        if vllm:
            result["vllm_killed"] = pg.stop_group(runner, docker, p["serve_container"], vllm["pgid"], p["stop_timeout"])
    if running:
        rc, out, err = runner(td.stop_argv(docker, running, p["stop_timeout"]))
        if rc != 0:
            module.fail_json(msg="%s: docker stop %s failed: %s" % (p["node"], " ".join(running), (err or out).strip()), **result)
    if names:
        os.makedirs(p["logs_dir"], mode=0o755, exist_ok=True)
        for name in names:
            to_file(td.logs_argv(docker, name), os.path.join(p["logs_dir"], name + ".log"))
        rc, out, err = runner(td.remove_argv(docker, names))
        if rc != 0:
            module.fail_json(msg="%s: docker rm %s failed: %s" % (p["node"], " ".join(names), (err or out).strip()), **result)
    if p["vllm_state_file"] and os.path.lexists(p["vllm_state_file"]):
        os.unlink(p["vllm_state_file"])
        result["changed"] = True
    if p["container_logs_dir"] and os.path.isdir(p["container_logs_dir"]):
        os.makedirs(p["logs_dir"], mode=0o755, exist_ok=True)
        for found in sorted(os.listdir(p["container_logs_dir"])):
            if found.endswith(".log"):
                copy_regular(os.path.join(p["container_logs_dir"], found), os.path.join(p["logs_dir"], found))
    for folder in folders:  # the gateway's, which holds every key
        shutil.rmtree(folder)
    result["logs"] = sorted(glob.glob(os.path.join(glob.escape(p["logs_dir"]), "*.log")))
    if reloading is not None:
        rc, out, err = collect(reloading)
        if rc != 0:
            module.fail_json(msg="%s: systemctl daemon-reload failed: %s" % (p["node"], (err or out).strip()), **result)
    result["memory"] = judge_memory(module, runner)
    result["firewall_removed"] = remove_firewall(module, runner, firewall, nft)
    caller = sudo_caller() if p["logs_dest"] and result["logs"] else None
    if caller:  # the logs' folder is root's; the connection copies them to the controller as the SSH user
        try:
            result["logs_staging"], result["logs_staged"] = stage_for(caller, result["logs"], "dgx-spark-logs-")
        except OSError as exc:
            module.fail_json(msg="%s: the node was taken back, but its logs could not be copied for %s to transfer: %s; "
                                 "they are kept in %s" % (p["node"], os.environ.get("SUDO_USER", "the SSH user"), exc, p["logs_dir"]),
                             **result)
    module.exit_json(**result)


def firewall_present(runner, firewall, nft):
    """What of the cluster's firewall is on the node: {"table": its name when nft lists it, else None, "files": those
    of its boot unit's link, unit and ruleset that exist}."""
    if not firewall:
        return {"table": None, "files": []}
    listed = nft is not None and runner(firewall_state.list_argv(firewall["table"], nft))[0] == 0
    return {"table": firewall["table"] if listed else None,
            "files": [path for path in firewall.get("files") or [] if os.path.lexists(path)]}


def remove_firewall(module, runner, present, nft):
    """The table first (Ray's ports are closed to nobody once Ray is gone), then its boot unit, link and ruleset.
    Returns what was removed."""
    if present["table"]:
        rc, out, err = runner(td.nft_delete_argv(nft, present["table"]))
        if rc != 0 and "No such file or directory" not in err:
            module.fail_json(msg="%s: nft delete table inet %s failed: %s" % (module.params["node"], present["table"], (err or out).strip()))
    for path in present["files"]:
        os.remove(path)
    if present["files"] and systemd_runs():  # systemd forgets the unit now, not at the next boot
        runner(["systemctl", "daemon-reload"])
    return ([present["table"]] if present["table"] else []) + present["files"]


def judge_memory(module, runner):
    """The verdict against the baseline, after waiting up to memory_wait seconds for the memory to come back."""
    p = module.params
    before = None
    if p["baseline_file"] and os.path.isfile(p["baseline_file"]):
        try:
            with open(p["baseline_file"], encoding="utf-8") as handle:
                before = json.load(handle)
        except (OSError, ValueError) as exc:
            module.warn("%s: the memory baseline %s cannot be read (%s); memory is not judged" % (p["node"], p["baseline_file"], exc))
    if before is None:
        return td.memory_verdict(p["node"], None, None, p["memory_tolerance_gib"])
    smi = p["nvidia_smi"]
    wanted = int(before["mem_available_bytes"]) - p["memory_tolerance_gib"] * td.GIB
    deadline = time.monotonic() + p["memory_wait"]
    while True:
        try:
            after = node_probe.memory(runner, module.warn, p["proc_root"], smi if os.path.sep in smi else module.get_bin_path(smi), smi)
        except ProbeError as exc:
            module.fail_json(msg=str(exc))
        if after["mem_available_bytes"] >= wanted or time.monotonic() >= deadline:
            return td.memory_verdict(p["node"], before, after, p["memory_tolerance_gib"])
        time.sleep(0.1)  # a look is two nvidia-smi calls and /proc/meminfo


if __name__ == "__main__":
    main()
