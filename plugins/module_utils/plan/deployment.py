# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One deployment's plan, as if it were the whole cluster (module_utils/plan/planner.py plans every deployment this way
and checks them together). Pure; no I/O.

Per node: rank, fabric IP, environment (the part identical on every rank and the per-node part), paths, ports, every
container (spec, command, config hash, and the change the apply step makes to it), the serve command, the firewall
and the supervisor. For the deployment: backend, parallel sizes, memory plan, vLLM argv, endpoint URLs, the model and
its helpers. Its parts, one concern each:

- base: defaults, names, paths, the findings collector
- inventory: groups, order, fabric IPs, parallel sizes
- env: transport and environment
- commands: vLLM flags and argv, ray start, container specs, helpers
- memory: the memory plan's adapter
- nodes: checks of the probed nodes; changes: what the apply step changes on each node
"""

from __future__ import annotations

import copy

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import bench
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import boot
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import changes
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import code
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import compile_cache
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import commands
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import door
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import env as environment
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import firewall
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import gateway
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import labels
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import monitoring
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import nccl_library
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import nodes as nodes_check
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import records
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import ring as ring_links
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import tls
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import (
    Findings, container_name, digest, mounts, node_paths, normalize_settings, reports)
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.inventory import (
    canonical_flags, check_flags, check_head, check_inventory, check_model, parallel_sizes, ring_plan, utilization)
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.memory import memory, need as memory_need
from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import canary


def device_paths(settings):
    """The host side of each --device the containers get; each node's probe lists what is there."""
    return [device.split(":")[0] for device in settings["devices"] or []]


def probe_paths(paths):
    """The folders and files of a node's state the probe looks for (the plan writes what is missing or differs)."""
    files = ("launcher", "non_carry_over_file", "do_not_track_file", "firewall_rules", "firewall_unit", "firewall_wants", "ring_netplan_copy",
             "api_key_file")
    return [f["path"] for f in paths["folders"]] + [paths[k] for k in files] + [firewall.NFT]


def probe_args(inputs, settings, result, node, paths):
    """What the probe reads on ``node`` for this deployment (spark_node_info's options of a deployment): its image (read
    whole on the head), containers, vLLM's state, model, the state files the plan would write and the supervisor's, the
    head's record, the kept image tags, the devices, the head's Ray and its name to resolve, the disk a launch writes."""
    head, ray = node == result["head"], inputs.get("backend") == "ray"
    container, supervisor = container_name(settings, "ray" if ray else "vllm", node), boot.paths(paths["state_dir"], settings["cluster_name"])
    args = {"gpu_memory_utilization": result["gpu_memory_utilization"], "memory_need": memory_need(inputs),
            "image": settings["image"], "read_image": head,
            "image_cache_dir": paths["image_info_cache"], "gpus": result["image"]["gpus"], "containers": [container],
            "serve_container": container, "serve_state_file_host": paths["vllm_state_file"],
            "models_dir": paths["models_dir"], "model": result["model"]["id"], "revision": result["model"]["revision"],
            "paths": probe_paths(paths) + boot.probe_paths(supervisor) + [f for f in [settings["monitoring"].get("textfile_dir")] if f],
            "records": [paths[key] for dummy, key in records.RECORDS] if node in records.keepers(result["nodes_order"]) else [],
            "supervisor": {"paths": supervisor, "unit_name": boot.unit_name(settings["cluster_name"])},
            "kept_reference": records.kept_reference(settings["cluster_name"]), "devices": device_paths(settings),
            "firewall": {"table": paths["firewall_table"], "record": paths["firewall_record"]} if settings["firewall"] else None,
            "ray_container": container if head and ray else None, "disk": [paths["state_dir"]],
            "door_image": door.image(settings) if head else None,
            "resolve": ((inputs["nodes"].get(node) or {}).get("ansible_host") or node) if head else None}
    return {k: v for k, v in args.items() if v not in (None, "")}


def cluster_paths(inputs):
    """What needs no profile: every node's paths and container names, the endpoint, where the reports go. The
    playbooks that run without a profile (teardown.yml, status.yml) take their names and paths from it."""
    settings = normalize_settings(inputs.get("settings"))
    findings = Findings()
    order, head = inputs.get("order", []), (inputs.get("head_hosts") or [None])[0]
    check_head(inputs.get("head_hosts"), findings)
    where = nodes_check.door_address(inputs, settings, head, nodes_check.bind_address(settings, head, inputs["nodes"].get(head) or {}, Findings()))
    url = where["url"]
    logs = reports(settings)["logs"]
    result = {"stage": "paths", "head": head, "nodes_order": order,
              "nodes": {n: {"is_head": n == head, "fabric_ip": str(inputs["nodes"][n].get("fabric_ip")), "paths": paths,
                            "containers": containers,
                            # each rank's logs on the node (logs.yml reads their last lines, status.yml names them)
                            "logs": commands.log_reads(containers, n == head),
                            "boot": boot.installed(paths["state_dir"], settings["cluster_name"], {
                                "table": paths["firewall_table"], "record": paths["firewall_record"],
                                "unit_name": firewall.unit_name(settings["cluster_name"])} if settings["firewall"] else None),
                            # where teardown.yml copies the node's logs on the controller
                            "logs_dest": "%s/%s" % (logs, n) if logs else None,
                            # what lists this deployment's containers on the node, one JSON object a line (state.yml)
                            "ps_argv": ["docker", "ps", "--all", "--no-trunc", "--format", "{{json .}}"]
                            + [a for f in labels.filters(settings["cluster_name"], n) for a in ("--filter", f)]}
                        for n, paths, containers in (
                            (n, node_paths(settings, n, None), {role: container_name(settings, role, n) for role in ("ray", "vllm")})
                            for n in order)},
              "cluster": {"name": settings["cluster_name"], "artifacts_dir": settings["artifacts_dir"],
                          "reports": reports(settings), "records_on": records.keepers(order),
                          "expected_ips": [str(inputs["nodes"][n].get("fabric_ip")) for n in order],
                          "endpoint": {"url": url, "health_url": url + "/health", "api_url": url + "/v1",
                                       "local_health_url": "http://%s/health" % where["local"],
                                       "api_key_file": settings["api_key_file"], "behind_gateway": where["behind_gateway"],
                                       "client_bind_address": where["client_bind"], "client_address": where["client_advertised"],
                                       "client": door.client(settings, url)}}}
    return finish(result, findings)


def plan_deployment(inputs, stage="full"):
    """One deployment's plan. ``stage="inventory"`` checks only what needs no probe facts, and names the paths to
    probe."""
    inputs = copy.deepcopy(inputs)
    settings = inputs["settings"] = normalize_settings(inputs.get("settings"))
    findings = Findings()
    settings["monitoring"], wrong = monitoring.settings(settings.get("monitoring"), monitoring.reserved(settings))
    for message in wrong:
        findings.error("all", None, message)
    if settings["monitoring"]["enabled"] and not settings["boot_start"]:
        findings.warn("vllm_monitoring: each node's figures are served by its supervisor, which vllm_boot_start: false "
                      "turns off; Prometheus scrapes vLLM only")
    if gateway.enabled((settings.get("gateway") or {}).get("enabled"), 1):
        findings.error("all", True, "vllm_gateway: true puts the gateway in front of vllm_deployments, and this inventory "
                       "has none; list the one deployment there (docs/multi-model.md), or leave vllm_gateway out")
    canonical_flags(inputs, findings)
    check_inventory(inputs, findings)
    check_model(inputs, findings)
    inputs["ring"] = ring_plan(inputs, findings)
    order, head = inputs.get("order", []), (inputs.get("head_hosts") or [None])[0]
    if not settings.get("firewall_reach"):  # planned alone (no planner around it): its own nodes and door are the cluster's
        settings["firewall_reach"] = firewall.reach([{"head": head, "hosts": order}], settings,
                                                    {n: inputs["nodes"].get(n) or {} for n in order}, findings)
    for facts in inputs["nodes"].values():  # docker ps is parsed once; every check reads the containers
        if "docker_ps" in facts and "containers" not in facts:
            facts["containers"] = nodes_check.parse_docker_ps(facts["docker_ps"])
    profile = inputs["profile"]
    paths = {n: node_paths(settings, n, profile["model"]["id"]) for n in order}
    result = {"stage": stage, "profile": profile["name"], "backend": inputs.get("backend"), "head": head, "nodes_order": order,
              "parallel": parallel_sizes(inputs, findings), "gpu_memory_utilization": utilization(inputs, findings),
              "model": {"id": profile["model"]["id"], "served_name": profile["model"].get("served_name"),
                        "revision": commands.model_revision(inputs)},
              "image": {"name": settings["image"], "gpus": commands.gpus(settings)},
              "overrides": {k: v for k, v in (inputs.get("overrides") or {}).items() if v not in (None, "")},
              "profile_file": inputs.get("profile_file"),
              "nodes": {n: {"is_head": n == head, "paths": paths[n]} for n in order}}
    for n in order:
        result["nodes"][n]["probe"] = probe_args(inputs, settings, result, n, paths[n])
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
    inputs["endpoint"] = nodes_check.door_address(inputs, settings, head, nodes_check.bind_address(settings, head, inputs["nodes"][head], findings))
    use_roce = environment.transport(inputs, findings)
    node_env = environment.node_environment(inputs, findings, use_roce)
    inputs["nccl_library"] = nccl_library.plan(settings, (inputs.get("image_info") or {}).get("nccl"),
                                               {n: inputs["nodes"][n].get("system_nccl") for n in order}, order, findings)
    common = dict(environment.common_environment(inputs, result["parallel"], use_roce), **inputs["nccl_library"]["env"])
    flags, max_len = commands.serve_flags(inputs, findings, result["parallel"])
    check_flags(inputs, findings, flags, commands.planned_flags(inputs, result["parallel"], result["gpu_memory_utilization"], max_len))
    inputs["code_pins"] = code.check(flags, [("profile %s: env" % profile["name"], profile.get("env")),
                                             ("vllm_extra_env", inputs.get("extra_env"))], settings.get("code_pins"), findings)

    def argv_of(rank):
        return commands.serve_argv(inputs, result["parallel"], flags, result["gpu_memory_utilization"], max_len, rank,
                                   str(inputs["nodes"][head]["fabric_ip"]))

    head_argv = argv_of(0)
    cache = compile_cache.folder((inputs.get("image_info") or {}).get("id"), profile["model"]["id"], result["model"]["revision"],
                                 head_argv, common)
    common.update(compile_cache.environment(cache))  # every rank's, so every node compiles into its own copy of it
    inputs["compile_cache"] = cache
    cluster = cluster_section(inputs, result, use_roce, common, head_argv, environment.non_carry_over(node_env))
    cluster["compile_cache"] = {"folder": cache, "mount": compile_cache.MOUNT if cache else None}
    cluster["nccl_library"] = inputs["nccl_library"]
    result["nodes"] = {n: plan_node(inputs, n, rank, head, cluster, node_env[n], argv_of) for rank, n in enumerate(order)}
    changes.decide_changes(inputs, result["nodes"], cluster, head)
    cluster["door"] = door.section(settings, head, result["nodes"][head]["paths"], inputs["endpoint"], inputs.get("api_key_digest"),
                                   nodes_check.probed_containers(inputs["nodes"][head]), findings,
                                   image_present=bool((inputs["nodes"].get(head) or {}).get("door_image_id")), tls_digest=inputs.get("tls_digest"))
    if cluster["door"]["change"] != "none":  # the door alone changes vLLM nothing: the apply starts it with the rest
        cluster["changes"].append("%s: %s %s" % (head, cluster["door"]["change"], cluster["door"]["container"]["name"]))
        cluster.update(apply_needed=True, join_gate_proven=False)
    nodes_check.check_kept_env(order, inputs["nodes"], result["nodes"], findings)
    cluster["memory"] = memory(inputs, findings, result["parallel"], flags, result["gpu_memory_utilization"], max_len,
                               {n: result["nodes"][n]["config_hash"] for n in order}, common)
    cluster["canary"] = {"settings": canary.settings(profile), "basis": canary.basis({"cluster": cluster, "model": result["model"]})}
    cluster["bench"] = bench.target(cluster, result["nodes"][head], profile, max_len, result["nodes"][head]["paths"]["api_key_file"],
                                    inputs["nodes"][head].get("model_copy"))
    for name in order:  # the supervisor that brings each node back after a boot: the hashes and memory are final now
        result["nodes"][name]["boot"] = boot.plan(settings, inputs["backend"], name, result["nodes"][name], cluster,
                                                  firewall.unit_name(settings["cluster_name"]) if settings["firewall"] else None)
        result["nodes"][name]["boot"]["hold_first"] = boot.hold_first(result["nodes"][name]["boot"], inputs["nodes"][name].get("state"))
    for name in order:
        nodes_check.check_node(name, inputs["nodes"][name], settings, [c["name"] for c in result["nodes"][name]["containers"]],
                               result["nodes"][name]["ports"], findings)
        monitoring.check_textfile(name, inputs["nodes"][name], settings, findings)
    for name in order if settings["firewall"] else []:
        firewall.check(name, inputs["nodes"][name], findings)
    nodes_check.check_balance(order, inputs["nodes"], settings, findings)
    nodes_check.check_devices(order, inputs["nodes"], device_paths(settings), findings)
    result.update(image_source=settings["image_source"], image_missing_on=nodes_check.check_images(
        order, inputs["nodes"], findings, settings["image"], settings["image_build"], settings["image_source"]))
    # The workers the head streams the image to (a built one reaches all; none with pull): image role's reach.yml checks each.
    result["image_stream_to"] = [n for n in order[1:] if settings["image_source"] != "pull" and (settings["image_build"] or n in result["image_missing_on"])]
    result.update(cluster=cluster, deviations=profile.get("deviations") or [])
    for name in order:
        result["nodes"][name]["restore"] = changes.restore_steps(result, name, inputs["backend"])
    result = finish(result, findings, inputs)  # the extra flags and env the record holds, when the plan is good
    # What the cluster keeps is the truth (an AWX job's project copy has none): the head's records, else the next node's.
    cluster["records_on"] = records.keepers(order)
    cluster.update(records.kept(result, {n: inputs["nodes"][n] for n in order}))
    cluster["commit"] = records.commit_changes(result, {n: inputs["nodes"][n] for n in order})
    return result


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
    url = inputs["endpoint"]["url"]
    bind = inputs["endpoint"]["bind"]
    local = inputs["endpoint"]["local"]  # where the head's own requests reach its door
    revision = result["model"]["revision"]
    return {
        "name": settings["cluster_name"], "image": settings["image"], "image_id": image.get("id"), "vllm_version": image.get("version"),
        "kept_image": records.kept_tag(settings["cluster_name"], image.get("id")), "images_kept": settings["images_kept"],
        "kept_reference": records.kept_reference(settings["cluster_name"]),
        "transport": "roce" if use_roce else "socket", "nccl_strict": bool(settings["nccl_strict"] and use_roce),
        "expected_ray_nodes": len(order) if backend == "ray" else None,
        "expected_ray_gpus": len(order) * settings["gpus_per_node"] if backend == "ray" else None,
        "expected_ips": [str(inputs["nodes"][n]["fabric_ip"]) for n in order], "head_ip": head_ip,
        "ray_address": "%s:%d" % (head_ip, settings["ray_port"]) if backend == "ray" else None,
        "ray_token_file": settings["ray_token_file"] if backend == "ray" else None,  # the controller's copy (every node gets it)
        "non_carry_over_env_vars": non_carry, "env_common": dict(sorted(common.items())), "vllm_argv": argv,
        "hash": digest({"image": image.get("id") or settings["image"], "common": common, "backend": backend, "head_ip": head_ip,
                        "parallel": result["parallel"], "settings": {k: settings[k] for k in (
                            "network_mode", "ipc_mode", "shm_size", "devices", "gpus", "capabilities", "ulimits", "ray_port")}}),
        "artifacts_dir": settings["artifacts_dir"], "reports": reports(settings), "mounts": mounts(), "image_build": settings["image_build"],
        "endpoint": {"url": url, "port": settings["port"], "health_url": url + "/health", "models_url": url + "/v1/models",
                     "api_url": url + "/v1",
                     "bind_address": bind,
                     "local_address": local,
                     "local_health_url": "http://%s/health" % local,
                     "served_model_name": profile["model"].get("served_name") or profile["model"]["id"],
                     "api_key_env": "VLLM_API_KEY", "api_key_file": settings["api_key_file"],
                     "behind_gateway": inputs["endpoint"]["behind_gateway"],
                     "client_bind_address": inputs["endpoint"]["client_bind"], "client_address": inputs["endpoint"]["client_advertised"],
                     # where clients reach its model, as the verification, a run that changes nothing and status.yml ask
                     # it: its own door, or the gateway in front of it (shared.through_gateway)
                     "client": door.client(settings, url),
                     # what a run that changes nothing asks of it (vllm_endpoint_info's endpoints, with the others at once)
                     "check": {"name": settings["cluster_name"], "url": url, "api_key_file": settings["api_key_file"],
                               "model": profile["model"].get("served_name") or profile["model"]["id"], "ca_file": tls.ca_file(settings)}},
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
        spec = commands.container_spec(inputs, name, "ray", env, paths, commands.ray_command(inputs, fabric_ip, is_head, cluster["head_ip"]),
                                       "ray-head" if is_head else "ray-worker")
    else:
        spec = commands.container_spec(inputs, name, "vllm", env, paths, commands.launch(argv, inputs["code_pins"]), "vllm")
    # The image by its ID where known: another name of the same image (the tag an upgrade's rollback plans by) is the
    # same deployment, and a tag moved to another image is not.
    hashed = {"cluster": cluster["hash"], "containers": [dict(spec, image=cluster["image_id"] or spec["image"])]}
    if (inputs.get("nccl_library") or {}).get("builds", {}).get(name):  # a new system NCCL build is loaded by new containers
        hashed["system_nccl"] = inputs["nccl_library"]["builds"][name]
    if backend == "ray" and inputs.get("ray_token_digest"):  # each node's Ray reads the token when its container starts
        hashed["ray_token"] = inputs["ray_token_digest"]
    node_hash = digest(hashed)
    spec["labels"][labels.CONFIG_HASH] = node_hash
    entry = {"rank": rank, "is_head": is_head, "fabric_ip": fabric_ip, "env_common": cluster["env_common"],
             "env_node": dict(sorted(node_env.items())), "env": dict(sorted(env.items())), "containers": [spec],
             "config_hash": node_hash, "state_dir": paths["state_dir"], "models_dir": paths["models_dir"], "paths": paths,
             "ports": nodes_check.node_ports(settings, backend, is_head)}
    entry["writes"] = changes.state_writes(inputs["nodes"][name], paths, commands.state_files(inputs, paths, cluster["non_carry_over_env_vars"]))
    # A ring's nodes reach each other from their links' addresses too (NCCL's and torch's sockets over the links).
    links = [link["subnet"] for link in (inputs.get("ring") or {}).get("links") or []]
    entry["firewall"] = firewall.plan(settings, backend, cluster["expected_ips"], paths, name, links) if settings["firewall"] else None
    entry["writes"]["firewall"] = changes.firewall_writes(inputs["nodes"][name], entry["firewall"])
    entry["ring"] = ring_node(inputs, name, paths)
    entry["stale_models_argv"] = commands.stale_models_argv(settings, name, paths)
    entry["image_stream"] = None if is_head else commands.image_stream(settings, name, fabric_ip, inputs["nodes"][name].get("ssh_user"))
    if is_head or backend == "mp":
        entry["serve"] = {"container": spec["name"], "argv": argv, "command": commands.serve_command(argv, cluster["ray_address"], inputs["code_pins"]),
                          "state_file": commands.VLLM_STATE if backend == "ray" else None,
                          "log": commands.VLLM_LOG if backend == "ray" else None, "config_hash": node_hash}
    if is_head:
        entry["helpers"] = {
            "model_fetch": {"name": "%s-model-fetch" % settings["cluster_name"], "argv": commands.model_fetch_argv(
                inputs, name, paths, cluster["model"]["id"], cluster["model"]["revision"])},
            # The head serves its copy to the workers, read-only, on its fabric address, for the copy only.
            "rsync": {"address": fabric_ip, "port": settings["rsync_port"], "url": "rsync://dgx-spark@%s:%d/model/" % (fabric_ip, settings["rsync_port"]),
                      "daemon": commands.rsync_daemon(paths),
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
                        "differs": changes.differs(inputs["nodes"][name].get("state"), paths["ring_netplan_copy"], content)}}
