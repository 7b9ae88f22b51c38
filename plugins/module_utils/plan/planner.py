# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner: inventory + probe facts + the profiles -> one plan. Pure; no I/O.

The plan is the only source of derived values, and it always has one shape: a list of deployments (``deployments``,
``deployment_order``), the gateway in front of them or none, and the verdict (``ok``, ``errors``, ``warnings``). An
inventory without ``vllm_deployments`` is one deployment named after the cluster (placement.whole); each listed one
is placed on its nodes with names and ports of its own (placement.expand). Each deployment is planned on its own as
if it were the whole cluster (module_utils/plan/deployment.py), then what none of them sees alone is checked across
them (placement.combine: names, ports and memory on shared nodes, the gateway's routes). Every check that fails is a
finding (host, value, message with the remedy); the play stops before any change when there is an error.
"""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import firewall, monitoring, nodes as nodes_check, placement, pulls, shared, tls
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import Findings, node_paths, normalize_settings, reports
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.deployment import (
    cluster_paths, finish, plan_deployment)


def make_plan(inputs, stage="full", listed=None, profiles_of=None, probes=None, key_digests=None, restore=None, chosen=None):
    """The plan: a list of deployments, each planned on its own as if it were the whole cluster (``plan_deployment``),
    then what none of them sees alone: names, ports and memory on the nodes they share (placement.combine), and what
    they share (module_utils/plan/shared.py: the gateway in front of them, one Prometheus). ``listed``:
    vllm_deployments (none: the whole cluster is one deployment, placement.whole); ``profiles_of`` maps each
    deployment's name to its loaded profile (the whole cluster's is ``inputs["profile"]``), ``probes`` each to its
    hosts' probe facts, ``key_digests`` each listed one to a digest of its own vLLM key (placement.key_file), and
    ``restore`` any of them to its recorded deployment (records.restore), planned instead of the inventory's choices for
    it (upgrade.yml's rollback, recover.yml). ``chosen``: the one deployment this run acts on (-e vllm_deployment), the
    others keeping what they hold. ``stage="inventory"`` checks only what needs no probe facts."""
    settings = normalize_settings(inputs.get("settings"))
    settings["monitoring"] = monitoring.settings(settings.get("monitoring"))[0]
    findings = Findings()
    entries = deployment_entries(inputs, settings, listed, findings)
    figures = placement.figures_nodes(entries)
    # Every deployment's firewall admits the same hosts and ports on a node: the whole cluster's (firewall.reach).
    gateway = shared.gateway_on(settings, len(entries))
    inputs = dict(inputs, settings=dict(inputs.get("settings") or {},
                                        firewall_reach=firewall.reach(entries, settings, probed_nodes(inputs, probes), findings, gateway)))
    scraper = str((inputs["nodes"].get(entries[0]["head"]) or {}).get("fabric_ip")) if entries and entries[0]["head"] else None
    plans, settings_of = {}, {}
    for entry in entries if not findings.errors else []:
        profile = (profiles_of or {}).get(entry["name"]) if entry["listed"] else inputs.get("profile")
        if profile is None:
            findings.error("all", entry["name"], "deployment %s: its profile was not found" % entry["name"])
            continue
        given = placement.planner_inputs(inputs, entry, profile, (probes or {}).get(entry["name"]), (key_digests or {}).get(entry["name"]),
                                         {"nodes": figures[entry["name"]], "scraper": scraper}, (restore or {}).get(entry["name"]))
        plans[entry["name"]] = plan_deployment(dict(given, behind_gateway=gateway), stage)
        settings_of[entry["name"]] = dict(normalize_settings(given["settings"]), monitoring=settings["monitoring"])
        own(findings, entry, plans[entry["name"]])
    result = {"stage": stage, "deployments": plans, "deployment_order": [e["name"] for e in entries],
              "head": entries[0]["head"] if entries else None, "shared_nodes": {}, "gateway": None, "monitoring": None}
    if entries and not findings.errors:
        result.update(placement.combine(entries, settings, settings_of, plans, findings, gateway, chosen))
    if entries and not findings.errors and stage != "inventory":
        host = entries[0]["head"]
        found = [(probes or {}).get(e["name"], {}).get(host) for e in entries if host in e["hosts"]]
        probed = nodes_check.probed_containers(found[0]) if found and found[0] else None
        result["gateway"] = shared.gateway(entries, plans, settings, dict(key_digests or {}, **{"": inputs.get("api_key_digest")}),
                                           probed, findings, inputs.get("tls_digest"))
        if result["gateway"]["enabled"]:
            shared.through_gateway({"url": result["gateway"]["url"], "api_key_file": result["gateway"]["client_key_file"],
                                    "ca_file": tls.ca_file(settings)},
                                   [p["cluster"]["endpoint"] for p in plans.values() if (p.get("cluster") or {}).get("endpoint")])
        result["monitoring"] = shared.watched(entries, plans, settings, inputs, probed, findings,
                                              dict(key_digests or {}, **{"": inputs.get("api_key_digest")}))
    first = ((plans.get(entries[0]["name"]) if entries else None) or {}).get("cluster", {}).get("endpoint") or {}
    tls.check(settings, first.get("client_bind_address"), inputs.get("tls_digest"), findings, inputs.get("tls_problem"))
    result["reports"] = {"plan": reports(settings)["plan"]}
    result["key_files"] = key_files(settings, entries, plans, settings_of, inputs.get("nodes"))
    result["acts"] = acts(result, findings)
    # The deployments a run only checks (their plan changes no container): serve.yml checks and commits them together.
    result["unchanged"] = [name for name in result["deployment_order"]
                           if name in plans and not (plans[name].get("cluster") or {}).get("apply_needed", True)]
    if result.get("gateway"):
        result["gateway"].update(gateway_checks(result["gateway"], result["unchanged"], result["deployment_order"]))
    # What the probe reads on each node, for every deployment placed on it, in one call (spark_node_info deployments).
    result["probes"] = {}
    for name in result["deployment_order"]:
        for host, node in ((plans.get(name) or {}).get("nodes") or {}).items():
            if node.get("probe"):
                result["probes"].setdefault(host, {})[name] = node["probe"]
    result["pulls"] = pulls.for_hosts(plans, settings_of, pulls.login_registry(settings))  # what each node pulls before the probe (image_source: pull)
    result.update(ok=not findings.errors, errors=findings.errors, warnings=findings.warnings)
    return result


def probed_nodes(inputs, probes):
    """Each host's inventory values with what any deployment's probe read of it (its connection's port)."""
    nodes = {h: dict(v or {}) for h, v in (inputs.get("nodes") or {}).items()}
    for facts in (probes or {}).values():
        for host, found in (facts or {}).items():
            if host in nodes and (found or {}).get("connection_port"):
                nodes[host]["connection_port"] = found["connection_port"]
    return nodes


def gateway_checks(gateway, unchanged, order):
    """How a run asks the gateway: running unchanged in front of deployments that all launch nothing, with them, every
    endpoint at once (``with_unchanged``, tasks/unchanged.yml); otherwise verified once every deployment is verified
    (``verify``, tasks/shared_verify.yml)."""
    quiet = gateway["enabled"] and not gateway["apply_needed"] and list(unchanged) == list(order)
    return {"with_unchanged": [gateway["check"]] if quiet else [], "verify": gateway["enabled"] and not quiet}


def acts(result, findings):
    """Whether the run changes anything (a deployment applied or committed, a shared container changed) or is refused:
    what serve.yml writes plan.json for. A run that changes nothing writes nothing, not even its plan."""
    if findings.errors or result["stage"] != "full":
        return True
    clusters = [(p.get("cluster") or {}) for p in result["deployments"].values()]
    return (any(c.get("apply_needed") or (c.get("commit") or {}).get("needed") for c in clusters)
            or (result.get("gateway") or {}).get("apply_needed")  # LiteLLM's container or its front door's
            or (result.get("monitoring") or {}).get("change", "none") != "none")


def key_files(settings, entries, plans=None, settings_of=None, nodes=None):
    """The controller's key files the preflight role makes before planning (each once, mode 0600, in a 0700 folder):
    the clients' (``client``; an AWX credential's key is written there), each listed deployment's own, which only
    the gateway holds, and Ray's token, which every Ray node holds (``generated``: every file made at random when
    missing). ``ray_token``: where the first Ray deployment's head keeps its copy of the token, which a controller
    without the file (an AWX job's fresh project) takes back before it would make another (a new token restarts Ray).
    ``tls``: the self-signed certificate made once when vllm_tls asks for one and the inventory gives none (plan/tls.py),
    for every node's name and address (``nodes``: the inventory's)."""
    client = settings["api_key_file"]
    given = tls.files(settings)
    own = [placement.key_file(client, e["name"]) for e in entries if e["listed"]]
    # An offline plan (plan.yml before the nodes answer) makes no token: the head may hold one it would not take back.
    ray = [settings["ray_token_file"]] if settings.get("ray_token_file") and not settings.get("offline") else []
    holder = next((e for e in entries if ((plans or {}).get(e["name"]) or {}).get("backend") == "ray" and e["head"]), None)
    return {"folder": client.rsplit("/", 1)[0] if client and "/" in client else None, "client": client,
            "generated": ([client] + own if client else []) + ray,
            "ray_token": {"file": ray[0], "host": holder["head"],
                          "node_file": node_paths(settings_of[holder["name"]], holder["head"], None)["ray_token_file"]}
            if ray and holder else None,
            "tls": dict(given, names=tls.subject_alt_names(tls.names(nodes))) if given and given["self_signed"] else None}


def paths(inputs, listed=None):
    """cluster_paths of every deployment (teardown.yml, status.yml, upgrade.yml's and recover.yml's record look-up):
    each one's names and paths as its plan has them, and what they share (shared.paths). Needs no profile."""
    settings = normalize_settings(inputs.get("settings"))
    findings = Findings()
    entries = deployment_entries(inputs, settings, listed, findings)
    result = {"stage": "paths", "deployments": {}, "deployment_order": [e["name"] for e in entries], "shared": None,
              "head": entries[0]["head"] if entries else None, "reports": {"plan": reports(settings)["plan"]},
              "api_key_file": settings["api_key_file"]}
    gateway = shared.gateway_on(settings, len(entries))
    for entry in entries if not findings.errors else []:
        result["deployments"][entry["name"]] = plan = cluster_paths(dict(placement.planner_inputs(inputs, entry, {"model": {}}),
                                                                         behind_gateway=gateway))
        own(findings, entry, plan)
    if entries and not findings.errors:
        first = result["deployments"][entries[0]["name"]]
        result["shared"] = shared.paths(settings, first["head"], first["cluster"]["endpoint"], len(entries))
        if gateway:
            shared.through_gateway(result["shared"]["gateway"], [p["cluster"]["endpoint"] for p in result["deployments"].values()])
    return finish(result, findings)


def choose(plan, name=None, one=False):
    """The deployments a run acts on (``plan["chosen"]``): the one ``-e vllm_deployment=<name>`` names, or every one (the
    whole cluster is one, named after it); with ``one``, a playbook that acts on one deployment at a time (upgrade.yml)
    refuses a choice of several. Errors are the plan's (nothing has changed yet); the shared containers go with the
    deployments only when every one goes (``shared.teardown``)."""
    order = plan.get("deployment_order") or []
    errors = []
    if name and name not in order:
        errors.append({"host": "all", "value": name, "message": "vllm_deployment=%s: the inventory's deployments are %s; name one of "
                       "them, or leave vllm_deployment out to act on every one. Nothing was changed" % (name, ", ".join(order))})
    elif one and not name and len(order) > 1:
        errors.append({"host": "all", "value": order, "message": "this playbook acts on one deployment at a time, and the inventory "
                       "lists %s: name one with -e vllm_deployment=<name>. Nothing was changed" % ", ".join(order)})
    plan["chosen"] = [] if errors else ([name] if name else list(order))
    if plan.get("shared"):
        plan["shared"]["teardown"] = bool(plan["chosen"]) and plan["chosen"] == list(order)
    if errors:
        plan["errors"] = list(plan.get("errors") or []) + errors
        plan["ok"] = False
    return plan


def deployment_entries(inputs, settings, listed, findings):
    """The deployments to plan: each of ``vllm_deployments`` (placement.expand), or the whole cluster as one."""
    if listed:
        return placement.expand(listed, settings, inputs.get("groups") or {}, findings)
    return [placement.whole(settings, inputs)]


def own(findings, entry, plan):
    """A deployment's findings as the whole plan's, each naming a listed deployment."""
    said = "deployment %s: " % entry["name"] if entry["listed"] else ""
    for error in plan["errors"]:
        findings.error(error["host"], error["value"], said + error["message"])
    for warning in plan["warnings"]:
        findings.warn(said + warning)
