# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every part of the planner shares: the one set of defaults, the findings collector, names and paths.

Every derived name, path, port and URL the roles use is made here or in the planner, once; the roles copy
them from the plan.
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import firewall

LABEL = "dgx_spark.vllm"
STATE_MOUNT = "/dgx-spark"
MODELS_MOUNT = "/models"
RAY_PORT = 6379
MASTER_PORT = 29501

# The one set of defaults of the cluster settings: the preflight role passes the inventory's values or null.
DEFAULT_SETTINGS = {
    "cluster_name": "dgx-spark",
    "image": None,
    "port": 8000,
    "public_url": None,
    "bind_address": None,       # None: the address the head's ansible_host resolves to on the head
    "state_dir": "/var/lib/dgx-spark-vllm",
    "models_dir": "/var/lib/dgx-spark-vllm/models",
    "network_mode": "host",
    "ipc_mode": "host",
    "shm_size": None,
    "devices": ["/dev/infiniband:/dev/infiniband"],
    "gpus": "all",
    "capabilities": ["IPC_LOCK"],
    "ulimits": ["memlock:-1:-1", "stack:67108864:67108864"],
    "nccl_transport": "auto",   # auto | roce | socket
    "nccl_strict": False,
    "nccl_library": "image",    # image | system: the NCCL the ranks load (module_utils/plan/nccl_library.py)
    "nccl_debug": True,
    "ring": None,               # {"subnet_prefix_len": 24} for a switchless ring
    "simulated": False,
    "offline": False,           # plan without probe facts (plan.yml -e dgx_spark_offline=true): placeholders
    "gpus_per_node": 1,
    "ray_port": RAY_PORT,
    "master_port": MASTER_PORT,
    "ray_ports_offset": 0,              # moves every port Ray pins: another deployment on the node (plan/placement.py)
    "inventory_dir": None,      # the inventory's folder on the controller: its .secrets and .artifacts are beside it
    "api_key_file": None,       # None: <inventory_dir>/.secrets/vllm_api_key, mode 0600
    "ray_token_file": None,     # None: ray_auth_token beside api_key_file, mode 0600: Ray's token (commands.RAY_TOKEN_FILE)
    "artifacts_dir": None,      # the controller's folder for plan.json, summary.json and the logs
    "memory_headroom_floor_gib": None,  # None: the profile's memory.headroom_floor_bytes, else the planner's floor
    "require_nvidia_runtime": None,     # None: required unless simulated
    "unaccounted_limit_gib": 8,         # fact 3: used memory nothing live explains, above which a node is refused
    "balance_tolerance_gib": 8,         # fact 4: free memory may differ this much across nodes
    "hf_endpoint": None,
    "model_disk_reserve_gb": 2,
    "launch_disk_reserve_gb": 2,        # free space a launch needs on the state folder's and Docker's filesystems
    "model_verify_checksums": False,
    "rsync_port": 8730,
    "image_build": False,               # the image role builds the image on the head (image_build)
    "image_source": "stream",           # stream (the head's image to each worker) or pull (module_utils/plan/pulls.py)
    "image_registry": None,             # the registry the pull's login is for; None: the one the image names
    "trust_remote_code_unpinned": False,  # allow --trust-remote-code with a revision that is not a commit (warned)
    "code_pins": None,                  # {file vLLM loads, as the container sees it: sha256} (module_utils/plan/code.py)
    "pipeline_across_nodes": False,     # allow PP > 1 across nodes with Ray, which crashed on the 2nd request (seed 003; warned)
    "firewall_allow": [],               # ports every host reaches besides SSH and the front door (firewall.allowed)
    "firewall": True,                   # other hosts reach only SSH and the front door (module_utils/plan/firewall.py)
    "boot_start": True,                 # each node's supervisor brings the model back after a boot (module_utils/plan/boot.py)
    "images_kept": 2,                   # verified images kept on every node: the serving one and the one before it
    "monitoring": None,                 # Prometheus on the head and each node's figures (module_utils/plan/monitoring.py)
    "gateway": None,                    # LiteLLM's proxy in front of several deployments (module_utils/plan/gateway.py)
    "door_image": None,                 # None: the front door's own image, built on a head that lacks it (module_utils/plan/door.py)
    "tls": False,                       # the clients' front door serves TLS (module_utils/plan/tls.py)
    "tls_cert_file": None,              # None with tls: a self-signed certificate made once beside the API key
    "tls_key_file": None,
    "tls_ca_file": None,                # what the controller's checks trust: None, the self-signed certificate or the system's
}
INTEGERS = ("port", "ray_port", "master_port", "ray_ports_offset", "gpus_per_node", "rsync_port", "images_kept")
BOOLEANS = ("nccl_strict", "nccl_debug", "simulated", "offline", "model_verify_checksums", "image_build", "trust_remote_code_unpinned",
            "pipeline_across_nodes", "firewall", "boot_start", "tls")
# The state folders of a node, under <state_dir>/<cluster>, each with its mode. What a container sees is under
# container/ alone (CONTAINER_FOLDERS, mounted one by one at STATE_MOUNT/<name>): the rest (the supervisor's code and
# plan, the firewall's ruleset, the records, the ring's rollback, the copy's secrets) is read, loaded or run by the
# host's root or the SSH user, so no container may reach it.
STATE_FOLDERS = (("config", "0755"), ("logs", "0755"), ("run", "0755"), ("secrets", "0700"), ("container", "0755"), ("door", "0700"))
# The container-visible folders: (name, mode, whether a container may write it). A container reads the launcher,
# vLLM's config, its keys and the fetch's token, and writes only vLLM's log and state (and bench's results) there, and
# vLLM's socket (door, root's only: the front door reaches vLLM through it, module_utils/plan/door.py) and, in cache, one
# folder of vLLM's compile caches each rank mounts alone (module_utils/plan/compile_cache.py): root never runs,
# loads or writes through what is in a writable one (node/command.py read_small).
CONTAINER_FOLDERS = (("bin", "0755", False), ("config", "0755", False), ("keys", "0700", False), ("fetch", "0700", False),
                     ("logs", "0755", True), ("run", "0755", True), ("door", "0700", True), ("cache", "0755", True))


def truthy(value):
    return str(value).lower() in ("1", "true", "yes", "on")


def normalize_settings(given):
    """The defaults, overlaid with every given value that is not null or empty, typed."""
    settings = dict(DEFAULT_SETTINGS)
    settings.update({k: v for k, v in (given or {}).items() if v is not None and v != ""})
    for key in INTEGERS:
        settings[key] = int(settings[key])
    for key in BOOLEANS:
        settings[key] = truthy(settings[key])
    settings["require_nvidia_runtime"] = (not settings["simulated"] if settings["require_nvidia_runtime"] in (None, "")
                                          else truthy(settings["require_nvidia_runtime"]))
    if settings["inventory_dir"]:  # the controller's copy of the key and its reports, beside the inventory
        settings["api_key_file"] = settings["api_key_file"] or settings["inventory_dir"].rstrip("/") + "/.secrets/vllm_api_key"
        settings["artifacts_dir"] = settings["artifacts_dir"] or settings["inventory_dir"].rstrip("/") + "/.artifacts"
    if settings["api_key_file"] and not settings["ray_token_file"]:  # made once, beside the clients' key
        settings["ray_token_file"] = settings["api_key_file"].rsplit("/", 1)[0] + "/ray_auth_token" if "/" in settings["api_key_file"] else "ray_auth_token"
    return settings


class Findings:
    """The errors and warnings found while the plan is made; any error stops the play before a change."""

    def __init__(self):
        self.errors = []
        self.warnings = []

    def error(self, host, value, message):
        self.errors.append({"host": host, "value": value, "message": message})

    def warn(self, message):
        self.warnings.append(message)


def digest(data, length=16):
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:length]


def container_name(settings, role, node):
    return "%s-%s-%s" % (settings["cluster_name"], role, node)


def model_dir(models_dir, model_id):
    """Where a model's files are on a node: a path under /models as it is, else the Hugging Face cache's folder."""
    if model_id is None:
        return None
    if model_id.startswith(MODELS_MOUNT + "/"):
        return models_dir + model_id[len(MODELS_MOUNT):]
    return "%s/huggingface/hub/models--%s" % (models_dir, model_id.replace("/", "--"))


def node_paths(settings, node, model_id):
    """Where a node keeps the cluster's state and models on the host, and the files the roles write there."""
    state = "%s/%s" % (settings["state_dir"].replace("{node}", node).rstrip("/"), settings["cluster_name"])
    models = settings["models_dir"].replace("{node}", node)
    return {
        "state_dir": state,
        "models_dir": models,
        "model_dir": model_dir(models, model_id),
        # The state folders, and the models folder the containers mount (made before any container starts).
        "folders": [{"path": "%s/%s" % (state, name), "mode": mode} for name, mode in STATE_FOLDERS]
        + [{"path": "%s/container/%s" % (state, name), "mode": mode} for name, mode, dummy in CONTAINER_FOLDERS]
        + [{"path": models, "mode": "0755"}],
        "container_dir": state + "/container",  # what containers mount (commands.state_volumes); nothing else of <state> is
        "logs_dir": state + "/logs",             # the teardown's copies of every log, out of the containers' reach
        "container_logs_dir": state + "/container/logs",  # the logs the containers write (vLLM's, the fetch's)
        "non_carry_over_file": state + "/container/config/ray_non_carry_over_env_vars.json",
        "do_not_track_file": state + "/container/config/do_not_track",  # VLLM_CONFIG_ROOT: no usage report
        "launcher": state + "/container/bin/vllm-serve",
        "api_key_file": state + "/secrets/vllm_api_key",  # the clients' key: the supervisor's checks and bench's own container
        "former_api_key_file": state + "/container/keys/vllm_api_key",  # where a release before it was: in the serving containers' reach
        "door_dir": state + "/door",                     # the front door's configuration and key (root only; its container alone mounts it)
        "door_socket_dir": state + "/container/door",    # vLLM's socket, which the door alone reaches
        "compile_cache_dir": state + "/container/cache",  # vLLM's compile caches, one folder each (plan/compile_cache.py)
        "ray_token_file": state + "/container/keys/ray_auth_token",  # every Ray node's (commands.RAY_TOKEN_FILE in its container)
        "baseline_file": state + "/run/baseline.json",
        "last_known_good_file": state + "/config/last-known-good.json",  # serve.yml's record of what last served
        "canary_file": state + "/config/canary-reference.json",          # the canary's reference answers
        "bench_record_file": state + "/config/bench-last.json",          # bench.yml's last run of each profile
        "vllm_state_file": state + "/container/run/vllm.json",
        "image_info_cache": state + "/image-info",
        "fetch_script": state + "/container/bin/fetch_model.py",
        "fetch_log": state + "/container/logs/model-fetch.log",
        "hf_home": models + "/huggingface",      # the Hugging Face cache the containers read (HF_HOME=/models/huggingface)
        "vllm_log": state + "/container/logs/vllm.log",  # the head's vLLM log, as the node sees it (its container writes it)
        "build_dir": state + "/build",           # the image role's build context on the head
        "build_dockerfile": state + "/build/Dockerfile",
        "build_ca_bundle": state + "/build/ca-bundle.crt",
        "hf_token_file": state + "/container/fetch/hf_token",  # only the fetch's container mounts it
        "rsync_config": state + "/run/rsyncd.conf",
        "rsync_pid": state + "/run/rsyncd.pid",
        "rsync_secrets": state + "/secrets/rsyncd.secrets",
        "rsync_password": state + "/secrets/rsync.password",   # a worker's side of the copy's one-time secret
        "rsync_log": state + "/logs/rsyncd.log",
        "ring_netplan": "/etc/netplan/60-dgx-spark-%s-ring.yaml" % settings["cluster_name"],
        "ring_netplan_copy": state + "/config/ring-netplan.yaml",  # what was confirmed, readable by the probe
        "ring_try": state + "/run/ring-try",
        "firewall_rules": state + "/config/firewall.nft",
        "firewall_record": state + "/config/firewall-loaded.json",  # the loaded table's listing (node/firewall_state.py)
        "firewall_unit": "%s/%s" % (firewall.UNIT_DIR, firewall.unit_name(settings["cluster_name"])),
        "firewall_wants": "%s/multi-user.target.wants/%s" % (firewall.UNIT_DIR, firewall.unit_name(settings["cluster_name"])),
        "firewall_table": firewall.table_name(settings["cluster_name"]),
    }


def endpoint_url(settings, address):
    """The URL the controller reaches the endpoint at: vllm_public_url, else the address vLLM binds and vllm_port (https
    with vllm_tls, module_utils/plan/tls.py)."""
    return (settings["public_url"] or "%s://%s:%d" % ("https" if settings.get("tls") else "http", address, settings["port"])).rstrip("/")


def mounts():
    """Where the containers see the node's folders."""
    return {"state": STATE_MOUNT, "models": MODELS_MOUNT}


def reports(settings):
    """The controller's reports of a run."""
    folder = settings["artifacts_dir"]
    if not folder:
        return {"plan": None, "summary": None, "logs": None, "last_known_good": None, "canary": None, "bench": None}
    return {"plan": folder + "/plan.json", "summary": folder + "/summary.json", "logs": folder + "/logs",
            "last_known_good": folder + "/last-known-good.json", "canary": folder + "/canary-reference.json",
            "bench": folder + "/bench"}
