# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A cable of a simulated switchless ring: a veth pair whose ends are ConnectX ports of two nodes.

    sim_cable.py plug PID_A PORT_A PID_B PORT_B   the cable between node A's PORT_A and node B's PORT_B (each node
                                                  named by its container's PID): made when either end is missing or
                                                  the ends are not each other's peer; the ends have no address (the
                                                  fabric role's netplan gives them theirs), MTU 1500 and link up
    sim_cable.py swap PID PORT_1 PORT_2           exchange the names of two ports of one node (two cables swapped)
    sim_cable.py down PID PORT                    set a port's link down (a cable pulled at that end)

Prints {"changed": bool}. A node that restarts loses its ends, and the veth pair with them (on a Spark the cable stays
and only the node's addresses go); sim.yml plugs the cable again and the node's netplan is applied to it, as
networkd does when a port's carrier comes back.
"""

import json
import subprocess
import sys
import zlib


def ip(pid, *argv, check=True):
    return subprocess.run(["nsenter", "--net=/proc/%d/ns/net" % pid, "ip"] + list(argv), capture_output=True, text=True, check=check)


def link(pid, port):
    """The port's `ip -j link` entry in the node, or None."""
    found = ip(pid, "-j", "link", "show", "dev", port, check=False)
    return json.loads(found.stdout)[0] if found.returncode == 0 and found.stdout.strip() else None


def peers(pid_a, port_a, pid_b, port_b):
    """Each end's veth peer is the other one (the peer's ifindex is the other end's)."""
    a, b = link(pid_a, port_a), link(pid_b, port_b)
    return bool(a and b and a.get("link_index") == b.get("ifindex") and b.get("link_index") == a.get("ifindex"))


def plug(pid_a, port_a, pid_b, port_b):
    if peers(pid_a, port_a, pid_b, port_b):  # plugged: a pulled end (link down) is pushed back in
        pulled = [(pid, port) for pid, port in ((pid_a, port_a), (pid_b, port_b)) if "UP" not in link(pid, port).get("flags", [])]
        for pid, port in pulled:
            ip(pid, "link", "set", port, "up")
        return bool(pulled)
    for pid, port in ((pid_a, port_a), (pid_b, port_b)):
        if link(pid, port):
            ip(pid, "link", "del", "dev", port)
    tag = "%08x" % zlib.crc32(("%d%s%d%s" % (pid_a, port_a, pid_b, port_b)).encode())
    end_a, end_b = "dsa" + tag, "dsb" + tag  # temporary names on this machine, 11 characters
    subprocess.run(["ip", "link", "add", end_a, "type", "veth", "peer", "name", end_b], check=True)
    for end, pid, port in ((end_a, pid_a, port_a), (end_b, pid_b, port_b)):
        subprocess.run(["ip", "link", "set", end, "netns", "/proc/%d/ns/net" % pid], check=True)
        ip(pid, "link", "set", end, "name", port)
        ip(pid, "link", "set", port, "up")
    return True


def swap(pid, port_1, port_2):
    for old, new in ((port_1, "dsswap"), (port_2, port_1), ("dsswap", port_2)):
        ip(pid, "link", "set", old, "down")
        ip(pid, "link", "set", old, "name", new)
        ip(pid, "link", "set", new, "up")
    return True


def down(pid, port):
    was_up = "UP" in (link(pid, port) or {}).get("flags", [])
    ip(pid, "link", "set", port, "down")
    return was_up


def main(argv):
    action = argv[1]
    if action == "plug":
        changed = plug(int(argv[2]), argv[3], int(argv[4]), argv[5])
    elif action == "swap":
        changed = swap(int(argv[2]), argv[3], argv[4])
    elif action == "down":
        changed = down(int(argv[2]), argv[3])
    else:
        sys.exit(__doc__)
    print(json.dumps({"changed": changed}))


if __name__ == "__main__":
    main(sys.argv)
