# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""status.yml's report: which node runs what, which is missing from Ray, whether the endpoint serves."""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import bench as bench_results


def deployment(nodes, ray=None, endpoint=None, logs=None, bench=None):
    """One deployment's report. ``nodes``: {name: {"fabric_ip", "reachable", "containers": [docker ps JSON rows]}}; ``ray``: the
    ray_cluster_info result (or None when there is no Ray container); ``endpoint``: vllm_endpoint_info's
    ``endpoint``; ``logs``: each node's log reads (the paths plan's ``logs``), named for the containers it has; ``bench``:
    the head's record of bench's last run of each profile.
    Returns {"healthy": bool, "lines": [...], "unhealthy_nodes": [...]}."""
    ray = ray or {}
    state = ray.get("ray") or {}
    alive = set(state.get("alive_ips") or [])
    lines, bad = [], []
    for name in sorted(nodes):
        node = nodes[name] or {}
        ip = node.get("fabric_ip")
        if not node.get("reachable", True):
            lines.append("%s (%s): unreachable (Docker did not answer)" % (name, ip))
            bad.append(name)
            continue
        containers = node.get("containers") or []
        parts = ["%s %s (%s)" % (c.get("Names"), c.get("State"), c.get("Status")) for c in containers] or ["no container of this cluster"]
        problems = [c.get("Names") for c in containers if c.get("State") != "running"]
        if not containers:
            problems.append("nothing runs")
        if state and ip not in alive:
            problems.append("missing from the Ray cluster")
        if node.get("firewall") not in (None, "loaded"):  # read on the node (node/firewall_state.py)
            problems.append("firewall table %s" % node["firewall"])
        boot = node.get("boot")
        if boot:
            parts.append("next boot: %s" % boot["next_boot"])
            if boot.get("state"):
                parts.append("supervisor: %s (%s)" % (boot["state"], boot.get("detail")))
        names = {c.get("Names") for c in containers}
        reads = [r["what"] for r in (logs or {}).get(name) or [] if r["container"] in names]
        if reads:
            parts.append("logs: " + ", ".join(reads))
        line = "%s (%s): %s" % (name, ip, "; ".join(parts))
        if problems:
            line += " -- NOT OK: %s" % ", ".join(problems)
            bad.append(name)
        lines.append(line)
    if ray and not state:
        lines.append("Ray: %s" % (ray.get("msg") or "not readable"))
    elif state:
        missing = ("; missing " + ", ".join(state.get("missing_ips"))) if state.get("missing_ips") else ""
        lines.append("Ray: %d node(s) alive, %g GPU(s)%s" % (state.get("alive_count", 0), state.get("gpu_total", 0), missing))
    endpoint = endpoint or {}
    if endpoint.get("ready"):
        # the model asked (behind the gateway, which lists every deployment's, this deployment's own)
        serving = endpoint.get("model") or ", ".join(endpoint.get("models") or [])
        lines.append("Endpoint: serving %s (first token in %ss)" % (serving, endpoint.get("first_token_seconds")))
        if endpoint.get("live"):
            lines.append(live_line(endpoint["live"]))
    else:
        lines.append("Endpoint: NOT serving (%s)" % "; ".join(endpoint.get("errors") or ["no answer"]))
    lines += bench_results.last_runs(bench)
    healthy = not bad and bool(endpoint.get("ready")) and not (ray and not state) and not state.get("missing_ips")
    lines.append("Healthy" if healthy else "NOT healthy: run playbooks/serve.yml to restore service%s" % (
        (" (" + ", ".join(bad) + ")") if bad else ""))
    return {"healthy": healthy, "lines": lines, "unhealthy_nodes": bad}


LOGS_HINT = "playbooks/logs.yml shows the last lines of every log named above"


def live_line(live):
    """What the endpoint does now (vllm_endpoint_info's ``live``, from two reads of /metrics)."""
    def shown(value, form):
        return "n/a" if value is None else form % value

    return "Now (over %ss): %s output tokens/s, %s prompt tokens/s; KV cache %s used; %s running, %s queued" % (
        live["seconds"], shown(live["output_tokens_per_second"], "%.1f"), shown(live["prompt_tokens_per_second"], "%.1f"),
        shown(None if live["kv_cache_usage"] is None else live["kv_cache_usage"] * 100, "%.1f%%"),
        shown(live["running"], "%d"), shown(live["waiting"], "%d"))


def node(entry):
    """(fabric_ip, the registered ``docker ps --format json`` result[, the registered vllm_boot probe]) to report()'s
    node entry."""
    ip, listed = entry[0], entry[1] or {}
    probed = (entry[2] if len(entry) > 2 else None) or {}
    reachable = not listed.get("unreachable") and listed.get("rc", 1) == 0
    rows = []
    for line in listed.get("stdout_lines") or []:
        try:
            import json
            rows.append(json.loads(line))
        except ValueError:
            continue
    return {"fabric_ip": ip, "reachable": reachable, "containers": rows, "boot": probed.get("next_boot"),
            "firewall": probed.get("firewall")}


def report(states, gateway=None):
    """status.yml's report. ``states``: each deployment's state.yml state by name; ``gateway``: what vllm_endpoint_info
    found asking the gateway with the clients' key ({url, models, errors}), None when no gateway fronts the deployments. Each deployment is
    reported under its name when a gateway fronts them. Healthy when every deployment is, and the gateway lists every
    model a deployment serves."""
    lines, healthy, served, unhealthy = [], True, [], []
    for name, state in states.items():
        one = deployment(state["nodes"], state.get("ray"), state.get("endpoint"), state.get("logs"), state.get("bench"))
        if gateway is None:
            lines += one["lines"][:-1]
        else:
            lines.append("Deployment %s (head %s):" % (name, state.get("head")))
            lines += ["  " + line for line in one["lines"]]
        healthy = healthy and one["healthy"]
        unhealthy += one["unhealthy_nodes"]
        served += (state.get("endpoint") or {}).get("models") or []
    missing = [m for m in served if m not in ((gateway or {}).get("models") or [])]
    if gateway is not None and not gateway.get("errors") and not missing:
        lines.append("Gateway %s/v1: routes %s" % (gateway.get("url"), ", ".join(gateway.get("models") or [])))
    elif gateway is not None:
        healthy = False
        lines.append("Gateway %s/v1: NOT OK (%s)" % (gateway.get("url"), "; ".join(gateway.get("errors") or [])
                                                     or "does not list %s" % ", ".join(missing)))
    if any(state.get("logs") for state in states.values()):
        lines.append(LOGS_HINT)
    lines.append("Healthy" if healthy else "NOT healthy: run playbooks/serve.yml to restore service%s" % (
        (" (" + ", ".join(sorted(set(unhealthy))) + ")") if unhealthy else ""))
    return {"healthy": healthy, "lines": lines, "unhealthy_nodes": sorted(set(unhealthy))}
