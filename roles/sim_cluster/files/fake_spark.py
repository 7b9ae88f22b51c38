# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a simulated DGX Spark's sysfs RDMA tree (and nothing else) under ROOT.

Four RoCE devices as on a Spark (rocep1s0f0, rocep1s0f1, roceP2p1s0f0, roceP2p1s0f1 with their
netdevs); the fabric port rocep1s0f1 is ACTIVE and carries the node's IPv4 address as a RoCE v1/v2
GID pair; the others are DOWN with link-local GIDs only. With --gid-index 5 a global IPv6 address
takes indexes 2/3 and pushes the IPv4 RoCE v2 GID to 5, as on a Spark with an extra IPv6 address.
Attributes the kernel refuses to read (types/ndevs of empty slots, EINVAL) are directories here, so
reading them fails too. Prints {"changed": bool}; an unchanged tree is left untouched.

In a switchless ring both ports of the first ConnectX (rocep1s0f0 on enp1s0f0np0, rocep1s0f1 on
enp1s0f1np1) are ACTIVE, each carrying the address of its link: PORTS is then NETDEV=IPV4,... (the ring's
addresses from the inventory's links, as a Spark's kernel adds them to the GID table once netplan applies them).

Usage: fake_spark.py ROOT IPV4|NETDEV=IPV4,... GID_INDEX
"""

import ipaddress
import json
import os
import shutil
import sys

DEVICES = [("rocep1s0f0", "enp1s0f0np0"), ("rocep1s0f1", "enp1s0f1np1"),
           ("roceP2p1s0f0", "enP2p1s0f0np0"), ("roceP2p1s0f1", "enP2p1s0f1np1")]
FABRIC = "rocep1s0f1"
SLOTS = 16


def table(ipv4, active, gid_index, mac_suffix):
    link_local = "fe80::4ebb:47ff:fe%02x:%04x" % (mac_suffix, int(ipaddress.IPv4Address(ipv4)) & 0xFFFF)
    rows = [(link_local, "IB/RoCE v1"), (link_local, "RoCE v2")]
    if not active:
        return rows, ("1: DOWN", "3: Disabled")
    if gid_index == 5:
        global_v6 = "fd00:d9a:5:0::%x" % (int(ipaddress.IPv4Address(ipv4)) & 0xFFFF)
        rows += [(global_v6, "IB/RoCE v1"), (global_v6, "RoCE v2")]
    elif gid_index != 3:
        raise SystemExit("GID_INDEX must be 3 or 5, got %d" % gid_index)
    mapped = "::ffff:" + ipv4
    rows += [(mapped, "IB/RoCE v1"), (mapped, "RoCE v2")]
    return rows, ("4: ACTIVE", "5: LinkUp")


def desired(ports, gid_index):
    """``ports``: {netdev: IPv4} of the ACTIVE ports."""
    files, dirs = {}, set()
    first = sorted(ports.values())[0]
    for number, (device, netdev) in enumerate(DEVICES):
        rows, (state, phys) = table(ports.get(netdev, first), netdev in ports, gid_index, number)
        port = "class/infiniband/%s/ports/1" % device
        files[port + "/state"] = state
        files[port + "/phys_state"] = phys
        files[port + "/link_layer"] = "Ethernet"
        for slot in range(SLOTS):
            if slot < len(rows):
                gid, kind = rows[slot]
                files["%s/gids/%d" % (port, slot)] = ipaddress.IPv6Address(gid).exploded
                files["%s/gid_attrs/types/%d" % (port, slot)] = kind
                files["%s/gid_attrs/ndevs/%d" % (port, slot)] = netdev
            else:
                files["%s/gids/%d" % (port, slot)] = "0000:0000:0000:0000:0000:0000:0000:0000"
                dirs.add("%s/gid_attrs/types/%d" % (port, slot))
                dirs.add("%s/gid_attrs/ndevs/%d" % (port, slot))
        files["class/infiniband/%s/device/net/%s/operstate" % (device, netdev)] = "up" if state.endswith("ACTIVE") else "down"
    return files, dirs


def current(root):
    files, dirs = {}, set()
    for base, subdirs, names in os.walk(root):
        for name in subdirs:
            path = os.path.join(base, name)
            if not os.listdir(path):
                dirs.add(os.path.relpath(path, root))
        for name in names:
            path = os.path.join(base, name)
            with open(path, encoding="utf-8") as handle:
                files[os.path.relpath(path, root)] = handle.read().rstrip("\n")
    return files, dirs


def parse_ports(given):
    """IPV4 (the fabric port enp1s0f1np1) or NETDEV=IPV4,... -> {netdev: IPv4}."""
    if "=" not in given:
        return {dict(DEVICES)[FABRIC]: str(ipaddress.IPv4Address(given))}
    return {netdev: str(ipaddress.IPv4Address(ip)) for netdev, ip in (pair.split("=", 1) for pair in given.split(","))}


def main(root, ports, gid_index):
    want = desired(ports, gid_index)
    if os.path.isdir(root) and current(root) == want:
        print(json.dumps({"changed": False}))
        return
    staging = root + ".new"
    shutil.rmtree(staging, ignore_errors=True)
    files, dirs = want
    for rel in dirs:
        os.makedirs(os.path.join(staging, rel), exist_ok=True)
    for rel, content in files.items():
        path = os.path.join(staging, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(content + "\n")
    # The node binds <root>/class: change what is inside it, never the folder itself (a bind holds the old inode).
    target = os.path.join(root, "class")
    os.makedirs(target, exist_ok=True)
    for entry in os.listdir(target):
        shutil.rmtree(os.path.join(target, entry))
    for entry in os.listdir(os.path.join(staging, "class")):
        os.rename(os.path.join(staging, "class", entry), os.path.join(target, entry))
    shutil.rmtree(staging)
    print(json.dumps({"changed": True}))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(sys.argv[1], parse_ports(sys.argv[2]), int(sys.argv[3]))
