# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A planned container spec -> the arguments of community.docker.docker_container. Pure.

Every container the collection runs goes through here: Ray and the mp ranks (module_utils/plan/commands.py
container_spec), Prometheus and the gateway (module_utils/plan/shared.py). The change is the planner's decision
(module_utils/plan/nodes.py container_change, module_utils/plan/shared.py change): none (it runs with the planned
config hash: nothing to ask the node), create, start, recreate, restart (a Ray worker whose head was replaced: its
raylet died with the head it joined), or remove (a shared container its plan turned off; the planner checked it is
ours, module_utils/plan/labels.py).
Comparisons: the image strictly, and the labels (the config hash is one): a container is recreated only when its
config hash changed, never for what Docker or the image added.
"""

from __future__ import annotations

CHANGES = ("none", "create", "start", "recreate", "restart", "remove")


def docker_container_args(spec, change):
    """The module arguments that bring the container to ``spec``; ``change`` restart also restarts a running one."""
    if change not in CHANGES:
        raise ValueError("change must be one of %s, got %r" % (", ".join(CHANGES), change))
    if change == "remove":
        return {"name": spec["name"], "state": "absent"}
    args = {
        "name": spec["name"],
        "image": spec["image"],
        "command": list(spec["command"]),
        "env": {k: str(v) for k, v in (spec.get("env") or {}).items()},
        "network_mode": spec["network_mode"],
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
    if spec.get("ipc_mode"):
        args["ipc_mode"] = spec["ipc_mode"]
    if spec.get("shm_size"):
        args["shm_size"] = spec["shm_size"]
    if spec.get("devices"):
        args["devices"] = list(spec["devices"])
    if spec.get("gpus"):
        args["device_requests"] = [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
    # The front door's confinement (module_utils/plan/door.py): capabilities dropped, its filesystem read-only but for
    # its own tmpfs, no gaining privileges.
    for key in ("cap_drop", "tmpfs", "security_opts"):
        if spec.get(key):
            args[key] = list(spec[key])
    if spec.get("read_only"):
        args["read_only"] = True
    if change == "restart":
        args["restart"] = True
    if change == "recreate":  # also when only its environment drifted: its labels and hash still match the plan's
        args["recreate"] = True
    return args
