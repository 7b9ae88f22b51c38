# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A planned container spec -> the arguments of community.docker.docker_container. Pure.

The spec is the planner's (plan_commands.container_spec); the change is the planner's decision
(plan_nodes.container_change): none (it runs with the planned config hash: nothing to ask the node), create, start,
recreate, or restart (a Ray worker whose head was replaced: its raylet died with the head it joined).
Comparisons: the image strictly, and the labels (the config hash is one): a container is recreated only when its
config hash changed, never for what Docker or the image added.
"""

from __future__ import annotations

CHANGES = ("none", "create", "start", "recreate", "restart")


def docker_container_args(spec, change):
    """The module arguments that bring the container to ``spec``; ``change`` restart also restarts a running one."""
    if change not in CHANGES:
        raise ValueError("change must be one of %s, got %r" % (", ".join(CHANGES), change))
    args = {
        "name": spec["name"],
        "image": spec["image"],
        "command": list(spec["command"]),
        "env": {k: str(v) for k, v in spec["env"].items()},
        "network_mode": spec["network_mode"],
        "ipc_mode": spec["ipc_mode"],
        "capabilities": list(spec.get("capabilities") or []),
        "ulimits": list(spec.get("ulimits") or []),
        "volumes": list(spec["volumes"]),
        "labels": dict(spec["labels"]),
        "init": bool(spec.get("init", True)),
        "restart_policy": spec.get("restart_policy", "no"),
        "state": "started",
        "container_default_behavior": "no_defaults",
        "comparisons": {"*": "ignore", "image": "strict", "labels": "allow_more_present"},
    }
    if spec.get("shm_size"):
        args["shm_size"] = spec["shm_size"]
    if spec.get("devices"):
        args["devices"] = list(spec["devices"])
    if spec.get("gpus"):
        args["device_requests"] = [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
    if change == "restart":
        args["restart"] = True
    if change == "recreate":  # also when only its environment drifted: its labels and hash still match the plan's
        args["recreate"] = True
    return args
