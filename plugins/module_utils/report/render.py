# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan as text a person reads: a table per node, every rank's command, the memory plan, warnings."""

from __future__ import annotations

import shlex

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.model_files import human

GIB = 1024 ** 3


def _gib(value):
    return "-" if value is None else "%.1f GiB" % (value / float(GIB))


def _table(header, rows):
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


def _command(argv):
    return " ".join(shlex.quote(str(a)) for a in argv)


def render(plan):
    """Lines of text describing ``plan``: each deployment's plan (named, when a gateway fronts them), what they share
    (the gateway, Prometheus, the nodes), then the findings and the verdict."""
    gateway = plan.get("gateway") or {}
    fronted = bool(gateway.get("enabled"))
    lines = []
    for name in plan.get("deployment_order") or []:
        planned = (plan.get("deployments") or {}).get(name)
        if planned is None:
            continue
        if fronted:
            lines += ["== deployment %s ==" % name]
        lines += deployment(planned) + ([""] if fronted else [])
    if fronted:
        lines += ["Gateway: on %s, port %d (the cluster's vllm_port), routing by model name:" % (gateway["host"], gateway["port"])]
        lines += ["  %s -> deployment %s at %s" % (r["model"], r["deployment"], r["api_base"]) for r in gateway["routes"]]
    lines += shared_changes(plan)
    for host, shared in sorted((plan.get("shared_nodes") or {}).items()):
        lines.append("Shared node %s: %s start with %s of %s available, leaving %s (floor %s)" % (
            host, " + ".join("%s %s" % (d, _gib(b)) for d, b in shared["starting"].items()) or "nothing",
            _gib(sum(shared["starting"].values())), _gib(shared["mem_available_bytes"]), _gib(shared["left_bytes"]),
            _gib(shared["headroom_floor_bytes"])))
    for warning in plan.get("warnings") or []:
        lines.append("WARNING: %s" % warning)
    for error in plan.get("errors") or []:
        lines.append("ERROR [%s]: %s" % (error["host"], error["message"]))
    lines.append("Verdict: %s" % ("ready to apply" if plan.get("ok") else "refused, nothing will be changed"))
    return lines


def shared_changes(plan):
    """What the apply step does to the shared containers, when anything."""
    lines = []
    gateway = plan.get("gateway") or {}
    for what, section in (("Gateway", gateway), ("Gateway's front door", gateway.get("door") or {}), ("Prometheus", plan.get("monitoring") or {})):
        if section.get("change", "none") != "none":
            lines.append("%s on %s: %s %s" % (what, section.get("host"), section["change"], section["container"]["name"]))
        if section.get("enabled") and section is plan.get("monitoring"):
            lines.append("Prometheus on %s (%s): %d vLLM endpoint(s), %d node(s)" % (
                section["host"], section["url"], section["jobs"]["vllm"], section["jobs"]["spark-nodes"]))
    return lines


def model_copies(plan):
    """What each node holds of the model, as the probe read it (plan/changes.model_copies), and whether the apply's model
    step runs."""
    nodes, cluster = plan.get("nodes") or {}, plan["cluster"]
    copies = [(n, nodes[n].get("model_copy")) for n in plan.get("nodes_order", []) if n in nodes]
    if not copies or any(copy is None for name, copy in copies):
        return []
    model = cluster["model"]
    lines = ["Model %s@%s: %s" % (model["id"], (copies[0][1].get("commit") or "")[:12] or model.get("revision") or "main",
                                  "complete on every node, nothing to fetch or copy" if cluster.get("model_ready")
                                  else "checked again, fetched or copied by the apply")]
    for name, copy in copies:
        held = " (%s of %s here)" % (human(copy["bytes_present"]), human(copy["bytes_expected"])) if copy["bytes_expected"] else ""
        lines.append("  %s: %s%s" % (name, copy["message"], held))
    return lines


def deployment(plan):
    """Lines of text describing one deployment's plan (its findings are the whole plan's)."""
    parallel = plan.get("parallel") or {}
    lines = ["Plan: profile %s, backend %s, %d node(s), TP=%s PP=%s DP=%s EP=%s, world size %s" % (
        plan.get("profile"), plan.get("backend"), parallel.get("nodes", 0), parallel.get("tensor_parallel_size"),
        parallel.get("pipeline_parallel_size"), parallel.get("data_parallel_size"),
        "yes" if parallel.get("expert_parallel") else "no", parallel.get("world_size"))]
    cluster = plan.get("cluster")
    if cluster:
        endpoint = cluster["endpoint"]
        client = endpoint.get("client") or endpoint
        lines.append("Endpoint: %s/v1 serving %s (API key from %s)%s" % (
            client["url"], endpoint["served_model_name"], client.get("api_key_file") or "the environment",
            "; behind the gateway, its own front door at %s answers the cluster's nodes alone" % endpoint["url"]
            if endpoint.get("behind_gateway") else ""))
        lines.append("Image: %s (vLLM %s); NCCL transport: %s%s" % (
            cluster["image"], cluster.get("vllm_version") or "?", cluster["transport"], ", strict" if cluster["nccl_strict"] else ""))
        if cluster.get("nccl_library"):
            lines.append("NCCL library the ranks load: %s (vllm_nccl_library); %s" % (
                cluster["nccl_library"]["mode"], "; ".join(cluster["nccl_library"]["lines"])))
        if cluster.get("eager_reason"):
            lines.append("Eager mode: %s" % cluster["eager_reason"])
        nodes = plan.get("nodes") or {}
        rows = []
        for name in plan.get("nodes_order", []):
            node = nodes.get(name)
            if not node:
                continue
            env = node["env_node"]
            rows.append([name, node["rank"], node["fabric_ip"], ", ".join(c["name"] for c in node["containers"]),
                         env.get("NCCL_IB_GID_INDEX", "auto" if env.get("NCCL_IB_HCA") else "-"),
                         env.get("GLOO_SOCKET_IFNAME", "-"), node["config_hash"]])
        lines += [""] + _table(["node", "rank", "fabric IP", "container", "GID index", "interface", "config hash"], rows)
        ring = [(name, nodes[name]["ring"]) for name in plan.get("nodes_order", []) if (nodes.get(name) or {}).get("ring")]
        if ring:
            lines += ["", "Ring (MTU %d; netplan tried with a rollback armed, every link pinged from both ends, then confirmed):"
                      % ring[0][1]["mtu"]]
            lines += ["  %s  %s %s -> %s %s  %s" % (end["link"], name, end["address"], end["peer"], end["peer_address"],
                                                    "netplan changes" if r["netplan"]["differs"] else "as confirmed")
                      for name, r in ring for end in r["ends"] if end["side"] == "a"]
        lines += ["", "Environment on every rank:"]
        lines += ["  %s=%s" % (k, v) for k, v in sorted(cluster["env_common"].items())]
        for name in plan.get("nodes_order", []):
            if name in nodes:
                lines.append("Environment of %s only:" % name)
                lines += ["  %s=%s" % (k, v) for k, v in sorted(nodes[name]["env_node"].items())]
        lines += ["", "Commands:"]
        for name in plan.get("nodes_order", []):
            node = nodes.get(name)
            if not node:
                continue
            for spec in node["containers"]:
                lines.append("  %s, container %s: %s" % (name, spec["name"], _command(spec["command"])))
            if node.get("serve") and plan.get("backend") == "ray":
                lines.append("  %s, inside %s: %s" % (name, node["serve"]["container"], _command(node["serve"]["argv"])))
        if "apply_needed" in cluster:
            serve = ["%s: %s vLLM" % (n, "stop, then start" if nodes[n]["serve"].get("stop_first")
                                      else "restart" if nodes[n]["serve"].get("restarts") else nodes[n]["serve"]["change"])
                     for n in plan.get("nodes_order", [])
                     if n in nodes and (nodes[n].get("serve") or {}).get("change", "none") != "none"]
            firewall = ["%s: load the firewall table again (%s)" % (n, nodes[n]["writes"]["firewall"]["reload"])
                        for n in plan.get("nodes_order", []) if n in nodes and ((nodes[n].get("writes") or {}).get("firewall") or {}).get("reload")]
            lines.append("Changes: %s" % ("; ".join(cluster["changes"] + serve + firewall) or "none, every container and vLLM run as planned"))
            lines += ["Environment drift: %s" % drift for drift in cluster.get("env_drift") or []]
            lines += model_copies(plan)
            if cluster.get("join_gate_proven"):
                lines.append("Join gate: every node and GPU has joined Ray (read by the head's probe)")
            commit = cluster.get("commit") or {}
            if "needed" in commit:
                said = "; ".join(commit["reasons"]) if commit["needed"] else "nothing, the nodes bring back and record this deployment"
                lines.append("Commit once verified: %s" % said)
        memory = cluster.get("memory")
        if memory:
            lines += render_memory(memory)
        for deviation in plan.get("deviations") or []:
            lines.append("Deviation from the write-up: %s: %s (restore with %s)" % (
                deviation["what"], " ".join(deviation["reason"].split()), deviation["restore"]))
    return lines


def render_memory(memory):
    """Per rank: weights, KV bytes per token, KV capacity, the concurrency that fits at max_model_len, headroom."""
    lines = ["", "Memory (KV %d B/token/rank%s%s, from %s):" % (
        memory["kv_bytes_per_token"], ", MLA" if memory["mla"] else "",
        ", Mamba state %.1f MiB/sequence/rank" % (memory["mamba_state_bytes_per_sequence"] / 1048576.0)
        if memory.get("mamba_state_bytes_per_sequence") else "", memory.get("config_source", "config.json"))]
    rows = []
    for name, m in sorted(memory["nodes"].items(), key=lambda item: item[1].get("rank", 0)):
        rows.append([name, m.get("rank", "-"), _gib(m["mem_available_bytes"]), _gib(m["requested_bytes"]), _gib(m["weights_bytes"]),
                     _gib(m["kv_cache_bytes"]), "{:,}".format(m["kv_tokens"]),
                     "-" if m.get("max_concurrency") is None else m["max_concurrency"],
                     _gib(m.get("headroom_bytes")) + (" (serving, unchanged)" if m.get("serving_unchanged") else ""),
                     "yes" if m["fits"] else "NO"])
    lines += _table(["node", "rank", "available", "vLLM requests", "weights", "KV cache", "KV tokens",
                     "sequences at max_model_len", "left to the OS", "fits"], rows)
    lines.append("Largest context that fits: {:,} tokens; max_model_len {}; headroom floor {}; recommended "
                 "gpu_memory_utilization {}{}".format(
                     memory["max_context_tokens"], memory.get("max_model_len"), _gib(memory.get("headroom_floor_bytes")),
                     memory.get("recommended_gpu_memory_utilization"),
                     " (at most %s, what the deployment proved)" % memory["proven_gpu_memory_utilization"]
                     if memory.get("proven_gpu_memory_utilization") else ""))
    return lines
