# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the deployments share, on the first deployment's head: the gateway in front of them and one Prometheus that
watches them all. Pure; no I/O.

Both are planned containers like any other (module_utils/plan/labels.py marks them ours; the container module applies
them): each carries a config hash over what it reads, and the probe of its host says whether it runs with that hash,
so a run that changes nothing asks nothing of it. Whatever the inventory lists, both sections are in the plan, on or
off: a plain inventory is one deployment with the gateway off (vllm_gateway) and Prometheus on or off
(vllm_monitoring), as with several. One that is off and still runs (ours) is removed; one of that name that is not
ours is refused before anything changes.

- The gateway (LiteLLM's proxy, module_utils/plan/gateway.py): one route per served model name to its deployment's
  endpoint, on the cluster's own vllm_port (the URL clients knew stays theirs). Each route names the controller's file
  of its deployment's key, never a key; the config hash covers the routes and a digest of every key, so a new key or
  route recreates it and nothing else does.
- Prometheus (module_utils/plan/monitoring.py): every deployment's vLLM and every node's figures, served by one
  supervisor per node (placement.figures_nodes: the first deployment placed there).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import door, gateway as gateway_utils, monitoring
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import labels as container_labels
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import nodes as nodes_check
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import tls
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import digest, endpoint_url, node_paths

GIB = 1024 ** 3

# The gateway's front door answers its health here without a key (LiteLLM's liveness behind it: its own /health asks
# every backend, with the key).
GATEWAY_HEALTH = door.HEALTH_PATH


def gateway_on(settings, count):
    """Whether the gateway runs in front of ``count`` deployments (vllm_gateway, or two or more)."""
    return gateway_utils.enabled((settings.get("gateway") or {}).get("enabled"), count)


def place(settings, head, endpoint):
    """Where the shared containers run and how the gateway answers: the first deployment's head, their names and
    folders, the gateway's URL (the first deployment's endpoint moved to the cluster's own port). The plan and the
    playbooks that run without a profile (planner.paths) both name them from here."""
    advertised = endpoint.get("client_address") or urlsplit(endpoint.get("url") or "http://%s" % (endpoint.get("bind_address") or "0.0.0.0")).hostname
    state_dir = node_paths(settings, head, None)["state_dir"]
    return {"host": head, "container": "%s-gateway" % settings["cluster_name"], "folder": state_dir + "/gateway",
            "door_container": "%s-gateway-door" % settings["cluster_name"],
            "monitoring_container": monitoring.container_name(settings["cluster_name"]), "monitoring_folder": state_dir + "/monitoring",
            "url": endpoint_url(settings, advertised)}


def backend_address(entry, first_head, endpoint):
    """A deployment's vLLM as the shared host reaches it: where vLLM binds on the same head, its URL's host elsewhere."""
    return endpoint.get("local_address", "") if entry["head"] == first_head else urlsplit(endpoint.get("url", "")).netloc


def gateway(entries, plans, settings, key_digests, probed, findings, tls_digest=None):
    """The gateway section: on or off, its routes, its container and what the apply step does to it. With vllm_tls, its
    front door is the one clients reach, so it serves TLS (``tls_digest``: the certificate's, plan/tls.py)."""
    first = entries[0]
    routes = []
    for entry in entries:
        plan = plans.get(entry["name"]) or {}
        endpoint = (plan.get("cluster") or {}).get("endpoint") or {}
        model = plan.get("model") or {}
        base = "http://" + backend_address(entry, first["head"], endpoint)
        routes.append({"model": model.get("served_name") or model.get("id"), "deployment": entry["name"], "api_base": base + "/v1",
                       "health_url": base + "/health", "api_key_file": endpoint.get("api_key_file"), "head": entry["head"]})
    endpoint = ((plans.get(first["name"]) or {}).get("cluster") or {}).get("endpoint") or {}
    where = place(settings, first["head"], endpoint)
    given = settings.get("gateway") or {}
    image = given.get("image") or "dgx-spark-vllm/litellm:%s" % gateway_utils.LITELLM_VERSION
    interval = given.get("health_check_interval")
    interval = gateway_utils.DEFAULTS["health_check_interval"] if interval in (None, "") else interval
    if not str(interval).isdigit():
        findings.error("all", interval, "vllm_gateway_health_check_interval %r is not a number of seconds; set it to 0 (no "
                       "background health checks, the default) or to the seconds between them" % (interval,))
        interval = 0
    interval = int(interval)
    config_file = where["folder"] + "/config.yaml"
    socket_folder = where["folder"] + "/socket"
    spec = gateway_utils.container(where["container"], image, socket_folder, config_file,
                                   container_labels.labels(settings["cluster_name"], first["head"], "gateway"))
    spec["labels"][container_labels.CONFIG_HASH] = digest({"container": spec, "routes": routes, "interval": interval,
                                                           "keys": sorted((k, v) for k, v in (key_digests or {}).items())})
    enabled = gateway_on(settings, len(entries))
    # its front door: where clients reach it, the clients' key on every route but GET /health (module_utils/plan/door.py)
    listen = endpoint.get("client_bind_address") or endpoint.get("bind_address") or "0.0.0.0"
    front = door.plan(where["door_container"], door.image(settings), container_labels.labels(settings["cluster_name"], first["head"], "gateway-door"),
                      listen, settings["port"], where["folder"] + "/door", socket_folder, (key_digests or {}).get(""),
                      behind=gateway_utils.BEHIND_DOOR, tls=door.tls_section(settings, where["folder"] + "/door", tls_digest))
    first_door = ((plans.get(first["name"]) or {}).get("cluster") or {}).get("door") or {}  # its probe read the image
    front.update(host=where["host"], change=nodes_check.planned_change(front["container"], enabled, probed, findings, where["host"]),
                 dockerfile=door.DOCKERFILE, image_present=bool(first_door.get("image_present")), key_file=settings.get("api_key_file"))
    result = {"enabled": enabled, "host": where["host"], "port": settings["port"], "url": where["url"], "api_url": where["url"] + "/v1",
              "health_path": GATEWAY_HEALTH, "folder": where["folder"], "config_file": config_file, "door": front,
              "keyless_checked": list(gateway_utils.KEYLESS_CHECKED), "keyless_status": door.UNAUTHORIZED_STATUS,
              "client_key_file": settings.get("api_key_file"), "health_check_interval": interval, "container": spec,
              "routes": routes, "change": nodes_check.planned_change(spec, enabled, probed, findings, where["host"]),
              # what a run that launches nothing behind it asks of it, with the deployments at once (planner.py, with_unchanged)
              "check": {"name": "gateway", "url": where["url"], "health_path": GATEWAY_HEALTH, "api_key_file": settings.get("api_key_file"),
                        "ca_file": tls.ca_file(settings),
                        "model": routes[0]["model"], "models": [r["model"] for r in routes], "refused_without_key": True,
                        "keyless_paths": list(gateway_utils.KEYLESS_CHECKED), "keyless_status": door.UNAUTHORIZED_STATUS}}
    result["apply_needed"] = result["change"] != "none" or front["change"] != "none"  # LiteLLM's container, its door's, or both
    return result


def through_gateway(gateway, endpoints):
    """Behind the gateway, clients reach each deployment's model through it, not through the deployment's own door (a
    backend that the cluster's nodes alone reach: firewall.reach, nodes.door_address). So each deployment's checks
    ask what a client gets: its verification, a run that changes nothing and status.yml ask the gateway for its model
    with the clients' key (vLLM's live figures, its ``/metrics``, are not asked there: Prometheus reads them from the
    door). ``endpoints``: each deployment's endpoint section (its plan's or its paths'), changed in place."""
    client = {"url": gateway["url"], "api_url": gateway["url"] + "/v1", "health_path": GATEWAY_HEALTH, "ca_file": gateway.get("ca_file"),
              "api_key_file": gateway["api_key_file"], "keyless_checked": list(gateway_utils.KEYLESS_CHECKED),
              "keyless_status": door.UNAUTHORIZED_STATUS,
              "metrics": False,  # vLLM's /metrics is its own door's: Prometheus reads it there, status.yml does not
              "ready_probe": True}  # the gateway lists the route at once: ready when its model answers through it
    for endpoint in endpoints:
        endpoint["client"] = dict(client)
        if endpoint.get("check"):
            endpoint["check"] = dict(endpoint["check"], url=client["url"], api_key_file=client["api_key_file"], health_path=GATEWAY_HEALTH,
                                     ca_file=client["ca_file"],
                                     ready_probe=True)


def watched(entries, plans, settings, inputs, probed, findings, key_digests=None):
    """The monitoring section: one Prometheus on the first deployment's head, scraping every deployment's vLLM and
    every node's figures (where a supervisor serves them), with the alert rules of the strictest floor."""
    config = settings["monitoring"]
    first = entries[0]
    where = place(settings, first["head"], ((plans.get(first["name"]) or {}).get("cluster") or {}).get("endpoint") or {})
    targets = []
    for entry in entries:
        endpoint = ((plans.get(entry["name"]) or {}).get("cluster") or {}).get("endpoint") or {}
        if config["enabled"] and settings.get("tls") and entry["head"] != first["head"] and not endpoint.get("behind_gateway"):
            findings.error(entry["head"], entry["name"], "vllm_monitoring with vllm_tls: Prometheus on %s reads deployment %s's "
                           "vLLM through its door on %s, which serves TLS to every host, and cannot yet; put the gateway in "
                           "front of the deployments (vllm_gateway: true: their doors become the cluster's own), or place %s "
                           "on %s" % (first["head"], entry["name"], entry["head"], entry["name"], first["head"]))
        targets.append({"address": backend_address(entry, first["head"], endpoint), "deployment": entry["name"],
                        "api_key_file": endpoint.get("api_key_file"), "key_digest": (key_digests or {}).get(entry["name"], (key_digests or {}).get(""))})
    hosts = [h for h in inputs.get("order") or [] if any(h in e["hosts"] for e in entries)]
    nodes = [(h, str(inputs["nodes"][h].get("fabric_ip"))) for h in hosts if monitoring.nodes_served(settings)]
    floor = max([((plans.get(e["name"]) or {}).get("cluster") or {}).get("memory", {}).get("headroom_floor_bytes") or 0
                 for e in entries] or [0])
    section = monitoring.plan(config, settings["cluster_name"], where["monitoring_folder"], targets, nodes, floor,
                              int(float(settings["unaccounted_limit_gib"]) * GIB),
                              container_labels.labels(settings["cluster_name"], first["head"], "prometheus"),
                              inputs.get("remote_write_token_digest"))
    section.update(host=where["host"], change=nodes_check.planned_change(section["container"], config["enabled"], probed, findings, where["host"]))
    return section


def paths(settings, first_head, endpoint, count):
    """What teardown.yml and status.yml know of the shared containers without a profile: where they run, the gateway's
    URL and key, and what the whole cluster's teardown removes with them (their containers, ours only, and the
    gateway's folder, which holds every key)."""
    where = place(settings, first_head, endpoint)
    return {"host": where["host"], "cluster": settings["cluster_name"],
            "containers": [where["container"], where["door_container"], where["monitoring_container"]], "folders": [where["folder"]],
            "gateway": {"enabled": gateway_on(settings, count), "url": where["url"], "api_key_file": settings.get("api_key_file"),
                        "ca_file": tls.ca_file(settings),
                        "health_path": GATEWAY_HEALTH}}
