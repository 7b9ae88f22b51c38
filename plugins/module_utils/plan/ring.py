# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Switchless rings (fact 9): 3 to 8 Sparks, each one's two ConnectX ports cabled to its two neighbours, one subnet per
cable. ``spark_fabric_ring.links`` lists the cables: ``{a, a_if, b, b_if}`` and an optional ``subnet`` (the first host
address goes to end ``a``, the second to end ``b``). A link without a subnet gets the next free one of ``subnet_pool``
(default 192.168.192.0/20), cut at ``subnet_prefix_len`` (default 24). Pure: ``check`` returns every problem with the
host, the value and the fix; ``plan`` the links with their addresses and each node's ends.

Why each refusal: a cable listed twice or a port used twice gives one interface two addresses; a ring that does not
close leaves a node that NCCL's subnet-aware routing cannot reach except through the management NIC (the 6 tok/s of
the field); a link on the interface that carries the Ansible connection cuts the operator off the node when netplan
applies; overlapping subnets make the kernel route one link's traffic out of the other port.
"""

from __future__ import annotations

import ipaddress

SIZES = (3, 8)
DEFAULT_POOL = "192.168.192.0/20"
DEFAULT_PREFIX_LEN = 24
MTU = 9000
FIX = "each link is {a: HOST, a_if: PORT, b: HOST, b_if: PORT} with an optional subnet like 192.168.10.0/24"


class RingError(Exception):
    """A ring link is malformed; the message names the link."""


def link_name(link):
    return "%s:%s <-> %s:%s" % (link.get("a"), link.get("a_if"), link.get("b"), link.get("b_if"))


def _subnet(link):
    """The link's given subnet, None when omitted; raises ValueError when it is not a network with two hosts."""
    if link.get("subnet") in (None, ""):
        return None
    network = ipaddress.ip_network(str(link["subnet"]), strict=True)
    if network.version != 4 or network.num_addresses < 4:
        raise ValueError("an IPv4 subnet with two host addresses is needed (a /30 or wider)")
    return network


def _structure(ring, order, connection):
    """The problems of the link list itself (``check`` without the planned subnets against the nodes' networks)."""
    ring = ring or {}
    links = ring.get("links") or []
    problems = []
    if not isinstance(links, list) or not links:
        return [("all", links, "spark_fabric_ring has no links; %s, one per cable" % FIX)]
    if not SIZES[0] <= len(order) <= SIZES[1]:
        problems.append(("all", len(order), "a switchless ring joins %d to %d Sparks; the inventory has %d (%s). Two Sparks need no "
                         "ring: cable them directly and leave spark_fabric_ring out; beyond %d, use a switch"
                         % (SIZES[0], SIZES[1], len(order), ", ".join(order), SIZES[1])))
    ports, cables, degree, given = {}, {}, {host: [] for host in order}, []
    for index, link in enumerate(links):
        if not isinstance(link, dict) or any(not link.get(k) for k in ("a", "a_if", "b", "b_if")):
            problems.append(("all", link, "ring link %d (%r) is incomplete; %s" % (index + 1, link, FIX)))
            continue
        name = link_name(link)
        for end in ("a", "b"):
            if link[end] not in degree:
                problems.append((link[end], link, "ring link %s names %s, which is not a host of spark_cluster (%s); fix the name"
                                 % (name, link[end], ", ".join(order))))
        if link["a"] == link["b"]:
            problems.append((link["a"], link, "ring link %s joins %s to itself; a cable goes to a neighbour" % (name, link["a"])))
            continue
        cable = frozenset([(link["a"], link["a_if"]), (link["b"], link["b_if"])])
        if cable in cables:
            problems.append((link["a"], link, "ring link %s is listed twice (links %d and %d); list each cable once"
                             % (name, cables[cable] + 1, index + 1)))
            continue
        cables[cable] = index
        for end in ("a", "b"):
            port = (link[end], link[end + "_if"])
            if port in ports:
                problems.append((link[end], port[1], "%s's port %s is in two ring links (%s and %s); a port takes one cable: "
                                 "give the second link %s's other ConnectX port" % (port[0], port[1], ports[port], name, port[0])))
            ports[port] = name
            if connection and connection.get(link[end]) == link[end + "_if"]:
                problems.append((link[end], port[1], "%s: ring link %s uses %s, the interface Ansible reaches %s over; applying it "
                                 "would cut the connection. Cable the ring on the ConnectX ports and keep the management NIC "
                                 "out of spark_fabric_ring" % (link[end], name, port[1], link[end])))
        for end, other in (("a", "b"), ("b", "a")):
            if link[end] in degree:
                degree[link[end]].append(link[other])
        try:
            network = _subnet(link)
        except ValueError as exc:
            problems.append((link["a"], link.get("subnet"), "ring link %s: subnet %r: %s; %s" % (name, link.get("subnet"), exc, FIX)))
            continue
        if network is not None:
            for earlier, earlier_name in given:
                if network.overlaps(earlier):
                    problems.append((link["a"], str(network), "ring link %s: subnet %s overlaps %s of link %s; give each cable its "
                                     "own subnet" % (name, network, earlier, earlier_name)))
            given.append((network, name))
    return problems or _closed(degree)


def checked_plan(ring, order, connection=None, networks=None):
    """``check``, then ``plan`` when the links are sound, then the planned subnets against the nodes' other networks:
    (every problem, the plan or None). One pass: the planner and ``check`` both take it."""
    problems = _structure(ring, order, connection)
    if problems:
        return problems, None
    try:
        planned = plan(ring, order, networks)
    except RingError as exc:
        return [("all", ring.get("subnet_pool"), str(exc))], None
    problems = _clashes(planned["links"], networks) if networks else []
    return problems, None if problems else planned


def check(ring, order, connection=None, networks=None):
    """Every problem of ``ring`` for the inventory's hosts ``order``: [(host, value, message)], [] when none.
    ``connection`` maps a host to the interface its Ansible connection arrives on, ``networks`` a host to its
    interfaces' addresses ({ifname: ["10.0.0.11/24", ...]}), both probed, when known."""
    return checked_plan(ring, order, connection, networks)[0]


def _ports(links, host):
    """``host``'s ring ports in ``links``."""
    return {link[end + "_if"] for link in links for end in ("a", "b") if link[end] == host}


def _foreign_networks(networks, host, ring_ports):
    """The networks of ``host``'s interfaces that are not its ring ports: {ifname: [network, ...]}."""
    found = {}
    for ifname, cidrs in sorted(((networks or {}).get(host) or {}).items()):
        if ifname in ring_ports or ifname == "lo":
            continue
        found[ifname] = [ipaddress.ip_interface(c).network for c in cidrs or []]
    return found


def _clashes(links, networks):
    """A ring subnet that overlaps a network a node already has on another interface (the management LAN): routes to it
    would leave by the ring port, and the node's SSH with them."""
    problems = []
    for link in links:
        subnet = ipaddress.ip_network(link["subnet"])
        for host in (link["a"], link["b"]):
            for ifname, nets in _foreign_networks(networks, host, _ports(links, host)).items():
                for net in nets:
                    if subnet.overlaps(net):
                        problems.append((host, link["subnet"], "%s: ring link %s's subnet %s overlaps %s on %s; traffic to that network "
                                         "would leave by the ring port, SSH's too. Give the link another subnet (or another "
                                         "subnet_pool)" % (host, link["name"], subnet, net, ifname)))
    return problems


def _closed(degree):
    """The links form one ring through every host: each has two neighbours, and walking them visits every host."""
    problems = []
    for host, peers in degree.items():
        if len(peers) != 2:
            problems.append((host, len(peers), "the ring does not close at %s: it has %d link(s)%s, and in a ring each Spark has "
                             "two, one per ConnectX port. Add or fix the link from its other port"
                             % (host, len(peers), (" (to %s)" % ", ".join(peers)) if peers else "")))
    if problems:
        return problems
    start = next(iter(degree))
    seen, previous, here = [start], None, start
    while True:
        following = [p for p in degree[here] if p != previous] or degree[here]
        previous, here = here, following[0]
        if here == start:
            break
        seen.append(here)
    rest = [h for h in degree if h not in seen]
    if rest:
        problems.append((rest[0], rest, "the links form more than one ring: %s and %s; one ring must pass through every Spark"
                         % (" - ".join(seen), ", ".join(rest))))
    return problems


def plan(ring, order, networks=None):
    """The ring's links with their subnets (given, or the next free ones of the pool, past the networks the nodes have
    on other interfaces) and the addresses of each end, and each host's ends. Call after ``check`` found nothing;
    raises RingError when the pool runs out."""
    ring = ring or {}
    prefix = int(ring.get("subnet_prefix_len") or DEFAULT_PREFIX_LEN)
    given = [_subnet(link) for link in ring["links"]]
    taken = [g for g in given if g]
    for host in order:
        taken += [net for nets in _foreign_networks(networks, host, _ports(ring["links"], host)).values() for net in nets]
    pool = ipaddress.ip_network(str(ring.get("subnet_pool") or DEFAULT_POOL), strict=True)
    if not pool.prefixlen <= prefix <= 30:
        raise RingError("spark_fabric_ring.subnet_prefix_len %d does not cut subnet_pool %s (it must be %d..30)" % (prefix, pool, pool.prefixlen))
    free = (s for s in pool.subnets(new_prefix=prefix) if not any(s.overlaps(t) for t in taken))
    links, ends = [], {host: [] for host in order}
    for link, subnet in zip(ring["links"], given):
        if subnet is None:
            subnet = next(free, None)
            if subnet is None:
                raise RingError("spark_fabric_ring.subnet_pool %s has no free /%d left for link %s; give a wider pool or the subnets"
                                % (pool, prefix, link_name(link)))
        hosts = list(subnet.hosts())[:2]
        entry = dict(link, subnet=str(subnet), name=link_name(link), a_address=str(hosts[0]), b_address=str(hosts[1]),
                     prefix_len=subnet.prefixlen)
        links.append(entry)
        for here, there in (("a", "b"), ("b", "a")):
            ends[link[here]].append({"link": entry["name"], "side": here, "interface": link[here + "_if"],
                                     "address": "%s/%d" % (entry[here + "_address"], subnet.prefixlen), "peer": link[there],
                                     "peer_interface": link[there + "_if"], "peer_address": entry[there + "_address"],
                                     "prefix_len": subnet.prefixlen})
    lengths = sorted({link["prefix_len"] for link in links})
    if len(lengths) > 1:
        raise RingError("the ring's subnets have different prefix lengths %s; NCCL_IB_SUBNET_PREFIX_LEN takes one: give them one" % lengths)
    return {"links": links, "prefix_len": lengths[0], "mtu": MTU, "ends": ends}


def netplan(ends, mtu=MTU):
    """A node's netplan (YAML text) for its ring ends: the ConnectX ports with their address and MTU, nothing else."""
    lines = ["# Written by dgx_spark.vllm (role fabric): the switchless ring's links of this node, one subnet per link.",
             "network:", "  version: 2", "  ethernets:"]
    for end in sorted(ends, key=lambda e: e["interface"]):
        lines += ["    %s:" % end["interface"], "      mtu: %d" % mtu, "      addresses: [%s]" % end["address"],
                  "      # %s" % end["link"]]
    return "\n".join(lines) + "\n"


def try_error(entry):
    """Why a node's try failed, from its report entry (``failures``), or "": its apply failed (and was rolled back at
    once there), or it did not finish although the node still answers."""
    job = entry.get("try")
    if not job or entry.get("lost"):
        return ""
    if job.get("finished") and job.get("failed"):
        return " ".join(str(job.get("msg") or "failed").split())
    if not job.get("finished"):
        return "the try did not finish within %s s although the node answers" % entry.get("answer_timeout")
    return ""


def failures(report):
    """What the fabric role's checks found wrong, one message per failed link or silent node: ``report`` maps each
    host to ``{"results": its registered pings (a loop over its ends), "lost": it stopped answering over SSH, "try":
    async_status' result of its try (None when nothing was tried), "answer_timeout": the seconds it was waited for}``."""
    hosts = sorted(report)
    found, failed = [], {}
    for host in hosts:
        if (report.get(host) or {}).get("lost"):
            found.append("%s stopped answering over SSH after its ring netplan was applied; its own timer puts the previous "
                         "one back" % host)
            continue
        error = try_error(report.get(host) or {})
        if error:
            found.append("%s: its try of the ring's netplan failed: %s" % (host, error))
        for result in (report.get(host) or {}).get("results") or []:
            end = result.get("item") or {}
            if result.get("skipped") or result.get("rc") == 0:
                continue
            failed.setdefault(end.get("link"), []).append("%s %s got no answer from %s at %s" % (
                host, end.get("interface"), end.get("peer"), end.get("peer_address")))
    for link, ends in sorted(failed.items()):
        found.append("link %s: %s, to a 9000-byte ping that may not be fragmented. Check that cable (plugged into those "
                     "two ports, the link up: ip link), and the MTU on both ports" % (link, "; ".join(ends)))
    for host in hosts:  # both of a node's links dead from both ends, the rest alive: its two cables are swapped
        own = [(result.get("item") or {}) for result in (report.get(host) or {}).get("results") or []]
        if len(own) == 2 and all(e.get("link") in failed and len(failed[e["link"]]) == 2 for e in own) and len(failed) == 2:
            found.append("%s: both its links fail from both ends while the others answer, so its two cables are probably swapped "
                         "(%s and %s). Swap them back, or exchange %s's two ports in spark_fabric_ring's links"
                         % ((host,) + tuple(sorted(e.get("interface") or "" for e in own)) + (host,)))
    return found


def rdma_port(ports, interface):
    """The RDMA port of a ring port (roce_gid_info's roce_devices) and the GID index NCCL takes there, as probed:
    {"rdma": "rocep1s0f0:1" or None, "gid_index": 3 or None, "gid_address": the IPv4 of that GID or None}."""
    for port in ports or []:
        if port.get("netdev") == interface or interface in (port.get("netdevs") or []):
            index = port.get("nccl_gid_index")
            gid = next((g for g in port.get("gids") or [] if g.get("index") == index), {})
            return {"rdma": "%s:%s" % (port.get("name"), port.get("port")), "gid_index": index, "gid_address": gid.get("ipv4")}
    return {"rdma": None, "gid_index": None, "gid_address": None}


def table(nodes):
    """One line per link and end: the address, MTU and the RDMA port and GID index NCCL takes there (as probed
    before this run), for fabric.yml's report. ``nodes``: the plan's nodes."""
    lines = []
    for host in sorted(nodes):
        for end in sorted((nodes[host].get("ring") or {}).get("ends") or [], key=lambda e: e["link"]):
            lines.append("%s  %s %s  %s  mtu %s  %s  GID index %s%s" % (
                end["link"], host, end["interface"], end["address"], nodes[host]["ring"]["mtu"], end.get("rdma") or "no RDMA port",
                "none" if end.get("gid_index") is None else end["gid_index"],
                "" if end.get("gid_address") == end["address"].split("/")[0] else " (not yet on this address)"))
    return sorted(lines)
