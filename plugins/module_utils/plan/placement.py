# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several deployments on one cluster (``vllm_deployments``): each a set of nodes serving its own model. Pure; no I/O.

A big MoE model spans some Sparks while a small fast one (a draft, an embedder, a coder) sits on another Spark or
shares a node. Each deployment is planned on its own by the planner, as if it were the whole cluster, under a name of
its own (``<cluster>-<deployment>``: its containers, state folder, firewall table and supervisor) and with ports of its
own. What no single plan can see is checked here, across them, before anything changes:

- names: a deployment's name is part of every name it owns, so two deployments that spell the same name collide;
- ports: on a node that two deployments share, every port one listens on (vLLM's API, Ray's GCS and every port Ray
  pins, the torch rendezvous of the mp backend, the head's rsync for the model copy, the node figures) must be free of
  the other's. Each deployment gets its own by default (``port + 1 + i``, Ray's moved by ``RAY_OFFSET_STEP x i``),
  and the gateway takes the cluster's own ``vllm_port``: the URL clients knew stays theirs;
- memory: each plan counts on the node's whole MemAvailable; on a shared node the deployments' requests are summed,
  and what is left to the OS must stay above the floor (a starved Spark stops answering SSH, fact 21).

An inventory without ``vllm_deployments`` is one deployment under the cluster's own name (``whole``), with the
cluster's own names, ports, key and reports: the plan has one shape whatever the inventory lists.
"""

from __future__ import annotations

import re

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import firewall, memory_fit

GIB = memory_fit.GIB
# A deployment's name joins the cluster's (container names, folders, the firewall table): short, a-z, 0-9 and '-'.
NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,14}[a-z0-9])?$")
# Ray pins 6800-6805 and 10001-10101 (firewall.RAY_PORTS); the i-th deployment's Ray moves by this much x i.
RAY_OFFSET_STEP = 1000
KEYS = ("name", "profile", "profile_file", "nodes", "backend", "served_name", "port", "ray_port", "master_port", "rsync_port",
        "ray_ports_offset", "overrides", "extra_flags", "extra_env")
# The settings each deployment sets for itself; the rest of the cluster's settings are shared.
OWN = ("port", "ray_port", "master_port", "rsync_port", "ray_ports_offset")


def key_file(cluster_key_file, name):
    """The controller's file of a deployment's own vLLM key, beside the cluster's (which the gateway's clients use):
    only the gateway holds the backends' keys. The preflight role makes it before planning (roles/preflight)."""
    return "%s-%s" % (cluster_key_file, name) if cluster_key_file else None


def whole(settings, inputs):
    """The one deployment of an inventory without ``vllm_deployments``: the whole cluster, under its own name. Its
    inputs are the inventory's as they are (planner_inputs): its settings (containers, ports, key and reports are those
    it always had), profile, backend and overrides, and its groups and head checked as they are."""
    return {"name": settings["cluster_name"], "listed": False, "hosts": list(inputs.get("order") or []),
            "head": (inputs.get("head_hosts") or [None])[0]}


def hosts_of(item, groups, findings, label):
    """A deployment's nodes, its head first: a group's hosts, or a list of hosts of spark_cluster."""
    nodes = item.get("nodes")
    cluster = list(groups.get("spark_cluster") or [])
    if isinstance(nodes, str):
        if nodes not in groups:
            findings.error("all", nodes, "%s: nodes %r is not a group of the inventory; name a group, or list the hosts "
                           "(the first heads the deployment)" % (label, nodes))
            return []
        if nodes == "spark_cluster":  # the cluster's own head first, as a single deployment has it
            heads = [h for h in groups.get("spark_head") or [] if h in cluster][:1]
            hosts = heads + [h for h in cluster if h not in heads]
        else:
            hosts = [h for h in groups[nodes] if h in cluster]
    elif isinstance(nodes, list) and nodes:
        hosts = [str(h) for h in nodes]
    else:
        findings.error("all", nodes, "%s: nodes must be a group name or a list of hosts (the first heads the deployment)" % label)
        return []
    outside = [h for h in hosts if h not in cluster]
    if outside:
        findings.error(outside[0], outside, "%s: %s not in spark_cluster; a deployment runs on the cluster's nodes only"
                       % (label, ", ".join(outside)))
        return []
    twice = sorted({h for h in hosts if hosts.count(h) > 1})
    if twice:
        findings.error(twice[0], twice, "%s lists %s more than once; each node holds one rank" % (label, ", ".join(twice)))
        return []
    return hosts


def expand(deployments, settings, groups, findings):
    """Each listed deployment as the planner takes it: its name under the cluster's, its nodes (head first), its own
    ports and its own profile, backend and overrides. Errors name the deployment, the value and the fix."""
    entries, names = [], {}
    if not isinstance(deployments, list):
        findings.error("all", deployments, "vllm_deployments must be a list of deployments (docs/multi-model.md)")
        return []
    for index, item in enumerate(deployments):
        label = "vllm_deployments[%d]" % index
        if not isinstance(item, dict):
            findings.error("all", item, "%s must be a mapping with name, profile (or profile_file) and nodes" % label)
            continue
        name = str(item.get("name") or "")
        label = "deployment %s" % name if name else label
        unknown = sorted(set(item) - set(KEYS))
        if unknown:
            findings.error("all", unknown, "%s: unknown key(s) %s; a deployment takes %s" % (label, ", ".join(unknown), ", ".join(KEYS)))
        if not NAME.match(name):
            findings.error("all", name, "%s: name %r must be 1-16 characters of a-z, 0-9 and '-' (it becomes part of its "
                           "containers' and folders' names)" % (label, name))
        elif name in names:
            findings.error("all", name, "deployments %d and %d are both named %s; give each its own name" % (names[name], index, name))
        names.setdefault(name, index)
        if not item.get("profile") and not item.get("profile_file"):
            findings.error("all", name, "%s has no profile: set its profile (a name) or profile_file" % label)
        hosts = hosts_of(item, groups, findings, label)
        if NAME.match(name) and len(settings["cluster_name"]) + 1 + len(name) > 40:
            findings.error("all", name, "%s: %s-%s, the name its containers and folders take, is over 40 characters; shorten "
                           "vllm_cluster_name or the deployment's name" % (label, settings["cluster_name"], name))
        own = {"cluster_name": "%s-%s" % (settings["cluster_name"], name),
               "port": settings["port"] + 1 + index, "ray_port": settings["ray_port"] + RAY_OFFSET_STEP * index,
               "master_port": settings["master_port"] + index, "rsync_port": settings["rsync_port"] + index,
               "ray_ports_offset": RAY_OFFSET_STEP * index, "api_key_file": key_file(settings.get("api_key_file"), name),
               # its plan.json, summary, logs, canary reference and last-known-good record, apart from the others'
               "artifacts_dir": "%s/%s" % (settings["artifacts_dir"], name) if settings.get("artifacts_dir") else None}
        for key in ("overrides", "extra_flags", "extra_env"):
            if not isinstance(item.get(key) or {}, dict):
                findings.error("all", item[key], "%s: %s must be a mapping, got %r" % (label, key, item[key]))
                item = dict(item, **{key: {}})
        for key in OWN:
            if item.get(key) not in (None, ""):
                try:
                    own[key] = int(item[key])
                except (TypeError, ValueError):
                    findings.error("all", item[key], "%s: %s %r is not a port number" % (label, key, item[key]))
        entries.append({"name": name, "listed": True, "index": index, "hosts": hosts, "head": hosts[0] if hosts else None,
                        "profile": item.get("profile"), "profile_file": item.get("profile_file"), "backend": item.get("backend"),
                        "served_name": item.get("served_name"),
                        "overrides": dict(item.get("overrides") or {}), "extra_flags": dict(item.get("extra_flags") or {}),
                        "extra_env": dict(item.get("extra_env") or {}), "settings": own})
    return entries


def planner_inputs(base, entry, profile, probes=None, key_digest=None, figures=None, restored=None):
    """The planner's inputs for one deployment: the cluster's, with each node's probe facts for this deployment
    (``probes``: host -> what its probe read for it, its containers, its vLLM and its model; the head's gives the
    model's config) and its profile. A listed deployment's are narrowed to its nodes, with its settings, profile,
    backend and overrides (its own win over the cluster's); the whole cluster's (``whole``) are the inventory's. A
    ``restored`` deployment (records.restore) takes its recorded image, backend, overrides, extra flags and env instead,
    nothing more: its profile is the recorded one already."""
    hosts = entry["hosts"]
    probes = probes or {}
    head_probe = probes.get(entry["head"]) or {}
    if figures is not None:  # the nodes whose figures it serves, and the Prometheus host that scrapes them
        given = dict(base.get("settings") or {})
        given["monitoring"] = dict(given.get("monitoring") or {}, figures_nodes=list(figures["nodes"]), scraper=figures["scraper"])
        base = dict(base, settings=given)
    inputs = dict(base)
    inputs.update(
        nodes={h: dict(base["nodes"][h], **(probes.get(h) or {})) for h in base["nodes"]},
        model_config=head_probe.get("model_config") or base.get("model_config"),
        weights_bytes=head_probe.get("weights_bytes") or base.get("weights_bytes"),
        image_info=head_probe.get("image") or base.get("image_info"), profile=profile)
    if not entry["listed"]:
        return restore(inputs, restored)
    if entry["served_name"]:  # the name the gateway routes by, instead of the profile's
        profile = dict(profile, model=dict(profile["model"], served_name=str(entry["served_name"])))
    inputs.update(
        groups={"spark_cluster": list(hosts), "spark_head": hosts[:1], "spark_workers": hosts[1:]},
        head_hosts=hosts[:1], order=list(hosts),
        nodes={h: inputs["nodes"][h] for h in hosts if h in inputs["nodes"]}, api_key_digest=key_digest,
        profile=profile, profile_file=entry["profile_file"],
        backend=entry["backend"] or profile.get("backend") or base.get("backend") or "ray",
        settings=dict(base.get("settings") or {}, **dict(entry["settings"], gateway=None)),  # the cluster's, not its own
        overrides=dict(base.get("overrides") or {}, **{k: v for k, v in entry["overrides"].items() if v not in (None, "")}),
        extra_flags=dict(base.get("extra_flags") or {}, **entry["extra_flags"]),
        extra_env=dict(base.get("extra_env") or {}, **entry["extra_env"]))
    return restore(inputs, restored)


def restore(inputs, restored):
    """``inputs`` with a recorded deployment's choices in place of the inventory's (none: as they are)."""
    if not restored:
        return inputs
    return dict(inputs, settings=dict(inputs.get("settings") or {}, image=restored["image"]), backend=restored["backend"],
                profile_file=restored.get("profile_file") or None, overrides=dict(restored.get("overrides") or {}),
                extra_flags=dict(restored.get("extra_flags") or {}), extra_env=dict(restored.get("extra_env") or {}))


def listening(settings, backend, is_head):
    """What one deployment listens on, on one of its nodes: (low, high, what, the setting that moves it)."""
    ports = []
    if is_head:
        ports += [(settings["port"], settings["port"], "API port", "port"),
                  (settings["rsync_port"], settings["rsync_port"], "model copy's rsync port", "rsync_port")]
    if backend == "ray":
        if is_head:
            ports.append((settings["ray_port"], settings["ray_port"], "Ray GCS port", "ray_port"))
        ports += [(low, high, "Ray ports", "ray_ports_offset") for low, high in firewall.ray_port_ranges(settings["ray_ports_offset"])]
    elif is_head:
        ports.append((settings["master_port"], settings["master_port"], "torch rendezvous port", "master_port"))
    return ports


def check_ports(entries, settings_of, plans, findings, gateway_port=()):
    """On every node two deployments share, no port of one may fall in a range of the other's, nor the gateway's
    (``settings_of``: each deployment's settings as the planner normalized them)."""
    held = {host: [(what, port, port)] for host, port, what in gateway_port}
    for entry in entries:
        settings = settings_of.get(entry["name"])
        if not settings:
            continue
        for host in entry["hosts"]:
            for low, high, what, key in listening(settings, (plans.get(entry["name"]) or {}).get("backend"), host == entry["head"]):
                mine = "deployment %s's %s" % (entry["name"], what)
                for other, olow, ohigh in held.get(host, []):
                    if low <= ohigh and olow <= high:
                        findings.error(host, low, "%s: %s %s and %s %s collide; set deployment %s's %s in vllm_deployments to "
                                       "move it" % (host, other, span(olow, ohigh), mine, span(low, high), entry["name"], key))
                held.setdefault(host, []).append((mine, low, high))


def span(low, high):
    return str(low) if low == high else "%d-%d" % (low, high)


def check_memory(entries, plans, findings, chosen=None):
    """On a node two or more deployments share, their requests summed against the node's MemAvailable.

    Each plan counts on the node's whole MemAvailable. A deployment running unchanged holds its memory already
    (MemAvailable counts it out), so only the deployments that start are summed; a run that acts on one deployment
    (``chosen``, -e vllm_deployment) starts no other, whatever the others' plans would change. One whose vLLM alone restarts (its
    containers unchanged) is summed whole against the MemAvailable its old pool still holds down: the plan cannot
    tell that pool apart from the others' on the node, so it errs on the side of the OS. Returns each shared node's
    figures."""
    shared = {}
    for entry in entries:
        plan = plans.get(entry["name"]) or {}
        memory = (plan.get("cluster") or {}).get("memory") or {}
        restarts = any(((node or {}).get("serve") or {}).get("change", "none") != "none" for node in (plan.get("nodes") or {}).values())
        for host in entry["hosts"]:
            node = (memory.get("nodes") or {}).get(host)
            if node:
                node = dict(node, serving_unchanged=node["serving_unchanged"] and not restarts)
                shared.setdefault(host, []).append((entry["name"], node, memory.get("headroom_floor_bytes") or 0))
    figures = {}
    for host, placed in sorted(shared.items()):
        if len(placed) < 2:
            continue
        available = min(node["mem_available_bytes"] for dummy, node, dummy2 in placed)
        floor = max(f for dummy, dummy2, f in placed)
        starting = [(name, node["requested_bytes"] + node["runtime_bytes"]) for name, node, dummy in placed
                    if not node["serving_unchanged"] and (not chosen or name == chosen)]
        left = available - sum(b for dummy, b in starting)
        figures[host] = {"deployments": [name for name, dummy, dummy2 in placed], "mem_available_bytes": available,
                         "starting": dict(starting), "left_bytes": left, "headroom_floor_bytes": floor}
        if starting and left < floor:
            name, node = starting[-1][0], [n for d, n, dummy in placed if d == starting[-1][0]][0]
            others = sum(b for d, b in starting[:-1])
            keeps = memory_fit.utilization_keeping(available - others, node["runtime_bytes"] + floor, node["cuda_total_bytes"])
            fix = ("set overrides: {gpu_memory_utilization: %.2f} in deployment %s's entry, or place it on other nodes" % (keeps, name)
                   if keeps >= 0.05 else "the others leave deployment %s no room there: place it on other nodes, or lower the "
                   "others' gpu_memory_utilization" % name)
            findings.error(host, left, "%s: deployments %s together ask for %.1f GiB of the %.1f GiB available (vLLM's pool and its "
                           "processes, each), leaving %.1f GiB to the OS, below the %.1f GiB floor (a starved Spark stops "
                           "answering SSH); %s" % (host, " + ".join("%s (%.1f GiB)" % (d, b / GIB) for d, b in starting),
                                                   sum(b for dummy, b in starting) / GIB, available / GIB, left / GIB,
                                                   floor / GIB, fix))
    return figures


def combine(entries, settings, settings_of, plans, findings, gateway_on, chosen=None):
    """Across the deployments' plans: ports and memory on shared nodes (the gateway's port among them when it runs, the
    cluster's own vllm_port: the URL clients knew stays theirs), and served names (the gateway routes by name)."""
    gateway_port = [(entries[0]["head"], settings["port"], "the gateway's port (vllm_port)")] if gateway_on else []
    check_ports(entries, settings_of, plans, findings, gateway_port)
    shared = check_memory(entries, plans, findings, chosen)
    names = {}
    for entry in entries:
        model = (plans.get(entry["name"]) or {}).get("model") or {}
        names.setdefault(model.get("served_name") or model.get("id"), []).append(entry["name"])
    for model, named in names.items():
        if len(named) > 1:
            findings.error("all", model, "deployments %s all serve the model name %s; the gateway routes by name, so give each "
                           "its own served_name (in vllm_deployments, or its profile's model.served_name)" % (" and ".join(named), model))
    return {"deployment_order": [e["name"] for e in entries], "shared_nodes": shared}


def figures_nodes(entries):
    """Which deployment's supervisor serves each node's figures: the first deployment placed on it (a node two share is
    scraped once). {deployment: [its hosts it serves]}."""
    served, seen = {}, set()
    for entry in entries:
        served[entry["name"]] = [h for h in entry["hosts"] if h not in seen]
        seen.update(entry["hosts"])
    return served
