# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's checks of what each node's probe found, before anything changes: Docker and its NVIDIA runtime,
memory pinned by a killed container and orphaned engines (fact 3), balance (fact 4), foreign containers and ports
(fact 15), one image ID (fact 14). A node without probe facts (an offline plan) is not checked."""

from __future__ import annotations

import ipaddress
import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import labels, memory_fit, pulls
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import endpoint_url
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import ray_state
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.model_files import human
from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import parity

GIB = 1024 ** 3


def parse_docker_ps(lines):
    """`docker ps --all --no-trunc --format '{{json .}}'` lines -> [{name, state, labels}]."""
    found = []
    for line in lines or []:
        if not line.strip():
            continue
        row = json.loads(line)
        labels = dict(item.split("=", 1) for item in (row.get("Labels") or "").split(",") if "=" in item)
        found.append({"name": row.get("Names"), "state": row.get("State"), "labels": labels})
    return found


def probed_containers(facts):
    """The containers a node's probe listed, or None when the node was not probed for them."""
    if "containers" in facts:
        return facts["containers"]
    return parse_docker_ps(facts["docker_ps"]) if "docker_ps" in facts else None


def serving_hashes(facts, name, cluster):
    """The config hashes of this cluster's running containers on node ``name`` (the memory plan credits them)."""
    if "serving_hashes" in facts:
        return [h for h in facts["serving_hashes"] if h]
    return [labels.config_hash(c) for c in probed_containers(facts) or []
            if c.get("state") == "running" and labels.of(c, cluster, name) and labels.config_hash(c)]


def parse_listening(lines):
    """`ss -H -t -l -n` lines -> the sorted TCP ports something listens on (any address)."""
    ports = set()
    for line in lines or []:
        fields = line.split()
        if len(fields) >= 4 and fields[3].rsplit(":", 1)[-1].isdigit():
            ports.add(int(fields[3].rsplit(":", 1)[-1]))
    return sorted(ports)


def bind_address(settings, head, facts, findings):
    """Where the endpoint listens on the head, and the address the controller calls: vllm_bind_address, else what the
    head's ansible_host resolves to on the head (the management network users reach), never every interface unless
    the inventory says 0.0.0.0. Returns (bind, advertised); an offline plan that cannot know says so."""
    given, host = settings.get("bind_address"), str(facts.get("ansible_host") or head)
    addresses = facts.get("addresses")
    if given:
        try:
            address = str(ipaddress.IPv4Address(str(given)))
        except ValueError:
            findings.error(head, given, "vllm_bind_address %r is not an IPv4 address; give one of %s's addresses, or 0.0.0.0 "
                           "for every interface" % (given, head))
            return None, host
        if address == "0.0.0.0":
            findings.warn("vllm_bind_address is 0.0.0.0: the endpoint listens on every interface of %s, the management LAN "
                          "included; only the API key guards it" % head)
            return address, host
        if addresses is not None and address not in addresses:
            findings.error(head, address, "vllm_bind_address %s is not an address of %s (it has %s); give one of them, or "
                           "0.0.0.0 for every interface" % (address, head, ", ".join(addresses) or "none"))
        return address, address
    resolved = facts.get("resolved")
    if resolved is None:  # not probed (an offline plan): the name, as the head would resolve it
        return "<%s resolved on %s>" % (host, head) if not _is_ipv4(host) else host, host
    local = [a for a in resolved if addresses is None or a in addresses]
    if not local:
        findings.error(head, host, "%s's ansible_host %s resolves on %s to %s, none of them an address of %s (it has %s); set "
                       "vllm_bind_address to the address users reach the endpoint at"
                       % (head, host, head, ", ".join(resolved) or "nothing", head, ", ".join(addresses or [])))
        return None, host
    if ipaddress.IPv4Address(local[0]).is_loopback:
        findings.warn("%s's ansible_host %s is a loopback address: the endpoint answers only on %s itself; set vllm_bind_address "
                      "to serve others" % (head, host, head))
    return local[0], local[0]


def door_address(inputs, settings, head, client):
    """Where a deployment's front door listens on its head (``bind``, ``advertised``, its ``url``), from where clients
    reach the head (``client``: nodes_check.bind_address's pair). The same, but behind the gateway
    (``inputs["behind_gateway"]``): then the door is a backend that only the cluster reaches, on the head's fabric
    address (the firewall admits the nodes alone there, firewall.reach), and the gateway listens where clients reach."""
    behind = bool(inputs.get("behind_gateway"))
    # With TLS (plan/tls.py), clients name the head as the inventory does (its ansible_host, which its certificate holds),
    # and the head's own requests go to the door's plain listener on its loopback.
    named = ((inputs.get("nodes") or {}).get(head) or {}).get("ansible_host") if settings.get("tls") else None
    advertised = named or client[1]
    if behind and head in (inputs.get("nodes") or {}):
        fabric = str(inputs["nodes"][head].get("fabric_ip"))
        return {"bind": fabric, "advertised": fabric, "url": "http://%s:%d" % (fabric, settings["port"]), "behind_gateway": True,
                "client_bind": client[0], "client_advertised": advertised, "local": "%s:%d" % (fabric, settings["port"]), "loopback": None}
    # ``local``: where the head's own requests reach the door; ``loopback``: its plain listener there, with TLS alone
    loopback = "127.0.0.1:%d" % settings["port"] if settings.get("tls") else None
    local = loopback or "%s:%d" % ("127.0.0.1" if client[0] in (None, "0.0.0.0") else client[0], settings["port"])
    return {"bind": client[0], "advertised": client[1], "url": endpoint_url(settings, advertised), "behind_gateway": False,
            "client_bind": client[0], "client_advertised": advertised, "local": local, "loopback": loopback}


def _is_ipv4(value):
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


def _gib(value):
    return "%.1f GiB" % (value / float(GIB))


def node_ports(settings, backend, is_head):
    """The TCP ports this node's containers listen on, which nothing else may hold."""
    if not is_head:
        return []
    return sorted({settings["port"], settings["ray_port"] if backend == "ray" else settings["master_port"]})


def check_node(name, facts, settings, planned_names, ports, findings):
    """One node's probe facts against the plan; errors name the node and the fix."""
    if "docker" not in facts:
        return
    docker = facts.get("docker")
    if docker is None:
        findings.error(name, None, "%s: no Docker daemon answers (docker info failed); install Docker and start it, and let "
                       "this user use it" % name)
        return
    runtimes = docker.get("runtimes") or []
    if settings["require_nvidia_runtime"] and "nvidia" not in runtimes:
        findings.error(name, runtimes, "%s: Docker has no nvidia runtime (it has %s); install nvidia-container-toolkit and run "
                       "nvidia-ctk runtime configure --runtime=docker, then restart Docker" % (name, ", ".join(runtimes) or "none"))
    memory = facts.get("memory") or {}
    # Either reading shows pinned memory: /proc/meminfo's unaccounted bytes, or CUDA's own free (``memory.cuda``, read
    # through the node's driver where nothing holds the GPU) short of MemFree (seed 002: nvidia-smi 0 MB used, free -g plenty).
    held = memory_fit.pinned(name, memory.get("unaccounted_bytes"), float(settings["unaccounted_limit_gib"]) * GIB,
                             memory.get("mem_free_bytes"), memory.get("cuda"))
    if held:
        findings.error(name, held[0], held[1])
    orphans = [p["pid"] for p in memory.get("vllm_processes") or [] if p.get("orphan")]
    if orphans:
        findings.error(name, orphans, "%s: vLLM engine processes outlived their server and still hold memory: %s. Stop them "
                       "(playbooks/teardown.yml, or kill -TERM those PIDs), then run again" % (name, ", ".join(map(str, orphans))))
    check_disk(name, facts, settings, findings)
    containers = probed_containers(facts) or []
    impostors = sorted(c["name"] for c in containers
                       if c.get("name") in planned_names and not labels.ours(c))
    if impostors:
        findings.error(name, impostors, "%s: container(s) %s use this collection's names but were not made by it; they are left "
                       "alone. Remove or rename them (docker rm -f NAME) if they are stale, then run again" % (name, ", ".join(impostors)))
    # Ports this deployment's own running containers hold are its own; another deployment of ours (another inventory
    # on the same nodes, or this one's before vllm_deployments) would make its Ray fail half-way through the launch, so
    # it is named before anything changes. While this deployment runs here, the ports are taken to be its own.
    running = [(c.get("labels") or {}).get(labels.CLUSTER) for c in containers
               if c.get("state") == "running" and labels.ours(c) and (c.get("labels") or {}).get(labels.NODE) == name]
    taken = sorted(set(ports) & set(parse_listening(facts.get("listening"))))
    if not taken or settings["cluster_name"] in running:
        return
    others = sorted({cluster or "unnamed" for cluster in running} - {settings["cluster_name"]})
    if others:
        findings.error(name, taken, "%s: port(s) %s are taken while another deployment of this collection runs here (%s). "
                       "Tear it down (playbooks/teardown.yml with the inventory that serves it), then run again; to serve "
                       "both on these nodes, list them in one inventory's vllm_deployments, which gives each its own ports"
                       % (name, ", ".join(map(str, taken)), ", ".join(others)))
    else:
        findings.error(name, taken, "%s: port(s) %s are held by a program this collection did not start (none of its containers "
                       "runs here). Stop it (ss -ltnp shows which), or choose other ports (vllm_port), then run again"
                       % (name, ", ".join(map(str, taken))))


def check_disk(name, facts, settings, findings):
    """The filesystems a launch writes to (the state folder: vLLM's log and the run files; Docker's data root: Ray's
    session files and vLLM's compile caches, inside the containers) keep the launch's reserve free. A full one fails
    the launch half-way, or later with "No space left on device" in a log nobody reads."""
    reserve = int(float(settings["launch_disk_reserve_gb"]) * 1e9)
    short = {}
    for path, found in sorted((facts.get("disk") or {}).items()):
        if int(found.get("free_bytes") or 0) < reserve:
            short.setdefault((found.get("at"), found.get("free_bytes")), []).append(path)
    for (dummy, free), paths in sorted(short.items(), key=lambda item: item[1]):
        findings.error(name, free, "%s: the filesystem of %s has %s free, and a launch needs %s there (vLLM's log and run "
                       "files; on Docker's data root, Ray's session files and compile caches). Free space on it (docker "
                       "system prune for Docker's), or lower vllm_launch_disk_reserve_gb, then run again"
                       % (name, " and ".join(paths), human(int(free or 0)), human(reserve)))


def check_balance(order, nodes, settings, findings):
    """Free memory must not differ much across nodes: the slow rank times out (fact 4). What a running deployment of
    this cluster holds on a node (its ranks, as nvidia-smi lists them) counts as free there: the plan keeps it for the
    same deployment, or stops it cleanly before starting again (a rank left behind by a head that died, say)."""
    available = {}
    for n in order:
        memory = nodes[n].get("memory")
        if "docker" not in nodes[n] or not memory:
            continue
        ours = bool(serving_hashes(nodes[n], n, settings["cluster_name"]))
        available[n] = int(memory.get("mem_available_bytes") or 0) + (int(memory.get("gpu_process_bytes") or 0) if ours else 0)
    if len(available) < 2:
        return
    spread = max(available.values()) - min(available.values())
    if spread > float(settings["balance_tolerance_gib"]) * GIB:
        findings.error("all", {n: _gib(v) for n, v in available.items()},
                       "free memory is unbalanced across nodes (%s); the slow rank times out. Free memory or drop caches on "
                       "the node with the least, or raise preflight_balance_tolerance_gib"
                       % ", ".join("%s %s" % (n, _gib(v)) for n, v in available.items()))


def check_devices(order, nodes, paths, findings):
    """Every node must hold the devices the container spec passes (--device): Docker passes an absent one with an error
    only at create, and an empty folder without a word; NCCL then falls back to sockets on that node alone."""
    probed = {n: (nodes[n].get("devices") or {}) for n in order if "devices" in nodes[n]}
    for path in paths:
        found = {n: d.get(path) for n, d in probed.items()}
        having = sorted(n for n, names in found.items() if names)
        for name in sorted(n for n, names in found.items() if not names):
            findings.error(name, found[name], "%s: %s %s, so its container would get no RDMA device and NCCL would fall back to "
                           "sockets on this node alone%s. Load the ConnectX driver and check the ports (rdma link, "
                           "ibdev2netdev), or remove %s from spark_container_devices on every node, then run again"
                           % (name, path, "is missing" if found[name] is None else "holds no device",
                              " (%s hold %s)" % (", ".join(having), ", ".join(found[having[0]])) if having else "", path))


def check_images(order, nodes, findings, image=None, build=False, source="stream"):
    """Every node must run the head's image ID (fact 14); the head must hold it unless the image role builds it there.
    Returns the nodes that lack it or hold another ID under the same name (an older pull, say): the image role streams
    the head's to them, and every container's hash, which carries the ID, moves with it. With ``source`` pull, each
    node pulled what it lacked before the probe (a check run only says it would), and one holding another ID is refused."""
    head = order[0] if order else None
    if head and "docker" in nodes[head] and nodes[head].get("docker") and not nodes[head].get("image_id") and not build and source != "pull":
        findings.error(head, image, "The head %s does not hold %s; pull or load it there, set image_source: pull to pull it on "
                       "every node, or set image_build with image_base to build it" % (head, image))
    wanted = nodes[head].get("image_id") if head else None
    if source == "pull":
        pulls.other_ids([n for n in order if "docker" in nodes[n]], nodes, wanted, findings)
    return [n for n in order if "docker" in nodes[n] and (not nodes[n].get("image_id") or (wanted and nodes[n]["image_id"] != wanted))]


def env_drift(order, facts, nodes):
    """A container of ours that would be kept (same config hash) but lacks a planned variable, or holds another value
    (changed behind our back, or made by hand with our labels), is recreated: the re-run repairs it (fact 7). Returns
    what was found, one line per variable, for the plan's text."""
    found = []
    for name in order:
        envs = facts[name].get("container_env") or {}
        for spec in nodes[name]["containers"]:
            if nodes[name]["changes"][spec["name"]] not in ("none", "start") or spec["name"] not in envs:
                continue
            problems = parity.check({name: nodes[name]}, {name: [parity.parse_env_list(envs[spec["name"]])]})
            problems = [p.split(". Recreate", 1)[0] for p in problems if p.startswith(name + ": ")]
            if problems:
                nodes[name]["changes"][spec["name"]] = "recreate"
                found.extend("%s; %s is recreated" % (p, spec["name"]) for p in problems)
    return found


def check_kept_env(order, facts, nodes, findings):
    """Containers kept as they are must agree on the variables the plan does not set but that change kernels (from an
    image, say): a value baked into one node's container wins silently, so it is refused before vLLM is launched."""
    planned, actual = {}, {}
    for name in order:
        envs = facts[name].get("container_env") or {}
        kept = [s["name"] for s in nodes[name]["containers"] if nodes[name]["changes"][s["name"]] in ("none", "start", "restart")]
        if kept and all(k in envs for k in kept):
            planned[name] = nodes[name]
            actual[name] = [parity.parse_env_list(envs[k]) for k in kept]
    problems = parity.check(planned, actual) if planned else []
    if problems:
        findings.error("all", None, "Environment parity failed; vLLM is not launched: %s" % "; ".join(problems))


def container_change(spec, probed):
    """What the apply step does to one planned container, given the probed one of that name.

    none: it runs with the planned config hash; create: there is none; start: it exists with the planned hash but
    does not run; recreate: it carries another hash (or none).
    """
    found = [c for c in probed or [] if c.get("name") == spec["name"]]
    if not found:
        return "create"
    current = found[0]
    if labels.config_hash(current) != labels.config_hash(spec):
        return "recreate"
    return "none" if current.get("state") == "running" else "start"


def planned_change(spec, enabled, probed, findings, host):
    """What the apply step does to a container beside a deployment's ranks (a front door, the gateway, Prometheus):
    none, create, start, recreate (container_change), or remove (off, and one of ours runs). One of that name that is
    not ours is left alone, and refused when ours must run there."""
    found = [c for c in probed or [] if c.get("name") == spec["name"]]
    if found and not labels.ours(found[0]):
        if enabled:
            findings.error(host, spec["name"], "%s: a container named %s runs here but was not made by this collection; it "
                           "is left alone. Remove or rename it (docker rm -f %s), then run again" % (host, spec["name"], spec["name"]))
        return "none"
    if not enabled:
        return "remove" if found else "none"
    if probed is None:  # not probed (an offline plan): what a first run does
        return "create"
    return container_change(spec, probed)


def join_state(head_facts, cluster):
    """The join gate as the head's probe found it (ray_state.evaluate against the nodes and GPUs the plan expects), or
    None when Ray was not read there (not running, no Ray backend, an offline plan)."""
    found = (head_facts or {}).get("ray")
    if not found or "error" in found:
        return None
    return ray_state.evaluate(found, cluster["expected_ray_nodes"], cluster["expected_ray_gpus"], cluster["expected_ips"])


def check_probed(order, nodes, settings, findings):
    """Names the nodes the probe did not read (unreachable, or their probe failed above) unless the plan is offline;
    True when there is one, since every later check would only guess about them."""
    missing = [] if settings["offline"] else [n for n in order if "memory" not in (nodes.get(n) or {})]
    for name in missing:
        findings.error(name, None, "%s was not probed: it was unreachable, its probe failed, or the probe stopped at another "
                                   "node's failure (see above). Make every node reachable (ssh to its ansible_host), then run "
                                   "again; nothing was changed" % name)
    return bool(missing)
