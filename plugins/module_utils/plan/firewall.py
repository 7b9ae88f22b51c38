# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ray's ports answer only the cluster's own nodes: an nftables table of the collection's own on every node.

Why a firewall and not Ray's options: `ray start --node-ip-address` only sets the address Ray advertises. The GCS
(--port), the raylet's node and object managers, the agents, the metrics exporter and the workers bind 0.0.0.0, and
`ray start --help` of Ray 2.60 (the simulation's image) offers no option to bind one address (only the dashboard has
--dashboard-host, and the dashboard is off). With host networking, 0.0.0.0 is every interface of a Spark, the
management LAN included, and an unauthenticated Ray port runs any code it is sent (ShadowRay, CVE-2023-48022).

So the planner pins every port Ray opens (ray_command) and this table lets only the cluster's fabric addresses and the
node itself reach them; anyone else gets a TCP reset. The table is the collection's alone (named after the cluster,
removed by teardown.yml); it never touches another table, Docker's included. A systemd unit loads it at boot, before
Docker starts the containers again, so the ports are never open between a reboot and the next Ansible run.
"""

from __future__ import annotations

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


def guarded_ports(backend, ray_port, master_port, offset=0):
    """The ports the table guards, as nft set elements: Ray's every port, or the mp backend's torch rendezvous."""
    if backend != "ray":
        return [str(master_port)]
    return [str(ray_port)] + ["%d-%d" % pair for pair in ray_port_ranges(offset)]


def ruleset(cluster, addresses, ports):
    """The nft script: (re)creates the table atomically, so loading it twice leaves one copy."""
    table = table_name(cluster)
    return "\n".join([
        "#!/usr/sbin/nft -f",
        "# Written by dgx_spark.vllm for cluster %s: Ray's ports answer only the cluster's nodes." % cluster,
        "# Loaded at boot by %s/%s; removed by teardown.yml. Edit the inventory, not this file." % (UNIT_DIR, unit_name(cluster)),
        "table inet %s" % table,
        "delete table inet %s" % table,
        "table inet %s {" % table,
        "    set nodes {",
        "        type ipv4_addr",
        "        elements = { %s }" % ", ".join(sorted(addresses)),
        "    }",
        "    set ports {",
        "        type inet_service",
        "        flags interval",
        "        elements = { %s }" % ", ".join(ports),
        "    }",
        "    chain input {",
        "        type filter hook input priority filter - 10; policy accept;",
        '        iifname "lo" accept',
        "        tcp dport @ports ip saddr @nodes accept",
        "        tcp dport @ports reject with tcp reset",
        "    }",
        "}",
        ""])


def unit(cluster, rules_path):
    """The systemd unit that loads the table at boot, before Docker restarts Ray (and before the network is up)."""
    return "\n".join([
        "# Written by dgx_spark.vllm for cluster %s; removed by teardown.yml." % cluster,
        "[Unit]",
        "Description=dgx_spark.vllm %s: Ray's ports answer only the cluster's nodes" % cluster,
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


def plan(settings, backend, addresses, paths, node=None):
    """What the planner gives the fabric role on a node: the table, its script and the unit, at the node's paths. Where
    this deployment's supervisor serves the node's figures, their port too, for the Prometheus host only besides the
    nodes (``monitoring.scraper``)."""
    cluster = settings["cluster_name"]
    ports = guarded_ports(backend, settings["ray_port"], settings["master_port"], settings["ray_ports_offset"])
    addresses = list(addresses)
    if monitoring.serves_figures(settings, node):  # each node's figures, for the Prometheus host only
        ports.append(str(settings["monitoring"]["node_port"]))
        scraper = settings["monitoring"].get("scraper")
        if scraper and scraper not in addresses:
            addresses.append(scraper)
    return {"table": table_name(cluster), "ports": ports, "addresses": sorted(addresses), "record": paths["firewall_record"],
            "unit_name": unit_name(cluster),
            "files": [{"path": paths["firewall_rules"], "content": ruleset(cluster, addresses, ports), "mode": "0644"},
                      {"path": paths["firewall_unit"], "content": unit(cluster, paths["firewall_rules"]), "mode": "0644"}],
            "wants": paths["firewall_wants"]}
