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

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import monitoring, placement
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import Findings, normalize_settings, reports
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.deployment import (
    cluster_paths, finish, plan_deployment)


def make_plan(inputs, stage="full", listed=None, profiles_of=None, probes=None, key_digests=None):
    """The plan: a list of deployments, each planned on its own as if it were the whole cluster (``plan_deployment``),
    then what none of them sees alone: names, ports and memory on the nodes they share, and the gateway in front of
    them when the inventory lists them. ``listed``: vllm_deployments (none: the whole cluster is one deployment,
    placement.whole); ``profiles_of`` maps each deployment's name to its loaded profile (the whole cluster's is
    ``inputs["profile"]``), ``probes`` each to its hosts' probe facts, ``key_digests`` each listed one to a digest of
    its own vLLM key (placement.key_file). ``stage="inventory"`` checks only what needs no probe facts."""
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
        given = placement.planner_inputs(inputs, entry, profile, (probes or {}).get(entry["name"]), (key_digests or {}).get(entry["name"]))
        plans[entry["name"]] = plan_deployment(given, stage)
        settings_of[entry["name"]] = dict(normalize_settings(given["settings"]), monitoring=settings["monitoring"])
        own(findings, entry, plans[entry["name"]])
    result = {"stage": stage, "deployments": plans, "deployment_order": [e["name"] for e in entries],
              "head": entries[0]["head"] if entries else None, "shared_nodes": {}, "gateway": None}
    if listed and entries and not findings.errors:
        result.update(placement.combine(entries, settings, settings_of, plans, findings,
                                    dict(key_digests or {}, **{"": inputs.get("api_key_digest")})))
    result["reports"] = {"plan": reports(settings)["plan"]}
    result.update(ok=not findings.errors, errors=findings.errors, warnings=findings.warnings)
    return result


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
        result["deployments"][entry["name"]] = plan = cluster_paths(placement.planner_inputs(inputs, entry, {"model": {}}))
        own(findings, entry, plan)
    if listed and entries and not findings.errors:
        first = result["deployments"][entries[0]["name"]]
        result["gateway"] = dict(placement.gateway_place(settings, first["head"], first["cluster"]["endpoint"]),
                                 api_key_file=settings["api_key_file"])
    return finish(result, findings)


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
