# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgx_spark.vllm.vllm_cluster_plan: runs the planner on the controller.

It gathers the inventory (groups, each host's spark_fabric_ip and spark_fabric_interfaces) and the
probe facts each host holds, loads the profile (user folders first, then the collection's), calls
the pure planner and returns the plan. It changes nothing.
"""

from __future__ import annotations

import hashlib
import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import door, placement, planner, profiles, tls
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import DEFAULT_SETTINGS, normalize_settings
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.inventory import node_order
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import render
from ansible_collections.dgx_spark.vllm.plugins.plugin_utils.controller import ControllerAction

COLLECTION_PROFILES = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "profiles"))

ARGUMENT_SPEC = dict(
    profile=dict(type="str"),
    profile_file=dict(type="path"),
    profile_dirs=dict(type="list", elements="path", default=[]),
    backend=dict(type="str", choices=["ray", "mp"]),
    stage=dict(type="str", default="full", choices=["paths", "inventory", "full"]),
    head_group=dict(type="str", default="spark_head"),
    worker_group=dict(type="str", default="spark_workers"),
    probe_fact=dict(type="str", default="preflight_node_info"),
    settings=dict(type="dict", default={}),
    overrides=dict(type="dict", default={}),
    extra_flags=dict(type="dict", default={}),
    extra_env=dict(type="dict", default={}),
    model_config=dict(type="dict"),
    weights_bytes=dict(type="int"),
    fail_on_error=dict(type="bool", default=True),
    deployments=dict(type="list", elements="raw", default=[]),
    chosen=dict(type="str"),
    one=dict(type="bool", default=False),
    restore=dict(type="dict", default={}),
)


def inventory_nodes(task_vars, args):
    """The head group, the order and each node's inventory values."""
    groups = task_vars.get("groups", {})
    hostvars = task_vars.get("hostvars", {})
    heads, order = node_order(groups, args["head_group"], args["worker_group"])
    nodes = {}
    for host in order:
        values = hostvars.get(host, {})
        nodes[host] = dict(fabric_ip=values.get("spark_fabric_ip"), fabric_interfaces=values.get("spark_fabric_interfaces") or None,
                           ansible_host=values.get("ansible_host") or host,
                           ssh_port=values.get("ansible_port") or values.get("ansible_ssh_port") or None,  # opened by the firewall
                           # who the head's ssh to this node's fabric address logs in as (the image stream)
                           ssh_user=values.get("image_ssh_user") or values.get("ansible_user") or None)
    return groups, heads, order, nodes


def probe_facts(task_vars, fact):
    """What each node's probe read, per deployment placed on it (roles/preflight/tasks/probe.yml registers the
    spark_node_info module's result, its ``deployments``): deployment -> host -> facts."""
    probes = {}
    for host, values in (task_vars.get("hostvars") or {}).items():
        for name, facts in (((values or {}).get(fact) or {}).get("deployments") or {}).items():
            probes.setdefault(name, {})[host] = facts
    return probes


def key_digest(path):
    """A short digest of the API key file, or None when there is none."""
    if not path or not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read().strip()).hexdigest()[:16]


def tls_digest(settings):
    """A short digest of the door's certificate and key (module_utils/plan/tls.py), or None when TLS is off or either
    file cannot be read (a new pair recreates the door); and what is wrong with the pair, or None."""
    given = tls.files(settings)
    if not given:
        return None, None
    found, texts = hashlib.sha256(), []
    for path in (given["cert"], given["key"]):
        try:
            with open(path, "rb") as handle:
                texts.append(handle.read())
        except OSError:
            return None, None
        found.update(texts[-1])
    return found.hexdigest()[:16], tls_problem(*texts)


def tls_problem(cert_pem, key_pem):
    """What nginx would fail on, found before anything changes: a certificate or key that is not PEM, a key that is not
    the certificate's, or a certificate that has expired. None when the pair would serve."""
    import datetime
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
    except ImportError:  # ansible-core needs it; without it the pair is not judged here
        return None
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        return "is not a PEM certificate and an unencrypted PEM private key (%s)" % exc
    public = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(*public) != key.public_key().public_bytes(*public):
        return "has a private key that is not the certificate's"
    if cert.not_valid_after_utc < datetime.datetime.now(datetime.timezone.utc):
        return "has expired (%s)" % cert.not_valid_after_utc.strftime("%Y-%m-%d")
    return None


def key_refusals(paths):
    """The key files whose key the front door could not hold (module_utils/plan/door.py), named, the key never shown."""
    found = []
    for path in dict.fromkeys(p for p in paths if p and os.path.isfile(p)):
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            refusal = door.key_refusal(handle.read().strip())
        if refusal:
            found.append({"host": "all", "value": path, "message": "%s: %s" % (path, refusal)})
    return found


class ActionModule(ControllerAction):
    """Plan a dgx_spark.vllm deployment."""

    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, result, args, task_vars):
        if args["stage"] == "paths":
            return self.paths(result, args, task_vars)
        listed = args["deployments"] or None
        restore = args["restore"] or {}
        whole = restore.get(((args["settings"] or {}).get("cluster_name")) or DEFAULT_SETTINGS["cluster_name"])
        if listed:
            profile, warnings = None, []
            profiles_of, errors = self.listed_profiles(args, restore)
        else:
            profile, warnings = self.profile(dict(args, **{k: whole[k] for k in ("profile", "profile_file")}) if whole else args)
            profiles_of, errors = {}, []
        cluster_key = normalize_settings(args["settings"])["api_key_file"]
        digests = {item.get("name"): key_digest(placement.key_file(cluster_key, item.get("name")))
                   for item in listed or [] if isinstance(item, dict) and item.get("name")}
        plan = planner.make_plan(self.inputs(args, task_vars, profile), args["stage"], listed, profiles_of,
                                 probe_facts(task_vars, args["probe_fact"]), digests, restore, args["chosen"])
        plan["errors"] = errors + key_refusals([cluster_key] + [placement.key_file(cluster_key, name) for name in digests]) + plan["errors"]
        plan["warnings"] = warnings + plan["warnings"]
        plan["ok"] = not plan["errors"]
        if args["stage"] != "inventory":
            planner.choose(plan, args["chosen"], args["one"])
        return self.answer(result, args, plan, render.render(plan))

    def profile(self, args):
        """The whole cluster's profile (an inventory without vllm_deployments), and the warnings about it."""
        if not args["profile"] and not args["profile_file"]:
            known = profiles.available(list(args["profile_dirs"]) + [COLLECTION_PROFILES])
            raise AnsibleActionFail("no profile: set vllm_profile to a profile name (%s) or vllm_profile_file to a profile "
                                    "of your own (docs/profiles.md)" % ", ".join(known))
        warnings = []
        if args["profile"] and args["profile_file"]:
            # -e vllm_profile_file=... over an inventory that names a profile: the file is the later, stronger choice.
            warnings.append("vllm_profile_file %s is used; vllm_profile %s is ignored (set only one of them)"
                            % (args["profile_file"], args["profile"]))
        try:
            if args["profile_file"]:
                return profiles.load(args["profile_file"]), warnings
            return profiles.load(profiles.find(args["profile"], list(args["profile_dirs"]) + [COLLECTION_PROFILES])), warnings
        except profiles.ProfileError as exc:
            raise AnsibleActionFail(to_text(exc))

    def listed_profiles(self, args, restore):
        """Each listed deployment's profile by its name (a restored one's as recorded), and the errors of those that
        cannot be loaded."""
        dirs = list(args["profile_dirs"]) + [COLLECTION_PROFILES]
        profiles_of, errors = {}, []
        for item in args["deployments"]:
            if isinstance(item, dict) and item.get("name") in restore:
                item = dict(item, **{k: restore[item["name"]][k] for k in ("profile", "profile_file")})
            if not isinstance(item, dict) or not (item.get("profile") or item.get("profile_file")):
                continue  # the planner says what is wrong with it
            try:
                profiles_of[item.get("name")] = profiles.load(item.get("profile_file") or profiles.find(item["profile"], dirs))
            except profiles.ProfileError as exc:
                errors.append({"host": "all", "value": item.get("name"), "message": "deployment %s: %s" % (item.get("name"), to_text(exc))})
        return profiles_of, errors

    def inputs(self, args, task_vars, profile):
        """The planner's inputs: the inventory, the whole cluster's profile and the settings."""
        groups, heads, order, nodes = inventory_nodes(task_vars, args)
        settings = normalize_settings(args["settings"])
        tls, tls_problem = tls_digest(settings)
        return {
            "groups": {g: list(groups.get(g) or []) for g in ("spark_cluster", args["head_group"], args["worker_group"])},
            "head_hosts": heads,
            "order": order,
            "nodes": nodes,
            "profile": profile,
            "profile_file": args["profile_file"],
            "backend": args["backend"] or (profile or {}).get("backend") or "ray",
            "settings": args["settings"],
            "overrides": args["overrides"],
            "extra_flags": args["extra_flags"],
            "extra_env": args["extra_env"],
            "model_config": args["model_config"],
            "weights_bytes": args["weights_bytes"],
            "image_info": None,
            # A new API key restarts vLLM (it reads the key at launch); the plan holds a digest of it, never the key.
            "api_key_digest": key_digest(settings["api_key_file"]),
            # A new Ray token restarts Ray on every node (each reads it when it starts).
            "ray_token_digest": key_digest(settings["ray_token_file"]),
            # A new token for the central Prometheus is written to the head (Prometheus reads it at every send).
            "remote_write_token_digest": key_digest((settings.get("monitoring") or {}).get("remote_write_token_file")),
            "tls_digest": tls,
            "tls_problem": tls_problem,
        }

    def answer(self, result, args, plan, text):
        """The action's result: the plan, its text, its warnings, and a failure when it has errors."""
        result["plan"] = plan
        result["plan_text"] = text
        # The first deployment this run acts on, for the roles' defaults (a playbook hands each role its own).
        result["first"] = (plan.get("deployments") or {}).get((plan.get("chosen") or [None])[0])
        result["changed"] = False
        if plan["warnings"]:
            result["warnings"] = list(plan["warnings"])
        if plan["errors"] and args["fail_on_error"]:
            result["failed"] = True
            result["msg"] = "The plan has %d error(s); nothing was changed:\n%s" % (
                len(plan["errors"]), "\n".join("- [%s] %s" % (e["host"], e["message"]) for e in plan["errors"]))
        return result

    def paths(self, result, args, task_vars):
        """stage=paths: names and paths only, no profile (teardown.yml, status.yml)."""
        groups, heads, order, nodes = inventory_nodes(task_vars, args)
        given = {"head_hosts": heads, "order": order, "nodes": nodes, "settings": args["settings"],
                 "groups": {g: list(groups.get(g) or []) for g in ("spark_cluster", args["head_group"], args["worker_group"])}}
        plan = planner.choose(planner.paths(given, args["deployments"] or None), args["chosen"], args["one"])
        result.update(plan=plan, plan_text=[], changed=False, first=(plan.get("deployments") or {}).get((plan.get("chosen") or [None])[0]))
        if plan["errors"] and args["fail_on_error"]:
            result.update(failed=True, msg="; ".join(e["message"] for e in plan["errors"]))
        return result
