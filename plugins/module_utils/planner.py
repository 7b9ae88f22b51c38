# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner: inventory + probe facts + a model profile -> one plan. Pure; no I/O.

The plan holds, per node, its rank, fabric IP, environment (the part identical on every rank and
the per-node part), container specs and commands; for the cluster the backend, parallel sizes,
memory plan, vLLM argv, endpoint and a config hash per node. Every check that fails is listed in
``errors`` (host, value, message with the remedy); the play stops before any change when there are
any. Field facts encoded here are numbered as in DESIGN.md.
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils import flags as flag_utils
from ansible_collections.dgx_spark.vllm.plugins.module_utils import memory_plan
from ansible_collections.dgx_spark.vllm.plugins.module_utils.nccl_env import NcclEnvError, nccl_env
from ansible_collections.dgx_spark.vllm.plugins.module_utils.ring import RingError, prefix_len

LABEL = "dgx_spark.vllm"
STATE_MOUNT = "/dgx-spark"
MODELS_MOUNT = "/models"
OBJECT_STORE_BYTES = 1073741824  # fact 5: Ray would reserve ~30% of RAM for plasma otherwise
RAY_PORT = 6379
MASTER_PORT = 29501
GIB = 1024 ** 3
# The pool vLLM sizes on a GB10 is CUDA's total, 119.67 GiB: "Free memory on device cuda:0 (11.19/119.67 GiB)"
# (seed 001, line 20), and "119.7 GB GPU memory per node" (seed 003, line 10); MemTotal says 121.7 GiB.
GB10_CUDA_TOTAL_BYTES = int(119.67 * GIB)
# What the serving processes use beside vLLM's pool (CUDA context, API server, Ray): seed 004 had 18.2 GiB
# available while serving at 0.75 on a node that starts at 117.3 GiB available (our captured idle GB10):
# 117.3 - ceil(119.67 x 0.75) - 18.2 = 9.35 GiB.
RUNTIME_BYTES = int(9.35 * GIB)
# The 6 GB warning floor seed 004 kept while pushing the context to 1M tokens (fact 21: a starved Spark stops
# answering SSH).
HEADROOM_FLOOR_BYTES = 6 * GIB
# The first and last ranks hold more than an even share: seed 000's head held an 84 GB shard of a 243 GB model
# on 3 nodes (line 6), 84 / 81 = 1.037.
EDGE_RANK_WEIGHT_FACTOR = 84.0 / 81.0
# An idle Spark as captured (tests/unit/fixtures/meminfo/gb10-idle.txt): the offline plan's memory.
IDLE_GB10 = {"mem_total_bytes": 127602792 * 1024, "mem_available_bytes": 122997964 * 1024, "unified": True,
             "gpu": {"name": "NVIDIA GB10"}, "gpu_process_bytes": 0}

DEFAULT_SETTINGS = {
    "cluster_name": "dgx-spark",
    "image": None,
    "port": 8000,
    "public_url": None,
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
    "nccl_debug": True,
    "ring": None,               # {"subnet_prefix_len": 24} for a switchless ring
    "simulated": False,
    "offline": False,           # plan without probe facts (plan.yml -e dgx_spark_offline=true): placeholders
    "gpus_per_node": 1,
    "ray_port": RAY_PORT,
    "master_port": MASTER_PORT,
    "api_key_file": None,
    "memory_headroom_floor_gib": None,  # None: the profile's memory.headroom_floor_bytes, else HEADROOM_FLOOR_BYTES
}

# Names vLLM's Ray executor must never copy from the driver over a worker's own value (fact 7).
ALWAYS_NODE_LOCAL = ("VLLM_HOST_IP",)
# Secrets stay in the head's driver process; Ray must not spread them to the workers.
SECRETS = ("VLLM_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


class Plan:
    """Collects errors and warnings while the plan is built."""

    def __init__(self):
        self.errors = []
        self.warnings = []

    def error(self, host, value, message):
        self.errors.append({"host": host, "value": value, "message": message})

    def warn(self, message):
        self.warnings.append(message)


def digest(data, length=16):
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:length]


def check_inventory(inputs, plan):
    """Groups, fabric IPs, backend: what can be checked before any probe."""
    heads = inputs.get("head_hosts") or []
    if len(heads) != 1:
        plan.error("spark_head", heads, "the inventory needs exactly one host in spark_head, found %d (%s); "
                   "put the node that serves the endpoint there" % (len(heads), ", ".join(heads) or "none"))
    seen = {}
    for name in inputs.get("order", []):
        node = inputs["nodes"].get(name, {})
        ip = node.get("fabric_ip")
        if not ip:
            plan.error(name, None, "%s has no spark_fabric_ip; set it to the node's address on the ConnectX link" % name)
            continue
        try:
            address = ipaddress.ip_address(str(ip))
        except ValueError:
            plan.error(name, ip, "%s: spark_fabric_ip %r is not an IP address" % (name, ip))
            continue
        if address.version != 4:
            plan.error(name, ip, "%s: spark_fabric_ip %s must be IPv4 (RoCE v2 GIDs, Ray and NCCL bootstrap use IPv4)" % (name, ip))
        if str(address) in seen:
            plan.error(name, ip, "%s and %s have the same spark_fabric_ip %s; each node needs its own" % (seen[str(address)], name, ip))
        seen[str(address)] = name
    backend = inputs.get("backend")
    if backend not in ("ray", "mp"):
        plan.error("all", backend, "vllm_backend must be ray or mp, got %r" % (backend,))
    settings = inputs["settings"]
    if settings["nccl_transport"] not in ("auto", "roce", "socket"):
        plan.error("all", settings["nccl_transport"], "vllm_nccl_transport must be auto, roce or socket, got %r" % settings["nccl_transport"])
    for key, value in (inputs.get("extra_env") or {}).items():
        if key == "RAY_ADDRESS" and str(value).strip().lower().startswith("ray://"):
            plan.error("all", value, "RAY_ADDRESS=%s is a Ray Client address: vLLM would run as a remote client and silently "
                       "serve on one GPU. The collection runs vllm serve inside the head's container; remove it" % value)


def parallel_sizes(inputs, plan):
    profile = inputs["profile"]
    parallel = profile.get("parallel", {})
    overrides = inputs.get("overrides") or {}
    tp = int(overrides.get("tensor_parallel_size") or parallel.get("tensor", 1))
    pp = int(overrides.get("pipeline_parallel_size") or parallel.get("pipeline", 1))
    dp = int(overrides.get("data_parallel_size") or parallel.get("data", 1))
    ep = bool(parallel.get("expert", False))
    nodes = len(inputs.get("order", []))
    gpus = nodes * inputs["settings"]["gpus_per_node"]
    if tp * pp * dp != gpus:
        plan.error("all", {"tp": tp, "pp": pp, "dp": dp},
                   "TP x PP x DP = %d x %d x %d = %d, but the inventory has %d node(s) with %d GPU(s) each = %d; profile %s "
                   "is for %s node(s): add or remove nodes, or choose another profile"
                   % (tp, pp, dp, tp * pp * dp, nodes, inputs["settings"]["gpus_per_node"], gpus, profile["name"],
                      parallel.get("nodes", "?")))
    return {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "data_parallel_size": dp,
            "expert_parallel": ep, "world_size": tp * pp * dp, "nodes": nodes, "gpus": gpus}


def transport(inputs, plan):
    """Decide RoCE or sockets for the cluster (fact 8): all nodes alike, or refuse."""
    settings = inputs["settings"]
    mode = settings["nccl_transport"]
    if mode == "socket":
        if settings["nccl_strict"]:
            plan.warn("vllm_nccl_transport is socket, so strict mode (vllm_nccl_strict, NCCL_NET=IB) is off for this run: "
                      "NCCL uses TCP sockets by choice")
        return False
    with_roce, without = [], []
    for name in inputs["order"]:
        roce = inputs["nodes"][name].get("roce")
        if roce is None:
            continue
        (with_roce if roce.get("nccl_ib_hca") else without).append(name)
    if not with_roce and not without:
        return mode == "roce" or settings["offline"]
    if mode == "roce" and without:
        for name in without:
            plan.error(name, None, "%s has no ACTIVE RoCE port with an IPv4 RoCE v2 GID, and vllm_nccl_transport is roce; "
                       "bring up the ConnectX link and give it an IPv4 address (ibdev2netdev, ip addr), or use socket" % name)
        return True
    if with_roce and without:
        for name in without:
            plan.error(name, None, "%s has no usable RoCE GID while %s have RoCE: NCCL would use sockets for the whole "
                       "cluster. Fix the link on %s, or set vllm_nccl_transport: socket" % (name, ", ".join(with_roce), name))
        return True
    return bool(with_roce)


def node_environment(inputs, plan, use_roce):
    """Per-node environment (fact 6, 8): VLLM_HOST_IP and the NCCL/Gloo/UCX settings of that node."""
    settings = inputs["settings"]
    ring = settings.get("ring") or {}
    if ring and not ring.get("subnet_prefix_len"):
        try:
            ring = dict(ring, subnet_prefix_len=prefix_len(ring.get("links")))
        except (RingError, ValueError, KeyError, TypeError) as exc:
            plan.error("all", ring, "spark_fabric_ring: %s" % exc)
            ring = dict(ring, subnet_prefix_len=24)
    env_by_node = {}
    for name in inputs["order"]:
        node = inputs["nodes"][name]
        roce = node.get("roce") or {}
        interfaces = node.get("fabric_interfaces") or []
        ifname = interfaces[0] if interfaces else None
        env = {"VLLM_HOST_IP": str(node.get("fabric_ip"))}
        if settings["offline"] and not node.get("roce"):
            roce = {"nccl_ib_hca": "<ACTIVE RoCE ports, probed on %s>" % name, "nccl_gid_index": "<probed on %s>" % name}
        try:
            env.update(nccl_env(roce, socket_ifname=ifname, strict=settings["nccl_strict"] and settings["nccl_transport"] != "socket", ring=bool(ring),
                                subnet_prefix_len=ring.get("subnet_prefix_len", 24), roce_enabled=use_roce, host=name))
        except NcclEnvError as exc:
            plan.error(name, ifname, str(exc))
        env_by_node[name] = env
        ports = roce.get("roce_devices") or []
        if use_roce and ports and node.get("fabric_ip") and not ring:
            carrying = [p for p in ports if p.get("state") == "ACTIVE" and str(node["fabric_ip"]) in (p.get("ipv4_addresses") or [])]
            if not carrying:
                addresses = sorted({a for p in ports if p.get("state") == "ACTIVE" for a in (p.get("ipv4_addresses") or [])})
                plan.error(name, node["fabric_ip"], "%s: spark_fabric_ip %s is not carried by any ACTIVE RoCE port (they carry %s); "
                           "set spark_fabric_ip to the ConnectX address, or fix the link's address"
                           % (name, node["fabric_ip"], ", ".join(addresses) or "no IPv4 address"))
        fast = {p.get("netdev") for p in ports if p.get("netdev")} | {n for p in ports for n in (p.get("netdevs") or [])}
        chosen = ifname or env.get("GLOO_SOCKET_IFNAME")
        if chosen and node.get("roce") is not None and chosen not in fast:
            if ring:
                plan.warn("%s: sockets and NCCL bootstrap use %s, not a ConnectX port (expected in a switchless ring: "
                          "non-adjacent nodes share no link); NCCL data goes over RoCE with subnet-aware routing" % (name, chosen))
            else:
                note = " (expected on the simulated cluster)" if settings["simulated"] else ""
                plan.warn("%s: the fabric interface %s is not a ConnectX RoCE port; NCCL traffic on a slow NIC gave 6 tok/s "
                          "in the field%s" % (name, chosen, note))
    return env_by_node


def common_environment(inputs, parallel, use_roce):
    """Identical on every rank, in every container at start (fact 7)."""
    env = {}
    if inputs["backend"] == "ray":
        env.update({
            "RAY_memory_monitor_refresh_ms": "0",       # fact 5: Ray's OOM killer kills rank 0 on unified memory
            "RAY_prestart_worker_first_driver": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
        })
    env["VLLM_CONFIG_ROOT"] = STATE_MOUNT + "/config"  # holds ray_non_carry_over_env_vars.json
    env["HF_HOME"] = MODELS_MOUNT + "/huggingface"
    # The model role has made the weights complete on every node before launch: vLLM never reaches for the hub
    # (a node that would download on its own loads minutes after the others and times them out).
    env["HF_HUB_OFFLINE"] = "1"
    if use_roce and inputs["settings"]["nccl_debug"]:
        env["NCCL_DEBUG"] = "INFO"                        # the transport check reads it from every rank's log
        env["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
    for key, value in (inputs["profile"].get("env") or {}).items():
        env[key] = str(value)
    for key, value in (inputs.get("extra_env") or {}).items():
        if value is None:  # vllm_extra_env: {NAME: null} takes a variable out (restores a write-up that lacks it)
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def serve_flags(inputs, plan, parallel):
    """The vLLM flags of the profile, gated by the image (fact 13)."""
    profile = inputs["profile"]
    vllm = profile.get("vllm", {})
    overrides = inputs.get("overrides") or {}
    flags = {}
    flags.update(vllm.get("flags") or {})
    flags.update(inputs.get("extra_flags") or {})
    kv_dtype = vllm.get("kv_cache_dtype")
    if kv_dtype and kv_dtype != "auto":
        flags.setdefault("--kv-cache-dtype", kv_dtype)
    if parallel["expert_parallel"]:
        flags.setdefault("--enable-expert-parallel", True)
    image = inputs.get("image_info") or {}
    options = image.get("options")
    if options:
        kept, dropped, errors = flag_utils.gate(flags, options, vllm.get("optional_flags") or (), inputs["settings"].get("image") or "the image",
                                                image.get("version"))
        for message in dropped:
            plan.warn(message)
        for message in errors:
            plan.error("all", None, message)
        flags = kept
        if inputs["backend"] == "mp" and "--nnodes" not in options:
            plan.error("all", "mp", "backend mp needs vLLM's --nnodes, which %s (vLLM %s) lacks; use vllm_backend: ray or a newer image"
                       % (inputs["settings"].get("image"), image.get("version")))
        parsers = image.get("reasoning_parsers")
        name = flags.get("--reasoning-parser")
        if parsers and name and name not in parsers and not flags.get("--reasoning-parser-plugin"):
            plan.error("all", name, "reasoning parser %s is not in %s (it has %s); a wrong parser fails silently"
                       % (name, inputs["settings"].get("image"), ", ".join(parsers)))
        tools = image.get("tool_parsers")
        name = flags.get("--tool-call-parser")
        if tools and name and name not in tools and not flags.get("--tool-parser-plugin"):
            plan.error("all", name, "tool-call parser %s is not in %s (it has %s)" % (name, inputs["settings"].get("image"), ", ".join(tools)))
    utilization = float(overrides.get("gpu_memory_utilization") or vllm.get("gpu_memory_utilization", 0.8))
    max_len = overrides.get("max_model_len") or vllm.get("max_model_len")
    return flags, utilization, (int(max_len) if max_len else None)


def model_revision(inputs):
    """The revision to fetch and serve: the inventory's override, else the profile's (None: the hub's main)."""
    return (inputs.get("overrides") or {}).get("model_revision") or inputs["profile"]["model"].get("revision")


def serve_argv(inputs, parallel, flags, utilization, max_len, rank, head_ip):
    profile = inputs["profile"]
    model = profile["model"]
    argv = ["vllm", "serve", model["id"]]
    if model.get("served_name"):  # else vLLM serves the model under its id, as the write-ups that name none
        argv += ["--served-model-name", model["served_name"]]
    argv += ["--host", "0.0.0.0", "--port", str(inputs["settings"]["port"]),
             "--tensor-parallel-size", str(parallel["tensor_parallel_size"])]
    if parallel["pipeline_parallel_size"] > 1:
        argv += ["--pipeline-parallel-size", str(parallel["pipeline_parallel_size"])]
    if parallel["data_parallel_size"] > 1:
        argv += ["--data-parallel-size", str(parallel["data_parallel_size"])]
    argv += ["--gpu-memory-utilization", "%g" % utilization]
    if max_len:
        argv += ["--max-model-len", str(max_len)]
    revision = model_revision(inputs)
    if revision:
        argv += ["--revision", revision]
    argv += flag_utils.to_argv(flags)
    if inputs["backend"] == "ray":
        argv += ["--distributed-executor-backend", "ray"]
    else:
        argv += ["--distributed-executor-backend", "mp", "--nnodes", str(parallel["nodes"]), "--node-rank", str(rank),
                 "--master-addr", head_ip, "--master-port", str(inputs["settings"]["master_port"])]
        if rank > 0:
            argv.append("--headless")
    return argv


def cuda_total(memory):
    """What CUDA reports as the device's memory: on a GB10 (unified) 119.67 GiB, else MemTotal."""
    total = int(memory.get("mem_total_bytes") or 0)
    gpu = memory.get("gpu") or {}
    if memory.get("unified") and "GB10" in str(gpu.get("name") or ""):
        return min(total, GB10_CUDA_TOTAL_BYTES)
    return total


def node_memory(inputs, node_hashes):
    """Each probed node's memory facts for the memory plan, crediting a deployment of ours that runs unchanged.

    A node whose running container carries the planned config hash keeps what its processes hold
    (``gpu_process_bytes``: vLLM's pool is invisible to MemAvailable's accounting of free memory); a node running
    another configuration of ours gets no credit: its memory is freed only by a clean stop (fact 3).
    """
    nodes = {}
    for name in inputs["order"]:
        facts = inputs["nodes"][name]
        memory = facts.get("memory")
        if not memory and inputs["settings"]["offline"]:
            memory = IDLE_GB10  # plan.yml before the nodes answer: what an idle Spark offers
        if not memory:
            continue
        serving = [h for h in (facts.get("serving_hashes") or []) if h]
        unchanged = bool(serving) and node_hashes.get(name) in serving
        nodes[name] = dict(memory, cuda_total_bytes=cuda_total(memory), unchanged=unchanged,
                           held_bytes=int(memory.get("gpu_process_bytes") or 0) if unchanged else 0)
    return nodes


def memory(inputs, plan, parallel, flags, utilization, max_len, node_hashes, common):
    profile = inputs["profile"]
    config = inputs.get("model_config") or (profile.get("model") or {}).get("config")
    if not config:
        plan.warn("no config.json for %s (model not on the head yet, and the profile carries no architecture): "
                  "the memory plan is skipped" % profile["model"]["id"])
        return None
    tp = parallel["tensor_parallel_size"]
    for reason in memory_plan.head_divisibility(config, tp):
        if (profile.get("parallel") or {}).get("allow_uneven_heads"):
            plan.warn("%s; allowed by profile %s: %s" % (reason, profile["name"],
                                                         profile["parallel"].get("uneven_heads_reason", "the image shards them")))
        else:
            plan.error("all", tp, "%s of %s; vLLM would fail inside the engine. Choose a TP that divides them "
                       "(another node count) or an image that shards heads unevenly" % (reason, profile["model"]["id"]))
    model_max = memory_plan._int(memory_plan.text_config(config), "max_position_embeddings", "max_sequence_length")
    allow_long = common.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1"
    if max_len and model_max and max_len > model_max and not allow_long:
        plan.error("all", max_len, "max_model_len %d exceeds the model's %d tokens (max_position_embeddings of %s); vLLM "
                   "refuses it. Lower vllm_max_model_len to %d or less, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the "
                   "profile's env" % (max_len, model_max, profile["model"]["id"], model_max))
    nodes = node_memory(inputs, node_hashes)
    mem = profile.get("memory") or {}
    floor_gib = inputs["settings"].get("memory_headroom_floor_gib")
    floor = int(float(floor_gib) * GIB) if floor_gib not in (None, "") else mem.get("headroom_floor_bytes", HEADROOM_FLOOR_BYTES)
    weights = inputs.get("weights_bytes") or profile["model"].get("weights_bytes") or 0
    try:
        result = memory_plan.plan(
            config, nodes, tp=tp, pp=parallel["pipeline_parallel_size"], utilization=utilization, max_model_len=max_len,
            kv_dtype=(profile.get("vllm") or {}).get("kv_cache_dtype", "auto"), model_dtype=profile["model"].get("dtype", "bfloat16"),
            weights_bytes=weights, overhead_bytes=mem.get("overhead_bytes", 4 * GIB), kv_cache_bytes=mem.get("kv_cache_bytes"),
            block_size=mem.get("block_size", memory_plan.DEFAULT_BLOCK_SIZE), order=[n for n in inputs["order"] if n in nodes],
            runtime_bytes=mem.get("runtime_bytes", RUNTIME_BYTES), headroom_floor_bytes=floor,
            edge_factor=mem.get("edge_rank_weight_factor", EDGE_RANK_WEIGHT_FACTOR),
            proven_utilization=mem.get("proven_utilization"), mamba_dtype=flags.get("--mamba-ssm-cache-dtype"),
            allow_long_context=allow_long)
    except memory_plan.MemoryPlanError as exc:
        plan.error("all", None, "memory plan of %s: %s" % (profile["name"], exc))
        return None
    result["config_source"] = "config.json on the head" if inputs.get("model_config") else "the profile's model.config"
    result["config_citation"] = profile["model"].get("config_source")
    result["proven_utilization_source"] = mem.get("proven_utilization_source")
    if nodes:
        for reason in result["reasons"]:
            host = reason.split(":", 1)[0]
            plan.error(host, utilization, reason)
    for warning in result["warnings"]:
        plan.warn(warning)
    return result


def container_base(inputs, name, role, env):
    settings = inputs["settings"]
    state = "%s/%s" % (settings["state_dir"].replace("{node}", name).rstrip("/"), settings["cluster_name"])
    volumes = ["%s:%s" % (state, STATE_MOUNT), "%s:%s:ro" % (settings["models_dir"].replace("{node}", name), MODELS_MOUNT)]
    volumes += (inputs["profile"].get("container") or {}).get("extra_volumes") or []
    network_mode = settings["network_mode"].replace("{node}", name)
    spec = {
        "name": "%s-%s-%s" % (settings["cluster_name"], role, name),
        "image": settings["image"],
        "env": dict(sorted(env.items())),
        "network_mode": network_mode,
        "ipc_mode": settings["ipc_mode"],
        "shm_size": (inputs["profile"].get("container") or {}).get("shm_size") or settings["shm_size"],
        "devices": list(settings["devices"] or []),
        "capabilities": list(settings["capabilities"] or []),
        "ulimits": list(settings["ulimits"] or []),
        "gpus": None if str(settings["gpus"]).lower() in ("none", "false", "") else settings["gpus"],
        "volumes": volumes,
        "init": True,
        "restart_policy": "no",  # fact 16: keep exited containers and their logs; no --rm
        "labels": {
            LABEL + ".managed": "true",
            LABEL + ".cluster": settings["cluster_name"],
            LABEL + ".node": name,
            LABEL + ".role": role,
        },
    }
    return spec, state


def make_plan(inputs, stage="full"):
    """Build the plan. ``stage="inventory"`` checks only what needs no probe facts."""
    inputs = copy.deepcopy(inputs)
    settings = dict(DEFAULT_SETTINGS)
    settings.update({k: v for k, v in (inputs.get("settings") or {}).items() if v is not None and v != ""})
    for key in ("port", "ray_port", "master_port", "gpus_per_node"):
        settings[key] = int(settings[key])
    for key in ("nccl_strict", "nccl_debug", "simulated", "offline"):
        settings[key] = str(settings[key]).lower() in ("1", "true", "yes", "on")
    inputs["settings"] = settings
    plan = Plan()
    check_inventory(inputs, plan)
    parallel = parallel_sizes(inputs, plan)
    if settings["offline"]:
        plan.warn("offline plan: no node was probed; RoCE ports, GID indexes and the image's flags are placeholders or "
                  "unchecked, and memory is planned for an idle Spark (117.3 GiB available). Run plan.yml with the nodes "
                  "reachable for the real plan")
    order = inputs.get("order", [])
    head = (inputs.get("head_hosts") or [None])[0]
    vllm = inputs["profile"].get("vllm") or {}
    overrides = inputs.get("overrides") or {}
    result = {"stage": stage, "profile": inputs["profile"]["name"], "backend": inputs.get("backend"), "head": head,
              "nodes_order": order, "parallel": parallel,
              "model": {"id": inputs["profile"]["model"]["id"], "served_name": inputs["profile"]["model"].get("served_name")},
              "gpu_memory_utilization": float(overrides.get("gpu_memory_utilization") or vllm.get("gpu_memory_utilization", 0.8))}
    utilization = result["gpu_memory_utilization"]
    if not 0 < utilization <= 1:
        plan.error("all", utilization, "gpu_memory_utilization must be in (0, 1], got %g; vLLM requests that share of "
                   "each node's memory" % utilization)
    if stage == "inventory" or plan.errors:
        result.update(ok=not plan.errors, errors=plan.errors, warnings=plan.warnings)
        return result

    use_roce = transport(inputs, plan)
    node_env = node_environment(inputs, plan, use_roce)
    common = common_environment(inputs, parallel, use_roce)
    flags, utilization, max_len = serve_flags(inputs, plan, parallel)
    head_ip = str(inputs["nodes"][head]["fabric_ip"])
    image = inputs.get("image_info") or {}
    non_carry = sorted(set(k for env in node_env.values() for k in env) | set(ALWAYS_NODE_LOCAL) | set(SECRETS))
    if not settings["image"]:
        plan.error("all", None, "no image: set vllm_image (a vLLM image with Ray), or let the image role build one")

    cluster_hash = digest({"image": image.get("id") or settings["image"], "common": common, "backend": inputs["backend"],
                           "head_ip": head_ip, "parallel": parallel, "settings": {k: settings[k] for k in (
                               "network_mode", "ipc_mode", "shm_size", "devices", "gpus", "capabilities", "ulimits", "ray_port")}})
    nodes = {}
    for rank, name in enumerate(order):
        node = inputs["nodes"][name]
        env = dict(common)
        env.update(node_env[name])
        entry = {
            "rank": rank,
            "is_head": name == head,
            "fabric_ip": str(node["fabric_ip"]),
            "env_common": dict(sorted(common.items())),
            "env_node": dict(sorted(node_env[name].items())),
            "env": dict(sorted(env.items())),
            "containers": [],
        }
        argv = serve_argv(inputs, parallel, flags, utilization, max_len, rank, head_ip)
        if inputs["backend"] == "ray":
            spec, state = container_base(inputs, name, "ray", env)
            object_store = (inputs["profile"].get("ray") or {}).get("object_store_memory", OBJECT_STORE_BYTES)
            command = ["ray", "start", "--node-ip-address", entry["fabric_ip"], "--num-gpus", str(settings["gpus_per_node"]),
                       "--object-store-memory", str(object_store), "--disable-usage-stats", "--block"]
            if name == head:
                command[2:2] = ["--head", "--port", str(settings["ray_port"]), "--include-dashboard=false"]
            else:
                command[2:2] = ["--address", "%s:%d" % (head_ip, settings["ray_port"])]
            spec["command"] = command
            entry["containers"].append(spec)
            if name == head:
                entry["serve"] = {"container": spec["name"], "argv": argv, "log": STATE_MOUNT + "/logs/vllm.log"}
        else:
            spec, state = container_base(inputs, name, "vllm", env)
            spec["command"] = [STATE_MOUNT + "/bin/vllm-serve"] + argv[2:]
            entry["containers"].append(spec)
            entry["serve"] = {"container": spec["name"], "argv": argv, "log": None}
        entry["state_dir"] = state
        entry["models_dir"] = settings["models_dir"].replace("{node}", name)
        node_hash = digest({"cluster": cluster_hash, "containers": entry["containers"]})
        for spec in entry["containers"]:
            spec["labels"][LABEL + ".config_hash"] = node_hash
        entry["config_hash"] = node_hash
        if "serve" in entry:
            entry["serve"]["config_hash"] = node_hash
        nodes[name] = entry

    # With Ray, vLLM runs inside the head's Ray container and its ranks in every node's: any node's
    # change restarts it.
    if inputs["backend"] == "ray" and head in nodes:
        serve = nodes[head]["serve"]
        serve["config_hash"] = digest({"argv": serve["argv"], "nodes": [nodes[n]["config_hash"] for n in order]})

    mem = memory(inputs, plan, parallel, flags, utilization, max_len, {n: nodes[n]["config_hash"] for n in nodes}, common)
    port = settings["port"]
    public = settings["public_url"] or "http://%s:%d" % (head_ip, port)
    result.update({
        "ok": not plan.errors,
        "errors": plan.errors,
        "warnings": plan.warnings,
        "deviations": inputs["profile"].get("deviations") or [],
        "cluster": {
            "name": settings["cluster_name"],
            "image": settings["image"],
            "image_id": image.get("id"),
            "vllm_version": image.get("version"),
            "transport": "roce" if use_roce else "socket",
            "nccl_strict": bool(settings["nccl_strict"] and use_roce),
            "expected_ray_nodes": len(order) if inputs["backend"] == "ray" else None,
            "expected_ray_gpus": len(order) * settings["gpus_per_node"] if inputs["backend"] == "ray" else None,
            "expected_ips": [nodes[n]["fabric_ip"] for n in order],
            "head_ip": head_ip,
            "ray_address": "%s:%d" % (head_ip, settings["ray_port"]) if inputs["backend"] == "ray" else None,
            "non_carry_over_env_vars": non_carry,
            "env_common": dict(sorted(common.items())),
            "vllm_argv": nodes[head]["serve"]["argv"] if head in nodes else [],
            "serve_config_hash": nodes[head]["serve"]["config_hash"] if head in nodes else None,
            "endpoint": {
                "url": public.rstrip("/"),
                "port": port,
                "served_model_name": inputs["profile"]["model"].get("served_name") or inputs["profile"]["model"]["id"],
                "api_key_env": "VLLM_API_KEY",
                "api_key_file": settings["api_key_file"],
            },
            "model": {"id": inputs["profile"]["model"]["id"], "served_name": inputs["profile"]["model"].get("served_name"),
                      "revision": model_revision(inputs)},
            "eager_reason": (inputs["profile"].get("vllm") or {}).get("eager_reason"),
            "smoke_tests": inputs["profile"].get("smoke_tests") or [],
            "memory": mem,
        },
        "nodes": nodes,
    })
    return result
