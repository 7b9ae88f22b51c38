# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The supervisor's plan: what brings each node back by itself after a boot or a crash (its daemon is
module_utils/node/supervisor.py, which runs on the node).

Today's launch leaves nothing a node could restart by itself: ``vllm serve`` is a process exec'd into the head's Ray
container (fact 1), so a Docker restart policy brings back Ray at best, an orphaned Ray that serves nothing. And a
restart policy would start the containers before anything has looked at the node: a Spark that comes back with
memory pinned (fact 3) would load the model into what is left, and fail, or starve the OS.

So each node gets a small supervisor, a systemd unit ordered after Docker (``unit``), that reads the plan's steps for
that node (``plan``, written as JSON beside the node's state) and brings each one about in order, looking again every
few seconds. The order and the waits are data, planned here:

- a worker: the head's Ray port answers, then its Ray container runs (started only when the node's memory fits);
- the head: its Ray container runs, every node and GPU has joined (the join gate, fact 2), vLLM runs in the head's
  container as the process group vllm_process makes (started only when the memory fits), the endpoint answers, and
  one completion is asked of it (the smoke test of a boot), then the correctness canary's prompts, compared with the
  reference the head keeps (module_utils/verify/canary.py): a boot must not bring back a deployment that answers wrong;
- the mp backend: each node's vLLM container runs; the head's endpoint answers.

The vllm_boot module installs the plan file, the unit and the daemon's code (``files``: the modules it imports,
``LIB_MODULES``, copied beside it on the node). Pure; no I/O but reading this collection's own sources.
"""

from __future__ import annotations

import hashlib
import importlib
import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import memory_fit, monitoring

UNIT_DIR = "/etc/systemd/system"
PACKAGE = "ansible_collections.dgx_spark.vllm.plugins.module_utils"
# What the node's copy needs: the daemon and every module it imports, by their place under module_utils.
LIB_MODULES = ("node.supervisor", "node.supervisor_state", "node.firewall_state", "node.command",
               "node.completion", "node.metrics", "node.process_group", "probe.errors", "probe.ray_state",
               "probe.unified_memory", "plan.memory_fit", "verify.canary", "verify.endpoint")
DAEMON = "node.supervisor"
INTERVAL = 5            # seconds between looks
GIB = 1024 ** 3


def unit_name(cluster):
    return "dgx-spark-vllm-serve-%s.service" % cluster


def paths(state_dir, cluster):
    """Where the supervisor's files are on a node: its unit, its copy of the code, its plan, its status, the hold, and
    the vLLM its release found verified (the playbook's endpoint check and canary asked it: not asked again). The
    status has a folder of its own: the only one the unit lets the daemon write (``unit``). ``legacy_status``: where
    releases before it kept the status, read to find and stop a supervisor started then."""
    name = unit_name(cluster)
    return {"unit": "%s/%s" % (UNIT_DIR, name), "wants": "%s/multi-user.target.wants/%s" % (UNIT_DIR, name),
            "lib": state_dir + "/boot/lib", "config": state_dir + "/boot/plan.json",
            "status": state_dir + "/boot/status/status.json", "hold": state_dir + "/boot/hold",
            "verified": state_dir + "/boot/verified.json", "legacy_status": state_dir + "/boot/status.json"}


def lib_paths(where):
    """The node's copy of each module the supervisor imports (LIB_MODULES), in that order."""
    lib = where["lib"] + "/" + PACKAGE.replace(".", "/")
    return ["%s/%s.py" % (lib, name.replace(".", "/")) for name in LIB_MODULES]


def source(name):
    """This collection's module ``name`` as text, from wherever Python loaded it (the controller's checkout, or the zip
    Ansible sends to a node): what the node's copy must hold."""
    loaded = importlib.import_module(PACKAGE + "." + name)
    text = loaded.__loader__.get_source(loaded.__name__)  # Ansible's collection loader gives bytes
    return text.decode("utf-8") if isinstance(text, bytes) else text


def files(boot_plan):
    """Every file the supervisor's install writes, as (path, content, mode): its plan, its unit, its copy of the code."""
    where = boot_plan["paths"]
    return ([(where["config"], json.dumps(boot_plan["config"], indent=2, sort_keys=True) + "\n", 0o644),
             (where["unit"], boot_plan["unit"], 0o644)]
            + [(path, source(name), 0o644) for path, name in zip(lib_paths(where), LIB_MODULES)])


def probe_paths(where):
    """What the probe hashes so that the plan knows whether the install would change anything (``install_changes``)."""
    return [where["config"], where["unit"], where["wants"], where["hold"]] + lib_paths(where)


def install_changes(boot_plan, found, running=None):
    """What installing and releasing ``boot_plan`` would change on a node whose probe found ``found`` ({path: sha256,
    "dir" or None}, node_probe.state) and whether its supervisor runs (``running``): the files that differ, the boot
    link, a hold left by an interrupted run, a supervisor stopped that should run or running that should not. Empty
    when the node holds and runs exactly this supervisor; everything when the node was not probed."""
    if found is None:
        return ["not probed"]
    where = boot_plan["paths"]
    changes = []
    if running is not None and running != bool(boot_plan.get("enabled")):
        changes.append("process (%s)" % ("running although vllm_boot_start is false" if running else "not running"))
    changes += [path for path, content, dummy in files(boot_plan)
                if found.get(path) != hashlib.sha256(content.encode("utf-8")).hexdigest()]
    linked = found.get(where["wants"]) is not None  # the link read through: the unit's content
    if bool(boot_plan.get("enabled")) != linked:
        changes.append(where["wants"])
    if found.get(where["hold"]) is not None:
        changes.append(where["hold"])
    return changes


def command(where):
    """The supervisor's command line (the unit's ExecStart): Python with the copied modules on its path, writing no
    bytecode beside them (its code folder holds exactly the copied sources: Supervisor.strays)."""
    return ["/usr/bin/env", "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=" + where["lib"], "python3", "-m", PACKAGE + "." + DAEMON, where["config"]]


# The daemon's sandbox: it runs docker's CLI (a socket, no file written), nft's listing (netlink), nvidia-smi (its
# devices, so no PrivateDevices) and HTTP to the node's own endpoint, reads its plan, the key and the canary's
# reference, and writes its status alone. Defence in depth: whoever holds Docker's socket is root all the same; what
# keeps its code and plan out of a container's reach is that no container mounts them (plan/commands.py MOUNTS).
HARDENING = ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=read-only", "PrivateTmp=yes", "ProtectKernelTunables=yes",
             "ProtectKernelModules=yes", "ProtectKernelLogs=yes", "ProtectControlGroups=yes", "RestrictSUIDSGID=yes",
             "RestrictRealtime=yes", "RestrictNamespaces=yes", "LockPersonality=yes", "SystemCallArchitectures=native",
             "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK", "UMask=0077")


def unit(cluster, where, firewall_unit=None, textfile=None):
    """The systemd unit: after Docker (and the firewall's unit, which loads the table before Docker starts), sandboxed
    (HARDENING), writing only its status folder (and node_exporter's textfile folder, when it writes the figures
    there; "-": a folder missing does not stop the unit, the supervisor says it is missing)."""
    after = ("local-fs.target docker.service network-online.target nftables.service nvidia-persistenced.service"
             + (" " + firewall_unit if firewall_unit else ""))
    return "\n".join([
        "# Written by dgx_spark.vllm for cluster %s; removed by teardown.yml." % cluster,
        "[Unit]",
        "Description=dgx_spark.vllm %s: bring the model back after a boot or a crash" % cluster,
        "After=" + after,
        "Wants=docker.service network-online.target",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + " ".join(command(where)),
        "Restart=on-failure",
        "RestartSec=5",
        "ReadWritePaths=" + " ".join([where["status"].rsplit("/", 1)[0]] + (["-" + textfile["path"].rsplit("/", 1)[0]] if textfile else []))]
        + list(HARDENING) + [
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        ""])


def memory_need(memory_plan, node, settings):
    """What must be free on ``node`` before anything that loads the model starts: what vLLM requests (fact 3's fit)
    with room for its processes and the OS floor, and the most unaccounted (pinned) memory the planner accepts."""
    entry = ((memory_plan or {}).get("nodes") or {}).get(node)
    limit = int(float(settings["unaccounted_limit_gib"]) * GIB)
    if not entry:
        return {"need_available_bytes": None, "unaccounted_limit_bytes": limit}
    # The plan's own figure (memory_fit.needed_bytes): vLLM's request of CUDA's total, the runtime beside it, the floor.
    need = memory_fit.needed_bytes(int(entry["cuda_total_bytes"]), float(memory_plan["gpu_memory_utilization"]),
                                   int(entry.get("runtime_bytes") or 0), int(memory_plan.get("headroom_floor_bytes") or 0))
    return {"need_available_bytes": need, "unaccounted_limit_bytes": limit}


def steps(backend, is_head, cluster, containers, serve, node_paths, firewall=None):
    """The ordered steps of one node: with the firewall on, its table first (fail closed: nothing starts without it)."""
    result = []
    if firewall:
        result.append({"name": "the firewall table %s is the one serve.yml loaded" % firewall["table"], "kind": "firewall",
                       "table": firewall["table"], "record": firewall["record"], "unit": firewall["unit_name"]})
    if backend == "ray" and not is_head:
        host, port = cluster["ray_address"].rsplit(":", 1)
        # A worker's Ray stays joined to a head that went away until its raylet gives up (a minute or more): when the
        # head's port was lost and answers again, the worker's container is restarted to join the new head at once.
        result.append({"name": "the head's Ray (%s) answers" % cluster["ray_address"], "kind": "tcp", "host": host, "port": int(port),
                       "rejoin": containers[0]["name"], "check_memory": True})
    for spec in containers:
        result.append({"name": "container %s runs" % spec["name"], "kind": "container", "container": spec["name"], "check_memory": True})
    if not is_head:
        return result
    endpoint_info = cluster["endpoint"]
    if backend == "ray":
        result.append({"name": "every node and GPU joined Ray (%d GPUs)" % cluster["expected_ray_gpus"], "kind": "join",
                       "container": containers[0]["name"], "expected_nodes": cluster["expected_ray_nodes"],
                       "expected_gpus": cluster["expected_ray_gpus"], "expected_ips": cluster["expected_ips"]})
        result.append({"name": "vLLM runs in %s" % serve["container"], "kind": "driver", "container": serve["container"],
                       "argv": serve["command"], "config_hash": serve["config_hash"], "log_file": serve["log"],
                       "state_file": serve["state_file"], "state_file_host": node_paths["vllm_state_file"],
                       "check_memory": True})
    result.append({"name": "the endpoint answers", "kind": "health", "url": endpoint_info["local_health_url"]})
    result.append({"name": "one completion", "kind": "completion", "url": endpoint_info["local_health_url"].rsplit("/", 1)[0],
                   "model": endpoint_info["served_model_name"], "key_file": node_paths["api_key_file"],
                   # After a boot the canary's prompts are asked again and compared with the head's kept reference.
                   "canary": dict(cluster["canary"], reference_file=node_paths["canary_file"]) if cluster.get("canary") else None})
    return result


def hold_first(boot_plan, found):
    """Whether the apply must hold the node's supervisor before it changes anything: where one is installed (its unit
    or its hold found by the probe: ``found``, node_probe.state), or the node was not probed. Where none is, nothing
    can act while the run changes the node, so the apply installs this one, held, while vLLM loads, off the launch's
    path."""
    if found is None:
        return True
    where = boot_plan["paths"]
    return any(found.get(path) is not None for path in (where["unit"], where["wants"], where["hold"], where["config"]))


def plan(settings, backend, node, entry, cluster, firewall_unit=None):
    """The supervisor of one node: its files (unit and plan) and whether it is on (``vllm_boot_start``)."""
    where = paths(entry["paths"]["state_dir"], settings["cluster_name"])
    config = {"cluster": settings["cluster_name"], "node": node, "is_head": entry["is_head"], "backend": backend,
              "config_hash": (entry.get("serve") or {}).get("config_hash") or entry["config_hash"], "interval": INTERVAL,
              "status": where["status"], "hold": where["hold"], "verified": where["verified"],
              "memory": memory_need(cluster.get("memory"), node, settings),
              "metrics": metrics_config(settings, node, entry["fabric_ip"]),
              "textfile": monitoring.textfile(settings, node),
              "steps": steps(backend, entry["is_head"], cluster, entry["containers"], entry.get("serve"), entry["paths"],
                             entry.get("firewall"))}
    return {"enabled": bool(settings["boot_start"]), "unit_name": unit_name(settings["cluster_name"]), "paths": where,
            "unit": unit(settings["cluster_name"], where, firewall_unit, config["textfile"]), "config": config}


def metrics_config(settings, node, address):
    """Where this node serves its figures for the head's Prometheus, or None when it does not."""
    if not monitoring.serves_figures(settings, node):
        return None
    return {"address": address, "port": settings["monitoring"]["node_port"],
            "labels": {"cluster": settings["cluster_name"], "node": node}}


def installed(state_dir, cluster, firewall=None):
    """What status.yml and teardown.yml know of a node's supervisor without a profile: where it is (its plan, read
    from the node, says the rest), and the firewall table it needs (status.yml reads it)."""
    return {"enabled": None, "unit_name": unit_name(cluster), "paths": paths(state_dir, cluster), "config": None, "unit": None,
            "firewall": firewall}


def next_boot(config, enabled, status):
    """What status.yml says this node does at its next boot, and how its last look went."""
    if not enabled or not config:
        return {"next_boot": "nothing: the supervisor is off (vllm_boot_start: false) or not installed; serve.yml starts the model",
                "state": (status or {}).get("state")}
    names = [s["name"] for s in config["steps"]]
    status = status or {}
    held = " (held now: %s)" % status.get("detail") if status.get("state") == "held" else ""
    return {"next_boot": "checks memory, then: " + "; ".join(names) + held, "state": status.get("state"),
            "detail": status.get("detail"), "since": status.get("since")}
