# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""RoCE GID tables from sysfs, and the choices NCCL makes from them.

Layout read (Linux ``drivers/infiniband/core/sysfs.c``)::

    <sysfs>/class/infiniband/<dev>/ports/<n>/state             "4: ACTIVE"
    <sysfs>/class/infiniband/<dev>/ports/<n>/phys_state        "5: LinkUp"
    <sysfs>/class/infiniband/<dev>/ports/<n>/link_layer        "Ethernet"
    <sysfs>/class/infiniband/<dev>/ports/<n>/gids/<i>          long form, "0000:...:ffff:c0a8:640a"
    <sysfs>/class/infiniband/<dev>/ports/<n>/gid_attrs/types/<i>   "IB/RoCE v1" | "RoCE v2" (EINVAL when empty)
    <sysfs>/class/infiniband/<dev>/ports/<n>/gid_attrs/ndevs/<i>   netdev name (EINVAL when none)
    <sysfs>/class/infiniband/<dev>/device/net/<netdev>

NCCL's automatic GID choice (``ncclIbGetGidIndex``, default since 2.21) is per device: the lowest
index holding a valid (non-zero, not fe80::/64) IPv4-mapped RoCE v2 GID. The index is a per-host fact
that moves when addresses change; it is never a cluster constant.
"""

from __future__ import annotations

import ipaddress
import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.errors import ProbeError

_LINK_LOCAL = ipaddress.IPv6Network("fe80::/64")


def read_text(path):
    """Return the stripped content of a sysfs attribute, or None when it cannot be read.

    Reading ``gid_attrs/types/<i>`` of an empty slot fails with EINVAL; that is normal.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def parse_gid(text):
    """Parse a GID as sysfs prints it; None for empty, zero, link-local or malformed GIDs."""
    if not text:
        return None
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return None
    if address.packed == b"\x00" * 16 or address in _LINK_LOCAL:
        return None
    return address


def gid_type(text):
    """Normalise a ``gid_attrs/types`` value to "RoCE v1" or "RoCE v2" (other text kept)."""
    if text is None:
        return None
    if text.endswith("v2"):
        return "RoCE v2"
    if text.endswith("v1"):
        return "RoCE v1"
    return text


def _named_state(text):
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'."""
    if not text:
        return None
    return text.split(":", 1)[-1].strip()


def read_port(device_dir, name, port):
    """Read one RDMA port: state, link layer, usable GIDs and NCCL's automatic GID index."""
    port_dir = os.path.join(device_dir, "ports", port)
    device_netdevs = _listdir(os.path.join(device_dir, "device", "net"))
    gids = []
    for entry in sorted(_listdir(os.path.join(port_dir, "gids")), key=lambda e: (not e.isdigit(), int(e) if e.isdigit() else 0)):
        if not entry.isdigit():
            continue
        address = parse_gid(read_text(os.path.join(port_dir, "gids", entry)))
        if address is None:
            continue
        kind = gid_type(read_text(os.path.join(port_dir, "gid_attrs", "types", entry)))
        netdev = read_text(os.path.join(port_dir, "gid_attrs", "ndevs", entry))
        mapped = address.ipv4_mapped
        gids.append({
            "index": int(entry),
            "gid": address.exploded,
            "type": kind,
            "netdev": netdev or None,
            "ipv4": str(mapped) if mapped else None,
        })
    nccl_index = None
    for gid in gids:
        if gid["ipv4"] and gid["type"] == "RoCE v2":
            nccl_index = gid["index"]
            break
    chosen = next((g for g in gids if g["index"] == nccl_index), None)
    netdev = (chosen or {}).get("netdev") or next((g["netdev"] for g in gids if g["netdev"]), None)
    if netdev is None and device_netdevs:
        netdev = device_netdevs[0]
    state_text = read_text(os.path.join(port_dir, "state"))
    return {
        "name": name,
        "port": int(port) if port.isdigit() else port,
        "state": _named_state(state_text),
        "phys_state": _named_state(read_text(os.path.join(port_dir, "phys_state"))),
        "link_layer": read_text(os.path.join(port_dir, "link_layer")),
        "netdev": netdev,
        "netdevs": device_netdevs,
        "gids": gids,
        "ipv4_addresses": sorted({g["ipv4"] for g in gids if g["ipv4"] and g["type"] == "RoCE v2"}),
        "nccl_gid_index": nccl_index,
    }


def read_devices(sysfs_root):
    """Walk ``<sysfs_root>/class/infiniband``; returns (ports, warnings).

    A missing ``class/infiniband`` is a node without RoCE: no ports and a warning, not an error.
    """
    if not os.path.isdir(sysfs_root):
        raise ProbeError("sysfs_root %s does not exist or is not a directory" % sysfs_root)
    base = os.path.join(sysfs_root, "class", "infiniband")
    if not os.path.isdir(base):
        return [], ["no RDMA devices under %s: this node has no RoCE, NCCL will use sockets" % base]
    ports = []
    for name in _listdir(base):
        device_dir = os.path.join(base, name)
        for port in _listdir(os.path.join(device_dir, "ports")):
            ports.append(read_port(device_dir, name, port))
    warnings = [] if ports else ["%s lists no RDMA ports: this node has no RoCE, NCCL will use sockets" % base]
    return ports, warnings


def nccl_choice(ports):
    """NCCL settings implied by a node's ports; returns (nccl_ib_hca, nccl_gid_index, warnings).

    ``nccl_ib_hca`` lists the ACTIVE ports with a usable GID in NCCL's exact-match form: one leading
    ``=`` for the whole list (``=rocep1s0f1:1,roceP2p1s0f1:1``); without it NCCL prefix-matches, so
    ``mlx5_1`` would also select ``mlx5_10``. ``nccl_gid_index`` is set only when every listed port
    would take the same index; otherwise NCCL must stay on its automatic per-device choice.
    """
    usable = [p for p in ports if p["state"] == "ACTIVE" and p["nccl_gid_index"] is not None]
    warnings = []
    if not usable:
        if ports:
            warnings.append("no ACTIVE RDMA port has an IPv4 RoCE v2 GID (ports: %s); NCCL will use sockets"
                            % ", ".join("%s:%s %s" % (p["name"], p["port"], p["state"]) for p in ports))
        return None, None, warnings
    hca = "=" + ",".join("%s:%s" % (p["name"], p["port"]) for p in usable)
    indexes = sorted({p["nccl_gid_index"] for p in usable})
    if len(indexes) == 1:
        return hca, indexes[0], warnings
    warnings.append("the IPv4 RoCE v2 GID sits at different indexes on this node's ports (%s): "
                    "NCCL_IB_GID_INDEX is left unset so that NCCL picks it per device"
                    % ", ".join("%s:%s=%s" % (p["name"], p["port"], p["nccl_gid_index"]) for p in usable))
    return hca, None, warnings
