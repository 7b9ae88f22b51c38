# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the apply step changes on each node of a deployment, from what the probe found: each container (none, create,
start, recreate, restart), vLLM's restart, the state files that differ, the firewall, the baseline of memory before a
launch, and whether anything is applied at all. Pure; no I/O.
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import firewall_state
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import labels, nodes as nodes_check
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import LABEL, container_name, digest
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import model_files as mf


def differs(found, path, content):
    """The node's file at ``path`` (as the probe's state read it: its sha256, or None) is not ``content``; a node not
    probed (``found`` None) differs in everything."""
    return found is None or found.get(path) != hashlib.sha256(content.encode("utf-8")).hexdigest()


def state_writes(facts, paths, files):
    """The folders the node lacks and the files whose content differs from the plan's (all, when not probed)."""
    found = facts.get("state")
    if found is None:
        return {"folders": paths["folders"], "files": files}
    return {"folders": [f for f in paths["folders"] if found.get(f["path"]) != "dir"],
            "files": [f for f in files if differs(found, f["path"], f["content"])]}


def firewall_writes(facts, planned):
    """The firewall's files whose content differs, whether its unit must be enabled (its link, read through, holds
    the unit's content), and why the table must be loaded again although neither changed (``reload``: the live table
    is missing, changed or unrecorded, node/firewall_state.py; None when it is the one loaded). The table is (re)loaded
    when any of them says so (a node not probed gets all)."""
    if planned is None:
        return {"files": [], "enable": False, "reload": None}
    found = facts.get("state")
    live = facts.get("firewall")
    return {"files": [f for f in planned["files"] if differs(found, f["path"], f["content"])],
            "enable": differs(found, planned["wants"], planned["files"][1]["content"]),
            "reload": live if live not in (None, firewall_state.LOADED) else None}


def decide_changes(inputs, nodes, cluster, head):
    """What the apply step changes, from what the probe found: per container (plan_nodes.container_change), a
    restart of the Ray workers when the head is replaced (a worker's raylet dies with the head it joined), and
    vLLM's restart when its config hash changed (with Ray, any node's change restarts it)."""
    order = [n for n in inputs["order"] if n in nodes]
    if inputs["backend"] == "ray" and head in nodes:
        serve = nodes[head]["serve"]
        # vLLM holds no key (the front door does: module_utils/plan/door.py), so a new key restarts only the door.
        hashed = {"argv": serve["argv"], "nodes": [nodes[n]["config_hash"] for n in order]}
        if inputs.get("code_pins"):  # a file pinned anew is loaded anew (the argv alone hashed before pins existed)
            hashed["code_pins"] = inputs["code_pins"]
        serve["config_hash"] = digest(hashed)
        cluster["serve_config_hash"] = serve["config_hash"]
    probed = {n: nodes_check.probed_containers(inputs["nodes"][n]) for n in order}
    for name in order:
        for spec in nodes[name]["containers"]:
            spec_change = "create" if probed[name] is None else nodes_check.container_change(spec, probed[name])
            nodes[name].setdefault("changes", {})[spec["name"]] = spec_change
    cluster["env_drift"] = nodes_check.env_drift(order, inputs["nodes"], nodes)
    head_change = nodes.get(head, {}).get("changes", {}).get(container_name(inputs["settings"], "ray", head))
    joined = nodes_check.join_state(inputs["nodes"].get(head), cluster) if inputs["backend"] == "ray" else None
    # Every node's Ray container starts before vLLM's launch, the workers' with the head's; but a worker that asked while
    # the head's old container still ran would join that Ray and die with it: a replaced head goes first (ray_cluster).
    cluster["ray_head_first"] = inputs["backend"] == "ray" and head_change == "recreate"
    for name in order if inputs["backend"] == "ray" and head_change not in (None, "none") else []:
        spec = nodes[name]["containers"][0]
        if name != head and nodes[name]["changes"][spec["name"]] == "none":
            nodes[name]["changes"][spec["name"]] = "restart"
    for name in order if joined else []:  # a running worker missing from Ray (its raylet died) starts again
        spec = nodes[name]["containers"][0]
        if nodes[name]["fabric_ip"] in joined["missing_ips"] and nodes[name]["changes"][spec["name"]] == "none":
            nodes[name]["changes"][spec["name"]] = "restart"
    changing = any(c != "none" for n in order for c in nodes[n]["changes"].values())
    for name in order:
        serve = nodes[name].get("serve")
        if serve and inputs["backend"] == "mp":  # vLLM is the container's own process: it changes with the container
            serve["change"] = "none" if not changing else "start"
        elif serve:
            vllm = inputs["nodes"][name].get("vllm")
            unchanged = vllm and vllm.get("running") and vllm.get("config_hash") == serve["config_hash"] and not changing
            serve["change"] = "none" if unchanged else ("start" if vllm is not None or changing else "unknown")
            # A vLLM that runs another configuration is started again: the plan says restart, not start (it was not down).
            serve["restarts"] = bool(serve["change"] == "start" and vllm and vllm.get("running") and not changing)
            # A container stopped under a running vLLM ends it by SIGKILL once its init exits: on a GB10 the memory
            # stays pinned until a reboot (fact 3). vLLM is stopped by its process group before its containers change.
            serve["stop_first"] = bool(vllm and vllm.get("running") and changing)
    cluster.setdefault("serve_config_hash", nodes.get(head, {}).get("serve", {}).get("config_hash"))
    launching = any((nodes[n].get("serve") or {}).get("change", "none") != "none" for n in order)
    for name in order:  # before a launch, the memory teardown compares each node's with (fact 3), with the state files
        found = inputs["nodes"][name].get("memory")
        if launching and found:
            nodes[name]["writes"]["files"].append({"path": nodes[name]["paths"]["baseline_file"], "mode": "0644",
                                                   "content": json.dumps(found, indent=4, sort_keys=True) + "\n"})
    # Only a running container of ours this run leaves as it is keeps the models folder it started with (the front door
    # mounts none).
    for name in order:
        anew = {spec for spec, change in nodes[name]["changes"].items() if change != "none"}
        kept = [c for c in probed[name] or [] if c.get("state") == "running" and c.get("name") not in anew
                and labels.of(c, inputs["settings"]["cluster_name"], name) and (c.get("labels") or {}).get(labels.ROLE) != "door"]
        nodes[name]["models_mount_kept"] = probed[name] is None or bool(kept)
    model_copies(inputs, nodes, cluster, order, head)
    cluster["changes"] = sorted("%s: %s %s" % (n, c, s) for n in order for s, c in nodes[n]["changes"].items() if c != "none")
    if head in nodes and key_differs(inputs["nodes"][head].get("state"), nodes[head]["paths"]["api_key_file"], inputs.get("api_key_digest")):
        cluster["changes"].append("%s: write the clients' key for the supervisor and bench" % head)
    # Nothing to start or restart: the image, the folders, the model and the launch steps have nothing to do.
    cluster["apply_needed"] = (bool(cluster["changes"]) or launching
                               or any((nodes[n].get("ring") or {}).get("netplan", {}).get("differs") for n in order)
                               or any(nodes[n]["writes"]["folders"] or nodes[n]["writes"]["files"] or nodes[n]["writes"]["firewall"]["files"]
                                      or nodes[n]["writes"]["firewall"]["enable"] for n in order))
    # A live table missing or changed is loaded again on its own (tasks/restore.yml), or with the apply's fabric step.
    # The head's probe read Ray: with every node and GPU joined and nothing to change, the join gate is proven already.
    cluster["join_gate_proven"] = bool(joined and joined["ready"] and not cluster["apply_needed"])


def key_differs(found, path, key_digest):
    """The head's copy of the clients' key (its sha256, as the probe read it) is not the controller's (``key_digest``,
    the first 16 hex digits of the same sha256: the action's key_digest), or is missing; a head not probed differs."""
    return bool(key_digest) and (found is None or (found.get(path) or "")[:16] != key_digest)


def model_copies(inputs, nodes, cluster, order, head):
    """Each node's copy of the model judged as the model role judges it (model_files.check of what the probe read,
    against the head's manifest), and whether the apply's model step has anything to do: ``cluster.model_ready`` when
    every copy is complete at the head's commit, no checksum is asked (reading every shard is the step's), and no
    running container is kept whose models folder the step compares. Where a node was not read, nothing is ready."""
    copies = {n: inputs["nodes"][n].get("model_copy") for n in order}
    head_copy = copies.get(head) or {}
    manifest = head_copy.get("manifest")
    for name in order:
        copy = copies[name]
        if copy is None or copy.get("shards") == "unreadable":
            nodes[name]["model_copy"] = None
            continue
        judged = mf.check(copy["present"], manifest if manifest is not None else copy.get("manifest"), shards=copy.get("shards"))
        judged["complete"] = bool(judged["complete"] and copy["present"] and copy.get("commit") == head_copy.get("commit")
                                  and (manifest or {}).get("commit") in (None, copy.get("commit")))
        message = mf.describe(judged) if copy["present"] else "not on this node (%s)" % (copy.get("snapshot") or "no snapshot")
        nodes[name]["model_copy"] = {"complete": judged["complete"], "commit": copy.get("commit"), "message": message,
                                     "bytes_present": judged["bytes_present"], "bytes_expected": judged["bytes_expected"]}
    cluster["model_ready"] = bool(
        order and all((nodes[n].get("model_copy") or {}).get("complete") for n in order)
        and not cluster["model"].get("verify_checksums") and not any(nodes[n]["models_mount_kept"] for n in order))


def restore_steps(result, name, backend):
    """What node ``name`` still does in a run that changes no container (tasks/unchanged.yml runs tasks/restore.yml only
    where this is not empty): "firewall", its live table loaded again (missing or changed); "image", a lost image placed
    (or the image built); "ring", its ring's links proven; "gate", Ray's join gate, unless the head's probe proved it."""
    node, cluster = result["nodes"][name], result["cluster"]
    steps = {"firewall": ((node.get("writes") or {}).get("firewall") or {}).get("reload") is not None,
             "image": bool(cluster.get("image_build") or result.get("image_missing_on")),
             "ring": node.get("ring") is not None,
             "gate": backend == "ray" and not cluster.get("join_gate_proven")}
    return [step for step in ("firewall", "image", "ring", "gate") if steps[step]]


def monitoring_change(planned, head_facts):
    """What the monitoring role does on the head: nothing when Prometheus runs with the planned hash (its files are in
    the hash), apply, or remove the container of ours that monitoring off no longer wants."""
    probed = nodes_check.probed_containers(head_facts)
    if planned["enabled"]:
        return "none" if nodes_check.container_change(planned["container"], probed) == "none" else "apply"
    ours = [c for c in probed or [] if c["name"] == planned["container"]["name"] and c["labels"].get(LABEL + ".managed") == "true"]
    return "remove" if ours else "none"
