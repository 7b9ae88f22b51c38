# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner: inventory + probe facts + a model profile -> one plan. Pure; no I/O.

The plan is the only source of derived values. Per node: rank, fabric IP, environment (the part identical on
every rank and the per-node part), paths, ports, every container (spec, command, config hash, and the change the
apply step makes to it), the serve command. For the cluster: backend, parallel sizes, memory plan, vLLM argv,
endpoint URLs, the model and its helpers. Every check that fails is a finding (host, value, message with the
remedy); the play stops before any change when there is an error. Its parts, one concern each:

- plan_base: defaults, names, paths, the findings collector
- plan_inventory: groups, order, fabric IPs, parallel sizes
- plan_env: transport and environment
- plan_commands: vLLM flags and argv, ray start, container specs, helpers
- plan_memory: the memory plan's adapter
- plan_nodes: checks of the probed nodes, what changes per container
"""

from __future__ import annotations

import copy
import hashlib
import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils import bench
from ansible_collections.dgx_spark.vllm.plugins.module_utils import monitoring
from ansible_collections.dgx_spark.vllm.plugins.module_utils import boot
from ansible_collections.dgx_spark.vllm.plugins.module_utils import canary
from ansible_collections.dgx_spark.vllm.plugins.module_utils import deployments
from ansible_collections.dgx_spark.vllm.plugins.module_utils import firewall
from ansible_collections.dgx_spark.vllm.plugins.module_utils import fleet
from ansible_collections.dgx_spark.vllm.plugins.module_utils import gateway
from ansible_collections.dgx_spark.vllm.plugins.module_utils import plan_commands as commands
from ansible_collections.dgx_spark.vllm.plugins.module_utils import plan_env as environment
from ansible_collections.dgx_spark.vllm.plugins.module_utils import plan_nodes as nodes_check
from ansible_collections.dgx_spark.vllm.plugins.module_utils import ring as ring_links
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan_base import (
    LABEL, STATE_MOUNT, Findings, container_name, digest, endpoint_url, mounts, node_paths, normalize_settings, reports)
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan_inventory import (
    check_head, check_inventory, check_model, parallel_sizes, ring_plan, utilization)
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan_memory import memory


def device_paths(settings):
    """The host side of each --device the containers get; each node's probe lists what is there."""
    return [device.split(":")[0] for device in settings["devices"] or []]


def probe_paths(paths):
    """The folders and files of a node's state the probe looks for (the plan writes what is missing or differs)."""
    files = ("launcher", "non_carry_over_file", "firewall_rules", "firewall_unit", "firewall_wants", "ring_netplan_copy")
    return [f["path"] for f in paths["folders"]] + [paths[k] for k in files] + [firewall.NFT]


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
    """The firewall's files whose content differs, and whether its unit must be enabled (its link, read through, holds
    the unit's content); the table is (re)loaded when either changes (a node not probed gets both)."""
    if planned is None:
        return {"files": [], "enable": False}
    found = facts.get("state")
    return {"files": [f for f in planned["files"] if differs(found, f["path"], f["content"])],
            "enable": differs(found, planned["wants"], planned["files"][1]["content"])}


def cluster_paths(inputs):
    """What needs no profile: every node's paths and container names, the endpoint, where the reports go. The
    playbooks that run without a profile (teardown.yml, status.yml) take their names and paths from it."""
    settings = normalize_settings(inputs.get("settings"))
    findings = Findings()
    order, head = inputs.get("order", []), (inputs.get("head_hosts") or [None])[0]
    check_head(inputs.get("head_hosts"), findings)
    advertised = nodes_check.bind_address(settings, head, inputs["nodes"].get(head) or {}, Findings())[1]
    url = endpoint_url(settings, advertised)
    result = {"stage": "paths", "head": head, "nodes_order": order,
              "nodes": {n: {"is_head": n == head, "fabric_ip": str(inputs["nodes"][n].get("fabric_ip")), "paths": paths,
                            "containers": {role: container_name(settings, role, n) for role in ("ray", "vllm")},
                            "boot": boot.installed(paths["state_dir"], settings["cluster_name"])}
                        for n, paths in ((n, node_paths(settings, n, None)) for n in order)},
              "cluster": {"name": settings["cluster_name"], "artifacts_dir": settings["artifacts_dir"],
                          "reports": reports(settings),
                          "expected_ips": [str(inputs["nodes"][n].get("fabric_ip")) for n in order],
                          "endpoint": {"url": url, "api_key_file": settings["api_key_file"]}}}
    return finish(result, findings)


def paths(inputs, listed=None):
    """cluster_paths of every deployment (teardown.yml, status.yml, upgrade.yml's and recover.yml's record look-up):
    each one's names and paths as its plan has them, and where the gateway runs when there is one. Needs no profile."""
    settings = normalize_settings(inputs.get("settings"))
    findings = Findings()
    entries = deployment_entries(inputs, settings, listed, findings)
    result = {"stage": "paths", "deployments": {}, "deployment_order": [e["name"] for e in entries], "gateway": None,
              "head": entries[0]["head"] if entries else None, "reports": {"plan": reports(settings)["plan"]},
              "api_key_file": settings["api_key_file"]}
    for entry in entries if not findings.errors else []:
        result["deployments"][entry["name"]] = plan = cluster_paths(fleet.planner_inputs(inputs, entry, {"model": {}}))
        own(findings, entry, plan)
    if listed and entries and not findings.errors:
        first = result["deployments"][entries[0]["name"]]
        result["gateway"] = dict(fleet.gateway_place(settings, first["head"], first["cluster"]["endpoint"]),
                                 api_key_file=settings["api_key_file"])
    return finish(result, findings)


def deployment_entries(inputs, settings, listed, findings):
    """The deployments to plan: each of ``vllm_deployments`` (fleet.expand), or the whole cluster as one."""
    if listed:
        return fleet.expand(listed, settings, inputs.get("groups") or {}, findings)
    return [fleet.whole(settings, inputs)]


def own(findings, entry, plan):
    """A deployment's findings as the whole plan's, each naming a listed deployment."""
    said = "deployment %s: " % entry["name"] if entry["listed"] else ""
    for error in plan["errors"]:
        findings.error(error["host"], error["value"], said + error["message"])
    for warning in plan["warnings"]:
        findings.warn(said + warning)


def make_plan(inputs, stage="full", listed=None, profiles_of=None, probes=None, key_digests=None):
    """The plan: a list of deployments, each planned on its own as if it were the whole cluster (``plan_deployment``),
    then what none of them sees alone: names, ports and memory on the nodes they share, and the gateway in front of
    them when the inventory lists them. ``listed``: vllm_deployments (none: the whole cluster is one deployment,
    fleet.whole); ``profiles_of`` maps each deployment's name to its loaded profile (the whole cluster's is
    ``inputs["profile"]``), ``probes`` each to its hosts' probe facts, ``key_digests`` each listed one to a digest of
    its own vLLM key (fleet.key_file). ``stage="inventory"`` checks only what needs no probe facts."""
    settings = normalize_settings(inputs.get("settings"))
    settings["monitoring"] = monitoring.settings(settings.get("monitoring"))[0]
    findings = Findings()
    if listed and settings["monitoring"]["enabled"]:
        # One Prometheus per deployment would take the same port on a shared head, and each supervisor would serve
        # the same node's figures twice: refused until one Prometheus watches every deployment. (A plan's check, not
        # the list's: teardown and status name the deployments whatever vllm_monitoring says.)
        findings.error("all", True, "vllm_monitoring does not watch several deployments yet (each would start its own "
                       "Prometheus on the same ports); set vllm_monitoring: false with vllm_deployments")
    entries = deployment_entries(inputs, settings, listed, findings)
    plans, settings_of = {}, {}
    for entry in entries if not findings.errors else []:
        profile = (profiles_of or {}).get(entry["name"]) if entry["listed"] else inputs.get("profile")
        if profile is None:
            findings.error("all", entry["name"], "deployment %s: its profile was not found" % entry["name"])
            continue
        given = fleet.planner_inputs(inputs, entry, profile, (probes or {}).get(entry["name"]), (key_digests or {}).get(entry["name"]))
        plans[entry["name"]] = plan_deployment(given, stage)
        settings_of[entry["name"]] = dict(normalize_settings(given["settings"]), monitoring=settings["monitoring"])
        own(findings, entry, plans[entry["name"]])
    result = {"stage": stage, "deployments": plans, "deployment_order": [e["name"] for e in entries],
              "head": entries[0]["head"] if entries else None, "shared_nodes": {}, "gateway": None}
    if listed and entries and not findings.errors:
        result.update(fleet.combine(entries, settings, settings_of, plans, findings,
                                    dict(key_digests or {}, **{"": inputs.get("api_key_digest")})))
    result["reports"] = {"plan": reports(settings)["plan"]}
    result.update(ok=not findings.errors, errors=findings.errors, warnings=findings.warnings)
    return result


def plan_deployment(inputs, stage="full"):
    """One deployment's plan. ``stage="inventory"`` checks only what needs no probe facts, and names the paths to
    probe."""
    inputs = copy.deepcopy(inputs)
    settings = inputs["settings"] = normalize_settings(inputs.get("settings"))
    findings = Findings()
    settings["monitoring"], wrong = monitoring.settings(settings.get("monitoring"))
    for message in wrong:
        findings.error("all", None, message)
    if settings["monitoring"]["enabled"] and not settings["boot_start"]:
        findings.warn("vllm_monitoring: each node's figures are served by its supervisor, which vllm_boot_start: false "
                      "turns off; Prometheus scrapes vLLM only")
    if gateway.enabled((settings.get("gateway") or {}).get("enabled"), 1):
        findings.error("all", True, "vllm_gateway: true puts the gateway in front of vllm_deployments, and this inventory "
                       "has none; list the one deployment there (docs/multi-model.md), or leave vllm_gateway out")
    check_inventory(inputs, findings)
    check_model(inputs, findings)
    inputs["ring"] = ring_plan(inputs, findings)
    order, head = inputs.get("order", []), (inputs.get("head_hosts") or [None])[0]
    for facts in inputs["nodes"].values():  # docker ps is parsed once; every check reads the containers
        if "docker_ps" in facts and "containers" not in facts:
            facts["containers"] = nodes_check.parse_docker_ps(facts["docker_ps"])
    profile = inputs["profile"]
    paths = {n: node_paths(settings, n, profile["model"]["id"]) for n in order}
    supervisors = {n: boot.paths(paths[n]["state_dir"], settings["cluster_name"]) for n in order}
    result = {"stage": stage, "profile": profile["name"], "backend": inputs.get("backend"), "head": head, "nodes_order": order,
              "parallel": parallel_sizes(inputs, findings), "gpu_memory_utilization": utilization(inputs, findings),
              "model": {"id": profile["model"]["id"], "served_name": profile["model"].get("served_name"),
                        "revision": commands.model_revision(inputs)},
              "image": {"name": settings["image"], "gpus": commands.gpus(settings)},
              "overrides": {k: v for k, v in (inputs.get("overrides") or {}).items() if v not in (None, "")},
              "profile_file": inputs.get("profile_file"),
              "nodes": {n: {"is_head": n == head, "paths": paths[n],
                            "probe_paths": probe_paths(paths[n]) + boot.probe_paths(supervisors[n]),
                            "probe_records": [paths[n]["last_known_good_file"]] if n == head else [],
                            "probe_supervisor": {"paths": supervisors[n], "unit_name": boot.unit_name(settings["cluster_name"])},
                            "probe_kept": deployments.kept_reference(settings["cluster_name"]),
                            "probe_devices": device_paths(settings),
                            "probe_ray": container_name(settings, "ray", n) if n == head and inputs.get("backend") == "ray" else None,
                            "container": container_name(settings, "ray" if inputs.get("backend") == "ray" else "vllm", n)}
                        for n in order}}
    if settings["offline"]:
        findings.warn("offline plan: no node was probed; RoCE ports, GID indexes and the image's flags are placeholders or "
                      "unchecked, and memory is planned for an idle Spark (117.3 GiB available). Run plan.yml with the nodes "
                      "reachable for the real plan")
    if stage == "inventory" or findings.errors:
        return finish(result, findings)
    if nodes_check.check_probed(order, inputs["nodes"], settings, findings):  # what follows would only guess about them
        return finish(result, findings)
    if not settings["image"]:
        findings.error("all", None, "no image: set vllm_image (a vLLM image with Ray), or let the image role build one")
    inputs["endpoint"] = dict(zip(("bind", "advertised"), nodes_check.bind_address(settings, head, inputs["nodes"][head], findings)))
    use_roce = environment.transport(inputs, findings)
    node_env = environment.node_environment(inputs, findings, use_roce)
    common = environment.common_environment(inputs, result["parallel"], use_roce)
    flags, max_len = commands.serve_flags(inputs, findings, result["parallel"])

    def argv_of(rank):
        return commands.serve_argv(inputs, result["parallel"], flags, result["gpu_memory_utilization"], max_len, rank,
                                   str(inputs["nodes"][head]["fabric_ip"]))

    cluster = cluster_section(inputs, result, use_roce, common, argv_of(0), environment.non_carry_over(node_env))
    result["nodes"] = {n: plan_node(inputs, n, rank, head, cluster, node_env[n], argv_of) for rank, n in enumerate(order)}
    decide_changes(inputs, result["nodes"], cluster, head)
    nodes_check.check_kept_env(order, inputs["nodes"], result["nodes"], findings)
    cluster["memory"] = memory(inputs, findings, result["parallel"], flags, result["gpu_memory_utilization"], max_len,
                               {n: result["nodes"][n]["config_hash"] for n in order}, common)
    cluster["canary"] = {"settings": canary.settings(profile), "basis": canary.basis({"cluster": cluster, "model": result["model"]})}
    cluster["bench"] = bench.target(cluster, result["nodes"][head], profile, max_len, STATE_MOUNT, commands.API_KEY_FILE)
    cluster["monitoring"] = monitoring.plan(
        settings["monitoring"], settings["cluster_name"], result["nodes"][head],
        cluster["endpoint"]["local_address"],
        [(n, result["nodes"][n]["fabric_ip"]) for n in order if monitoring.nodes_served(settings)],
        (cluster["memory"] or {}).get("headroom_floor_bytes") or 0,
        int(float(settings["unaccounted_limit_gib"]) * 1024 ** 3), commands.labels(settings, head, "prometheus"))
    cluster["monitoring"]["change"] = monitoring_change(cluster["monitoring"], inputs["nodes"][head])
    for name in order:  # the supervisor that brings each node back after a boot: the hashes and memory are final now
        result["nodes"][name]["boot"] = boot.plan(settings, inputs["backend"], name, result["nodes"][name], cluster,
                                                  firewall.unit_name(settings["cluster_name"]) if settings["firewall"] else None)
    for name in order:
        nodes_check.check_node(name, inputs["nodes"][name], settings, [c["name"] for c in result["nodes"][name]["containers"]],
                               result["nodes"][name]["ports"], findings)
    for name in order if settings["firewall"] else []:
        firewall.check(name, inputs["nodes"][name], findings)
    nodes_check.check_balance(order, inputs["nodes"], settings, findings)
    nodes_check.check_devices(order, inputs["nodes"], device_paths(settings), findings)
    result["image_missing_on"] = nodes_check.check_images(order, inputs["nodes"], findings, settings["image"], settings["image_build"])
    result.update(cluster=cluster, deviations=profile.get("deviations") or [])
    result = finish(result, findings, inputs)  # the extra flags and env the record holds, when the plan is good
    cluster["recorded"] = (inputs["nodes"][head].get("records") or {}).get(result["nodes"][head]["paths"]["last_known_good_file"])
    cluster["commit"] = deployments.commit_changes(result, {n: inputs["nodes"][n] for n in order})
    return result


def monitoring_change(planned, head_facts):
    """What the monitoring role does on the head: nothing when Prometheus runs with the planned hash (its files are in
    the hash), apply, or remove the container of ours that monitoring off no longer wants."""
    probed = nodes_check.probed_containers(head_facts)
    if planned["enabled"]:
        return "none" if nodes_check.container_change(planned["container"], probed) == "none" else "apply"
    ours = [c for c in probed or [] if c["name"] == planned["container"]["name"] and c["labels"].get(LABEL + ".managed") == "true"]
    return "remove" if ours else "none"


def finish(result, findings, inputs=None):
    """The plan with its verdict. A plan without errors also carries the extra flags and env it was made with (the
    last-known-good record plans it again from them); a refused one never does, as they may hold a secret."""
    result.update(ok=not findings.errors, errors=findings.errors, warnings=findings.warnings)
    if inputs is not None and not findings.errors:
        result.update(extra_flags=dict(inputs.get("extra_flags") or {}), extra_env=dict(inputs.get("extra_env") or {}))
    return result


def cluster_section(inputs, result, use_roce, common, argv, non_carry):
    """What every node shares: image, transport, Ray's expectations, the endpoint and its URLs, the model."""
    settings, order, backend = inputs["settings"], result["nodes_order"], inputs["backend"]
    head_ip = str(inputs["nodes"][result["head"]]["fabric_ip"])
    image = inputs.get("image_info") or {}
    profile = inputs["profile"]
    url = endpoint_url(settings, inputs["endpoint"]["advertised"])
    bind = inputs["endpoint"]["bind"]
    local = "%s:%d" % ("127.0.0.1" if bind in (None, "0.0.0.0") else bind, settings["port"])  # the head reaches vLLM there
    revision = result["model"]["revision"]
    return {
        "name": settings["cluster_name"], "image": settings["image"], "image_id": image.get("id"), "vllm_version": image.get("version"),
        "kept_image": deployments.kept_tag(settings["cluster_name"], image.get("id")), "images_kept": settings["images_kept"],
        "kept_reference": deployments.kept_reference(settings["cluster_name"]),
        "transport": "roce" if use_roce else "socket", "nccl_strict": bool(settings["nccl_strict"] and use_roce),
        "expected_ray_nodes": len(order) if backend == "ray" else None,
        "expected_ray_gpus": len(order) * settings["gpus_per_node"] if backend == "ray" else None,
        "expected_ips": [str(inputs["nodes"][n]["fabric_ip"]) for n in order], "head_ip": head_ip,
        "ray_address": "%s:%d" % (head_ip, settings["ray_port"]) if backend == "ray" else None,
        "non_carry_over_env_vars": non_carry, "env_common": dict(sorted(common.items())), "vllm_argv": argv,
        "hash": digest({"image": image.get("id") or settings["image"], "common": common, "backend": backend, "head_ip": head_ip,
                        "parallel": result["parallel"], "settings": {k: settings[k] for k in (
                            "network_mode", "ipc_mode", "shm_size", "devices", "gpus", "capabilities", "ulimits", "ray_port")}}),
        "artifacts_dir": settings["artifacts_dir"], "reports": reports(settings), "mounts": mounts(), "image_build": settings["image_build"],
        "endpoint": {"url": url, "port": settings["port"], "health_url": url + "/health", "models_url": url + "/v1/models",
                     "bind_address": bind,
                     "local_address": local,
                     "local_health_url": "http://%s/health" % local,
                     "served_model_name": profile["model"].get("served_name") or profile["model"]["id"],
                     "api_key_env": "VLLM_API_KEY", "api_key_file": settings["api_key_file"]},
        "model": {"id": profile["model"]["id"], "served_name": profile["model"].get("served_name"), "revision": revision,
                  "hf_endpoint": settings["hf_endpoint"], "verify_checksums": settings["model_verify_checksums"],
                  "disk_reserve_bytes": commands.disk_reserve_bytes(settings)},
        "eager_reason": (profile.get("vllm") or {}).get("eager_reason"), "smoke_tests": profile.get("smoke_tests") or [],
    }


def plan_node(inputs, name, rank, head, cluster, node_env, argv_of):
    """One node: its environment, paths, ports, containers with their config hash, its serve command and helpers."""
    settings, backend = inputs["settings"], inputs["backend"]
    is_head = name == head
    env = dict(cluster["env_common"], **node_env)
    paths = node_paths(settings, name, cluster["model"]["id"])
    fabric_ip = str(inputs["nodes"][name]["fabric_ip"])
    argv = argv_of(rank)
    if backend == "ray":
        spec = commands.container_spec(inputs, name, "ray", env, paths, commands.ray_command(inputs, fabric_ip, is_head, cluster["head_ip"]))
    else:
        spec = commands.container_spec(inputs, name, "vllm", env, paths, [commands.LAUNCHER] + argv[2:])
    # The image by its ID where known: another name of the same image (the tag an upgrade's rollback plans by) is the
    # same deployment, and a tag moved to another image is not.
    hashed = {"cluster": cluster["hash"], "containers": [dict(spec, image=cluster["image_id"] or spec["image"])]}
    if backend == "mp" and inputs.get("api_key_digest"):  # each rank's vLLM reads the key when its container starts
        hashed["api_key"] = inputs["api_key_digest"]
    node_hash = digest(hashed)
    spec["labels"][LABEL + ".config_hash"] = node_hash
    entry = {"rank": rank, "is_head": is_head, "fabric_ip": fabric_ip, "env_common": cluster["env_common"],
             "env_node": dict(sorted(node_env.items())), "env": dict(sorted(env.items())), "containers": [spec],
             "config_hash": node_hash, "state_dir": paths["state_dir"], "models_dir": paths["models_dir"], "paths": paths,
             "ports": nodes_check.node_ports(settings, backend, is_head)}
    entry["writes"] = state_writes(inputs["nodes"][name], paths, commands.state_files(inputs, paths, cluster["non_carry_over_env_vars"]))
    entry["firewall"] = firewall.plan(settings, backend, cluster["expected_ips"], paths) if settings["firewall"] else None
    entry["writes"]["firewall"] = firewall_writes(inputs["nodes"][name], entry["firewall"])
    entry["ring"] = ring_node(inputs, name, paths)
    if is_head or backend == "mp":
        entry["serve"] = {"container": spec["name"], "argv": argv, "command": [commands.LAUNCHER] + argv[2:],
                          "state_file": commands.VLLM_STATE if backend == "ray" else None,
                          "log": commands.VLLM_LOG if backend == "ray" else None, "config_hash": node_hash}
    if is_head:
        entry["helpers"] = {
            "model_fetch": {"name": "%s-model-fetch" % settings["cluster_name"], "argv": commands.model_fetch_argv(
                inputs, name, paths, cluster["model"]["id"], cluster["model"]["revision"])},
            # The head serves its copy to the workers, read-only, on its fabric address, for the copy only.
            "rsync": {"address": fabric_ip, "port": settings["rsync_port"], "url": "rsync://dgx-spark@%s:%d/model/" % (fabric_ip, settings["rsync_port"]),
                      "hosts_allow": " ".join(ip for ip in cluster["expected_ips"] if ip != fabric_ip),
                      "max_connections": len(cluster["expected_ips"])}}
    return entry


def ring_node(inputs, name, paths):
    """A node's ring links (its two ends) and its netplan: what the fabric role installs, validates, applies with a
    rollback armed, and proves by pinging every link; ``differs`` when the node's netplan differs (or was not read)."""
    planned = inputs.get("ring")
    if not planned:
        return None
    content = ring_links.netplan(planned["ends"][name], planned["mtu"])
    ports = ((inputs["nodes"][name].get("roce") or {}).get("roce_devices")) or []
    ends = [dict(end, **ring_links.rdma_port(ports, end["interface"])) for end in planned["ends"][name]]
    return {"ends": ends, "mtu": planned["mtu"], "prefix_len": planned["prefix_len"],
            "netplan": {"path": paths["ring_netplan"], "content": content, "mode": "0600",
                        "differs": differs(inputs["nodes"][name].get("state"), paths["ring_netplan_copy"], content)}}


def decide_changes(inputs, nodes, cluster, head):
    """What the apply step changes, from what the probe found: per container (plan_nodes.container_change), a
    restart of the Ray workers when the head is replaced (a worker's raylet dies with the head it joined), and
    vLLM's restart when its config hash changed (with Ray, any node's change restarts it)."""
    order = [n for n in inputs["order"] if n in nodes]
    if inputs["backend"] == "ray" and head in nodes:
        serve = nodes[head]["serve"]
        serve["config_hash"] = digest({"argv": serve["argv"], "nodes": [nodes[n]["config_hash"] for n in order],
                                       "api_key": inputs.get("api_key_digest")})
        cluster["serve_config_hash"] = serve["config_hash"]
    probed = {n: nodes_check.probed_containers(inputs["nodes"][n]) for n in order}
    for name in order:
        for spec in nodes[name]["containers"]:
            spec_change = "create" if probed[name] is None else nodes_check.container_change(spec, probed[name])
            nodes[name].setdefault("changes", {})[spec["name"]] = spec_change
    cluster["env_drift"] = nodes_check.env_drift(order, inputs["nodes"], nodes)
    head_change = nodes.get(head, {}).get("changes", {}).get(container_name(inputs["settings"], "ray", head))
    joined = nodes_check.join_state(inputs["nodes"].get(head), cluster) if inputs["backend"] == "ray" else None
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
            # A container stopped under a running vLLM ends it by SIGKILL once its init exits: on a GB10 the memory
            # stays pinned until a reboot (fact 3). vLLM is stopped by its process group before its containers change.
            serve["stop_first"] = bool(vllm and vllm.get("running") and changing)
    cluster.setdefault("serve_config_hash", nodes.get(head, {}).get("serve", {}).get("config_hash"))
    launching = any((nodes[n].get("serve") or {}).get("change", "none") != "none" for n in order)
    for name in order:  # before a launch, the memory teardown compares each node's with (fact 3); serve.yml writes it
        found = inputs["nodes"][name].get("memory")
        nodes[name]["writes"]["baseline"] = ({"path": nodes[name]["paths"]["baseline_file"], "mode": "0644",
                                              "content": json.dumps(found, indent=4, sort_keys=True) + "\n"}
                                             if launching and found else None)
    cluster["changes"] = sorted("%s: %s %s" % (n, c, s) for n in order for s, c in nodes[n]["changes"].items() if c != "none")
    # Nothing to start or restart: the image, the folders, the model and the launch steps have nothing to do.
    cluster["apply_needed"] = (bool(cluster["changes"]) or launching
                               or any((nodes[n].get("ring") or {}).get("netplan", {}).get("differs") for n in order)
                               or any(nodes[n]["writes"]["folders"] or nodes[n]["writes"]["files"] or nodes[n]["writes"]["firewall"]["files"]
                                      or nodes[n]["writes"]["firewall"]["enable"] for n in order))
    # The head's probe read Ray: with every node and GPU joined and nothing to change, the join gate is proven already.
    cluster["join_gate_proven"] = bool(joined and joined["ready"] and not cluster["apply_needed"])
