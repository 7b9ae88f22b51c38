# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NCCL/Gloo/UCX environment one node needs, from its RoCE facts.

Every value here is per node: GID indexes differ between Sparks and drift after interface events,
interface names can differ, so nothing is computed once for the cluster. Sources: NCCL's
``net_ib`` and ``socket`` code (exact-match ``=`` lists, automatic GID choice since 2.21,
``NCCL_NET`` restricting the transport), NVIDIA's DGX Spark playbooks (``UCX_NET_DEVICES``,
``GLOO_SOCKET_IFNAME``, ``TP_SOCKET_IFNAME``, ``OMPI_MCA_btl_tcp_if_include`` set to the fabric interface; seed 004
exports the same set) and the porting guide
(no GPUDirect RDMA on GB10).
"""

from __future__ import annotations


class NcclEnvError(Exception):
    """The options cannot give a working NCCL environment on this node."""


def default_interface(roce):
    """The netdev of the first ACTIVE port with a usable GID, or None."""
    for port in (roce or {}).get("roce_devices", []):
        if port.get("state") == "ACTIVE" and port.get("nccl_gid_index") is not None and port.get("netdev"):
            return port["netdev"]
    return None


def nccl_env(roce, socket_ifname=None, strict=False, ring=False, subnet_prefix_len=24, roce_enabled=True, host=None):
    """Map one node's ``roce_gid_info`` result to its environment (all values strings).

    - RoCE: ``NCCL_IB_DISABLE=0``, ``NCCL_IB_HCA`` (exact-match list), ``NCCL_IB_GID_INDEX`` only when
      one index serves every listed port, ``NCCL_NET_GDR_LEVEL=LOC`` (GB10 has no GPUDirect RDMA),
      and the socket/bootstrap interface for NCCL, Gloo, TensorPipe and UCX.
    - ``strict``: ``NCCL_NET=IB``: a missing RDMA path fails the communicator instead of silently
      falling back to TCP sockets.
    - ``ring`` (switchless, 3+ nodes): ``NCCL_IB_SUBNET_AWARE_ROUTING=1`` (NCCL >= 2.30.7) with
      ``NCCL_IB_SUBNET_PREFIX_LEN`` matching the per-link subnets, and ``NCCL_ALGO=Ring``.
    - no RoCE (or ``roce_enabled`` false): sockets and Gloo only, ``NCCL_IB_DISABLE=1`` and
      ``NCCL_P2P_DISABLE=1``, as the 2-node MXFP4 deployment ran (seed 001).
    """
    who = "%s: " % host if host else ""
    roce = roce or {}
    hca = roce.get("nccl_ib_hca") if roce_enabled else None
    ifname = socket_ifname or default_interface(roce)
    if not ifname:
        raise NcclEnvError("%sno fabric interface: no ACTIVE RoCE port with an IPv4 address was found; "
                           "set spark_fabric_interfaces for this host" % who)
    env = {
        "NCCL_SOCKET_IFNAME": "=" + ifname,
        "GLOO_SOCKET_IFNAME": ifname,
        "TP_SOCKET_IFNAME": ifname,
        "UCX_NET_DEVICES": ifname,
        "OMPI_MCA_btl_tcp_if_include": ifname,
    }
    if not hca:
        if strict:
            raise NcclEnvError("%sstrict NCCL (NCCL_NET=IB) needs RoCE, but %s; turn strict off or fix the "
                               "RoCE link" % (who, "RoCE is disabled" if not roce_enabled else "no ACTIVE port has an IPv4 RoCE v2 GID"))
        if ring:
            raise NcclEnvError("%sa switchless ring needs RoCE on every node, but %s" % (
                who, "RoCE is disabled" if not roce_enabled else "no ACTIVE port has an IPv4 RoCE v2 GID"))
        env["NCCL_IB_DISABLE"] = "1"
        env["NCCL_P2P_DISABLE"] = "1"  # the sockets-only settings of the 2-node MXFP4 deployment (seed 001)
        return env
    env.update({
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": hca,
        "NCCL_NET_GDR_LEVEL": "LOC",
    })
    if roce.get("nccl_gid_index") is not None:
        env["NCCL_IB_GID_INDEX"] = str(roce["nccl_gid_index"])
    if strict:
        env["NCCL_NET"] = "IB"
    if ring:
        try:
            prefix = int(subnet_prefix_len)
        except (TypeError, ValueError):
            prefix = 0
        if not 1 <= prefix <= 32:
            raise NcclEnvError("%ssubnet_prefix_len must be 1..32 (the prefix of the ring's per-link subnets), got %r"
                               % (who, subnet_prefix_len))
        env.update({
            "NCCL_IB_SUBNET_AWARE_ROUTING": "1",
            "NCCL_IB_SUBNET_PREFIX_LEN": str(prefix),
            "NCCL_ALGO": "Ring",
        })
    return env
