# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gateway in front of several deployments: LiteLLM's proxy, routing by the request's ``model``. Pure; no I/O.

Clients see one URL (the cluster's ``vllm_port`` on the first deployment's head: the gateway's own front door, as a
single deployment's, with the key on every route but ``GET /health``) and one key; each deployment keeps its own key,
which only the gateway holds. LiteLLM's proxy is the OpenAI-compatible router most used in front
of vLLM: its ``hosted_vllm/`` provider passes the request through (streaming included), ``/v1/models`` lists every
route. Three things about it are set here, not left to it:

- it phones home: at start it fetches its model cost map from the internet, and more later. ``LITELLM_OFFLINE_MODE``
  (its environment, as its docs say: the cost map loads before the config is read) stops every such request;
- its configuration holds the keys, so it is a 0600 file on the head, mounted read-only, never the container's
  environment (``docker inspect`` shows that) nor its argv. The plan carries the files the keys come from, never a key;
  the role reads them on the head and writes the file there (``config_text``);
- its background health checks are off unless asked for (``vllm_gateway_health_check_interval``). Each one is a real
  completion sent to every backend: it shows in vLLM's request counts and in a bench's figures, and it wakes every
  rank. Nothing here reads their results (LiteLLM routes by them only with its health-check routing on, and each model
  has one backend); the supervisor and Prometheus watch the backends.
"""

from __future__ import annotations

import json

CONFIG_MOUNT = "/etc/litellm"
DEFAULTS = {
    "enabled": None,            # None: on when there are two or more deployments
    "image": None,              # None: dgx-spark-vllm/litellm:LITELLM_VERSION, to be built from PyPI on the head
    "health_check_interval": 0,  # seconds between LiteLLM's background health checks of every backend; 0: none
}
LITELLM_VERSION = "1.106.12"  # litellm[proxy], pinned: each release pins its proxy extras exactly
ENV = {"LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "true", "LITELLM_LOG": "INFO"}
SOCKET_MOUNT = "/run/dgx-spark-gateway"   # the socket's folder, as the gateway and its door see it
SOCKET_NAME = "gateway.sock"
# What the gateway's front door stands in front of (door.nginx_conf): LiteLLM's socket, its keyless liveness for the
# door's health route, and the client's key passed on (LiteLLM checks it again as its master key).
BEHIND_DOOR = {"socket": SOCKET_NAME, "health": "/health/liveliness", "authorization": True}
# Routes LiteLLM's proxy answers without its key (its own public routes): through the gateway's door, each must answer
# the door's 401 (the gateway's verification asks them, as verify/endpoint_check.refused_without_key does the doors').
KEYLESS_CHECKED = ("/v1/models", "/openapi.json", "/docs", "/routes", "/health/readiness", "/health/liveliness", "/",
                   "POST /v1/chat/completions")


def enabled(given, deployments):
    """The gateway runs with two or more deployments, or when vllm_gateway is true (one deployment behind it)."""
    if given not in (None, ""):
        return str(given).lower() in ("1", "true", "yes", "on")
    return deployments > 1


def config(routes, keys, client_key, interval):
    """LiteLLM's configuration: one route per served model name to its deployment, with that deployment's key,
    one key for the clients, a background health check of every backend every ``interval`` seconds (0: none). ``keys``
    maps a deployment to its vLLM key."""
    interval = int(interval or 0)
    checks = {"background_health_checks": True, "health_check_interval": interval} if interval > 0 else {"background_health_checks": False}
    return {
        "model_list": [{"model_name": route["model"],
                        "litellm_params": {"model": "hosted_vllm/" + route["model"], "api_base": route["api_base"],
                                           "api_key": keys[route["deployment"]]},
                        "model_info": {"deployment": route["deployment"]}} for route in routes],
        "general_settings": dict(checks, master_key=client_key),
        "litellm_settings": {"telemetry": False, "drop_params": False, "request_timeout": 600},
    }


def config_text(routes, keys, client_key, interval):
    """The file the container reads: JSON, which is YAML too (LiteLLM reads YAML)."""
    return json.dumps(config(routes, keys, client_key, interval), indent=2, sort_keys=True) + "\n"


def container(name, image, socket_folder, config_file, labels):
    """The gateway's container: the host's network (it reaches every deployment's door on its head's fabric address),
    no TCP port of its own: LiteLLM's app served by uvicorn on a Unix socket in a folder only root enters, which the
    gateway's front door alone reaches (BEHIND_DOOR); its configuration read-only (``CONFIG_FILE_PATH``: LiteLLM's app
    reads it at its start), no secret in its argv or environment. It runs with no capability, no way to gain one and
    a read-only filesystem but a tmpfs at /tmp (LiteLLM keeps a token store there), as the front door does."""
    return {"name": name, "image": image, "network_mode": "host",
            "command": ["python3", "-m", "uvicorn", "litellm.proxy.proxy_server:app", "--uds", SOCKET_MOUNT + "/" + SOCKET_NAME,
                        "--workers", "1", "--no-access-log"],
            "env": dict(ENV, CONFIG_FILE_PATH=CONFIG_MOUNT + "/config.yaml"),
            "volumes": ["%s:%s/config.yaml:ro" % (config_file, CONFIG_MOUNT), "%s:%s" % (socket_folder, SOCKET_MOUNT)],
            "cap_drop": ["ALL"], "security_opts": ["no-new-privileges"], "read_only": True, "tmpfs": ["/tmp"],
            "restart_policy": "unless-stopped", "labels": dict(labels)}
