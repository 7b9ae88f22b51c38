# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Deny by default: on every node, a host outside the cluster reaches SSH, the front doors and the allow list, nothing
else; the cluster's nodes reach each other. An nftables table of the collection's own on every node.

Why a firewall and not the programs' options: `ray start --node-ip-address` only sets the address Ray advertises. The
GCS (--port), the raylet's node and object managers, the agents, the metrics exporter and the workers bind 0.0.0.0,
and `ray start --help` of Ray 2.60 (the simulation's image) offers no option to bind one address (only the dashboard
has --dashboard-host, and the dashboard is off). vLLM's engine and its ranks open sockets of their own on ports they
pick (ZeroMQ, torch's stores, NCCL's bootstrap), some on every interface. With host networking, 0.0.0.0 is every
interface of a Spark, the management LAN included, and an unauthenticated Ray port runs any code it is sent
(ShadowRay, CVE-2023-48022). A list of the ports we know would miss the ones they pick.

So the table does not tell the cluster's sockets from the host's other services: it refuses every new TCP or UDP
connection from a host that is not a node of the cluster (by source address: its fabric addresses, and the
Prometheus host's), whatever the port, except the ports it opens to everyone (``opened``): SSH (22 and the port
Ansible connects to), each deployment's front door (or the gateway) on its head, Prometheus where
vllm_monitoring_listen opens it beyond loopback, the answers conntrack cannot pair with a request (DHCP, multicast
DNS), and the inventory's own (``vllm_firewall_allow``: the host's other services). Loopback, replies to the node's own
connections and ICMP pass; invalid packets are dropped. Refused: a TCP reset or an ICMP port unreachable (the kernel
answers no broadcast or multicast). Other protocols pass.

The table is the collection's alone (named after the deployment, removed by teardown.yml); it never touches another
table, Docker's included, and its accepts decide nothing for them. Every deployment's table on a node admits the same
hosts and ports (the planner gives each the whole cluster's: ``settings["firewall_reach"]``), so two tables never
refuse each other's traffic. A systemd unit loads it at boot, before Docker starts the containers again, so nothing is
open between a reboot and the next Ansible run.
"""

from __future__ import annotations

import re

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.firewall_state import NFT
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import monitoring

# Every TCP port Ray opens on a node, pinned (ray start picks random ones otherwise, which no rule could name).
RAY_PORTS = {
    "--node-manager-port": 6800,
    "--object-manager-port": 6801,
    "--metrics-export-port": 6802,
    "--dashboard-agent-grpc-port": 6803,
    "--dashboard-agent-listen-port": 6804,
    "--runtime-env-agent-port": 6805,
    "--min-worker-port": 10002,
    "--max-worker-port": 10101,   # 100 workers per node; a Spark runs a handful
}
RAY_CLIENT_SERVER_PORT = 10001    # Ray starts its client server on every head and offers no way to turn it off
UNIT_DIR = "/etc/systemd/system"


def table_name(cluster):
    """The collection's table for ``cluster`` (a valid cluster name: a-z, 0-9, '-')."""
    return "dgx_spark_vllm_" + cluster.replace("-", "_")


def unit_name(cluster):
    return "dgx-spark-vllm-firewall-%s.service" % cluster


def ray_port_flags(is_head, offset=0):
    """The `ray start` flags that pin its ports (the head's client server too), each moved by ``offset``: a second Ray
    cluster on the same node (another deployment, module_utils/plan/placement.py) needs ports of its own."""
    flags = []
    for flag, port in RAY_PORTS.items():
        flags += [flag, str(port + offset)]
    return flags + (["--ray-client-server-port", str(RAY_CLIENT_SERVER_PORT + offset)] if is_head else [])


def ray_port_ranges(offset=0):
    """The pinned ports as (low, high) ranges: the node's managers and agents, the client server and the workers."""
    return [(RAY_PORTS["--node-manager-port"] + offset, RAY_PORTS["--runtime-env-agent-port"] + offset),
            (RAY_CLIENT_SERVER_PORT + offset, RAY_PORTS["--max-worker-port"] + offset)]


SSH_PORT = 22
# Answers conntrack cannot pair with a request (to a broadcast or multicast one): the client ports of DHCP and DHCPv6,
# and multicast DNS (a node's .local name, and the names it resolves: NVIDIA Sync finds a Spark by it).
UNPAIRED_UDP = ("68", "546", "5353")


def ruleset(cluster, addresses, opened_tcp, opened_udp=()):
    """The nft script: (re)creates the table atomically, so loading it twice leaves one copy. ``addresses``: the
    cluster's nodes, admitted to everything; ``opened_tcp``, ``opened_udp``: set elements everyone reaches."""
    table = table_name(cluster)
    return "\n".join([
        "#!/usr/sbin/nft -f",
        "# Written by dgx_spark.vllm for cluster %s: the cluster's nodes reach everything, other hosts only the ports" % cluster,
        "# opened to them (SSH, the front door, vllm_firewall_allow). Loaded at boot by %s/%s;" % (UNIT_DIR, unit_name(cluster)),
        "# removed by teardown.yml. Edit the inventory, not this file.",
        "table inet %s" % table,
        "delete table inet %s" % table,
        "table inet %s {" % table,
        "    set nodes {",
        "        type ipv4_addr",
        "        flags interval",
        "        auto-merge",
        "        elements = { %s }" % ", ".join(sorted(addresses)),
        "    }",
        "    set opened_tcp {",
        "        type inet_service",
        "        flags interval",
        "        auto-merge",
        "        elements = { %s }" % ", ".join(opened_tcp),
        "    }",
        "    set opened_udp {",
        "        type inet_service",
        "        flags interval",
        "        auto-merge",
        "        elements = { %s }" % ", ".join(list(UNPAIRED_UDP) + [p for p in opened_udp if p not in UNPAIRED_UDP]),
        "    }",
        "    chain input {",
        "        type filter hook input priority filter - 10; policy accept;",
        '        iifname "lo" accept',
        # a loopback address arriving on another interface (route_localnet, which kube-proxy or Docker may set): the
        # front door's plain listener for the head's own requests is on 127.0.0.1 (plan/tls.py)
        "        ip daddr 127.0.0.0/8 drop",
        "        ip6 daddr ::1 drop",
        "        ct state established,related accept",
        "        ct state invalid drop",
        "        meta l4proto { icmp, ipv6-icmp } accept",
        "        ip saddr @nodes accept",
        "        tcp dport @opened_tcp accept",
        "        udp dport @opened_udp accept",
        "        meta l4proto tcp reject with tcp reset",
        "        meta l4proto udp reject",
        "    }",
        "}",
        ""])


def unit(cluster, rules_path):
    """The systemd unit that loads the table at boot, before Docker restarts Ray (and before the network is up)."""
    return "\n".join([
        "# Written by dgx_spark.vllm for cluster %s; removed by teardown.yml." % cluster,
        "[Unit]",
        "Description=dgx_spark.vllm %s: other hosts than the cluster's nodes reach only SSH and the front door" % cluster,
        "DefaultDependencies=no",
        # nftables.service starts with `flush ruleset` (Debian's /etc/nftables.conf): after it, or the table is gone
        "After=nftables.service",
        "Before=network-pre.target docker.service shutdown.target",
        "Wants=network-pre.target",
        "Conflicts=shutdown.target",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
        "ExecStart=%s -f %s" % (NFT, rules_path),
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        ""])


def check(name, facts, findings):
    """The node must have nft to load the table (a node not probed is not judged)."""
    state = facts.get("state")
    if state is not None and NFT in state and state[NFT] is None:
        findings.error(name, NFT, "%s has no %s, which loads the firewall that keeps Ray's ports to the cluster's nodes; "
                       "install it (sudo apt install nftables), or set vllm_firewall: false and keep the nodes' networks "
                       "private to them" % (name, NFT))


ALLOW = re.compile(r"^(\d{1,5})(?:-(\d{1,5}))?(?:/(tcp|udp))?$")


def allowed(entries, findings, reserved=()):
    """vllm_firewall_allow as set elements: {"tcp": [...], "udp": [...]}. Each entry is a port or a range, TCP unless
    it ends in /udp: 5353/udp, 8888, 9000-9010/tcp. A bad entry is an error naming it, and so is one that opens a port
    of the cluster's own (``reserved``: (low, high, what)) to every host."""
    found = {"tcp": [], "udp": []}
    if entries in (None, ""):
        return found
    if not isinstance(entries, (list, tuple)):
        entries = [entries]
    for entry in entries:
        match = ALLOW.match(str(entry).strip().lower())
        low, high = (int(match.group(1)), int(match.group(2) or match.group(1))) if match else (0, 0)
        if not match or not 1 <= low <= high <= 65535:
            findings.error("all", entry, "vllm_firewall_allow: %r is not a port, a range or either with /tcp or /udp (22, "
                           "9000-9010, 5353/udp); each entry opens that port on every node to every host" % (entry,))
            continue
        proto = match.group(3) or "tcp"
        clash = next((what for first, last, what in reserved if proto == "tcp" and low <= last and first <= high), None)
        if clash:
            findings.error("all", entry, "vllm_firewall_allow: %s would open %s to every host; only the cluster's nodes may "
                           "reach it. Remove the entry, or move your service to another port" % (entry, clash))
            continue
        found[proto].append(str(low) if low == high else "%d-%d" % (low, high))
    return found


def cluster_ports(entries, settings):
    """The TCP ports the cluster's own programs listen on, each deployment's (Ray's pinned ones, the rendezvous, the
    model copy's rsync) and the nodes' figures: what the allow list must not open to every host."""
    figures = settings["monitoring"].get("node_port") or monitoring.DEFAULTS["node_port"]
    ports = [(figures, figures, "the nodes' figures")]
    for entry in entries or [{}]:
        own = dict(settings, **(entry.get("settings") or {}))
        ports += [(own["ray_port"], own["ray_port"], "Ray's GCS"), (own["master_port"], own["master_port"], "the mp rendezvous"),
                  (own["rsync_port"], own["rsync_port"], "the model copy's rsync")]
        ports += [(low, high, "Ray's ports %d-%d" % (low, high)) for low, high in ray_port_ranges(own.get("ray_ports_offset") or 0)]
    return ports


def reach(entries, settings, nodes, findings, gateway=False):
    """What every deployment's table admits, the same on every node of the cluster: the nodes (every fabric address of
    the inventory; the Prometheus host is one), and per host the TCP ports everyone reaches (SSH: 22, the inventory's
    ansible_port and the port the probe's connection arrived at; the gateway's port on the first head when there is
    one, else each deployment's front door on its head; Prometheus where it listens beyond loopback; the allow list)
    and the UDP ones (the allow list). ``entries``: the deployments (placement), ``nodes``: host -> inventory values and
    what the probe read."""
    allow = allowed(settings.get("firewall_allow"), findings, cluster_ports(entries, settings))
    addresses = sorted({str(v["fabric_ip"]) for v in nodes.values() if v.get("fabric_ip")})
    opened = {}
    for host, values in nodes.items():
        opened[host] = {str(p) for p in (SSH_PORT, values.get("ssh_port"), values.get("connection_port")) if p}
    for entry in entries if not gateway else []:  # behind the gateway, a deployment's door is the cluster's alone
        if entry.get("head") in opened:
            opened[entry["head"]].add(str((entry.get("settings") or {}).get("port") or settings["port"]))
    first = entries[0]["head"] if entries else None
    if first in opened:
        if gateway:
            opened[first].add(str(settings["port"]))
        watch = settings.get("monitoring") or {}
        host, dummy, port = str(watch.get("listen") or "").rpartition(":")
        if watch.get("enabled") and port.isdigit() and not host.startswith("127.") and host not in ("localhost", "[::1]"):
            opened[first].add(port)
    return {"nodes": addresses, "udp": allow["udp"],
            "tcp": {h: sorted(p, key=lambda x: int(x.split("-")[0])) + [a for a in allow["tcp"] if a not in p]
                    for h, p in opened.items()}}


def plan(settings, backend, addresses, paths, node=None, links=()):
    """What the planner gives the fabric role on a node: the table, its script and the unit, at the node's paths. The
    hosts and ports it admits are the whole cluster's (``settings["firewall_reach"]``, firewall.reach; without it, this
    deployment's nodes and SSH alone), and this deployment's ring's link subnets (``links``); the Prometheus host is one
    of the nodes where this deployment's supervisor serves the node's figures (``monitoring.scraper``)."""
    cluster = settings["cluster_name"]
    given = settings.get("firewall_reach") or {}
    addresses = set(given.get("nodes") or addresses) | set(links)
    if monitoring.serves_figures(settings, node):  # each node's figures, for the Prometheus host too
        scraper = settings["monitoring"].get("scraper")
        if scraper:
            addresses.add(scraper)
    opened_tcp = list((given.get("tcp") or {}).get(node) or [str(SSH_PORT)])
    opened_udp = list(given.get("udp") or [])
    return {"table": table_name(cluster), "opened_tcp": opened_tcp, "opened_udp": opened_udp, "addresses": sorted(addresses),
            "record": paths["firewall_record"], "unit_name": unit_name(cluster),
            "files": [{"path": paths["firewall_rules"], "content": ruleset(cluster, addresses, opened_tcp, opened_udp), "mode": "0644"},
                      {"path": paths["firewall_unit"], "content": unit(cluster, paths["firewall_rules"]), "mode": "0644"}],
            "wants": paths["firewall_wants"]}
