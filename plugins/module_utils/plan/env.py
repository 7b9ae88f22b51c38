# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's environment: the NCCL transport (fact 8), each node's own values (facts 6, 8, 9) and the values
identical on every rank (facts 5, 7)."""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import MODELS_MOUNT, STATE_MOUNT
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.nccl_env import nccl_env, NcclEnvError

# Names vLLM's Ray executor must never copy from the driver over a worker's own value (fact 7).
ALWAYS_NODE_LOCAL = ("VLLM_HOST_IP",)
# Secrets stay in the head's driver process; Ray must not spread them to the workers.
SECRETS = ("VLLM_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def transport(inputs, findings):
    """Decide RoCE or sockets for the cluster (fact 8): all nodes alike, or refuse."""
    settings = inputs["settings"]
    mode = settings["nccl_transport"]
    if mode == "socket":
        if settings["nccl_strict"]:
            findings.warn("vllm_nccl_transport is socket, so strict mode (vllm_nccl_strict, NCCL_NET=IB) is off for this run: "
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
            findings.error(name, None, "%s has no ACTIVE RoCE port with an IPv4 RoCE v2 GID, and vllm_nccl_transport is roce; "
                           "bring up the ConnectX link and give it an IPv4 address (ibdev2netdev, ip addr), or use socket" % name)
        return True
    if with_roce and without:
        for name in without:
            findings.error(name, None, "%s has no usable RoCE GID while %s have RoCE: NCCL would use sockets for the whole "
                           "cluster. Fix the link on %s, or set vllm_nccl_transport: socket" % (name, ", ".join(with_roce), name))
        return True
    return bool(with_roce)


def node_environment(inputs, findings, use_roce):
    """Per-node environment (fact 6, 8): VLLM_HOST_IP and the NCCL/Gloo/UCX settings of that node."""
    settings = inputs["settings"]
    ring = inputs.get("ring") or {}  # the planned ring (plan_inventory.ring_plan): its links' one prefix length
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
                                subnet_prefix_len=ring.get("prefix_len", 24), roce_enabled=use_roce, host=name))
        except NcclEnvError as exc:
            findings.error(name, ifname, str(exc))
        env_by_node[name] = env
        ports = roce.get("roce_devices") or []
        if use_roce and ports and node.get("fabric_ip") and not ring:
            carrying = [p for p in ports if p.get("state") == "ACTIVE" and str(node["fabric_ip"]) in (p.get("ipv4_addresses") or [])]
            if not carrying:
                addresses = sorted({a for p in ports if p.get("state") == "ACTIVE" for a in (p.get("ipv4_addresses") or [])})
                findings.error(name, node["fabric_ip"], "%s: spark_fabric_ip %s is not carried by any ACTIVE RoCE port (they carry %s); "
                               "set spark_fabric_ip to the ConnectX address, or fix the link's address"
                               % (name, node["fabric_ip"], ", ".join(addresses) or "no IPv4 address"))
        fast = {p.get("netdev") for p in ports if p.get("netdev")} | {n for p in ports for n in (p.get("netdevs") or [])}
        chosen = ifname or env.get("GLOO_SOCKET_IFNAME")
        if chosen and node.get("roce") is not None and chosen not in fast:
            if ring:
                findings.warn("%s: sockets and NCCL bootstrap use %s, not a ConnectX port (expected in a switchless ring: "
                              "non-adjacent nodes share no link); NCCL data goes over RoCE with subnet-aware routing" % (name, chosen))
            else:
                note = " (expected on the simulated cluster)" if settings["simulated"] else ""
                findings.warn("%s: the fabric interface %s is not a ConnectX RoCE port; NCCL traffic on a slow NIC gave 6 tok/s "
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
    # Read-only in the containers: holds ray_non_carry_over_env_vars.json and do_not_track, which stops vLLM's usage
    # report (its thread would write usage_stats.json there, as Ray's is off by RAY_USAGE_STATS_ENABLED).
    env["VLLM_CONFIG_ROOT"] = STATE_MOUNT + "/config"
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


def non_carry_over(node_env):
    """What ray_non_carry_over_env_vars.json lists: every per-node name, VLLM_HOST_IP and the secrets (fact 7)."""
    return sorted(set(k for env in node_env.values() for k in env) | set(ALWAYS_NODE_LOCAL) | set(SECRETS))
