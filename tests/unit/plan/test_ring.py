"""ring: a switchless ring's links checked and planned (fact 9): the refusals name the host, the value and the fix."""

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import ring
from helpers import P0, P1, cable


def closed(hosts, subnets=None):
    return {"links": [cable(h, hosts[(i + 1) % len(hosts)], (subnets or {}).get(i)) for i, h in enumerate(hosts)]}


THREE = ["spark1", "spark2", "spark3"]
MGMT = {h: {"enP7s7": ["10.0.0.1%d/24" % i], "lo": ["127.0.0.1/8"]} for i, h in enumerate(THREE, 1)}


def messages(problems):
    return [p[2] for p in problems]


def test_the_sample_ring_passes_and_each_end_gets_its_links_address():
    given = closed(THREE, {0: "192.168.10.0/24", 1: "192.168.20.0/24", 2: "192.168.30.0/24"})
    assert ring.check(given, THREE, connection={h: "enP7s7" for h in THREE}, networks=MGMT) == []
    planned = ring.plan(given, THREE, MGMT)
    assert planned["prefix_len"] == 24 and planned["mtu"] == 9000
    assert [(e["interface"], e["address"], e["peer"], e["peer_address"]) for e in planned["ends"]["spark1"]] == [
        (P0, "192.168.10.1/24", "spark2", "192.168.10.2"), (P1, "192.168.30.2/24", "spark3", "192.168.30.1")]


def test_links_without_a_subnet_take_the_next_free_ones_of_the_pool_past_the_management_network():
    given = dict(closed(THREE, {1: "192.168.193.0/24"}), subnet_pool="192.168.192.0/22")
    networks = dict(MGMT, spark2={"enP7s7": ["192.168.192.12/24"]})  # the management LAN sits in the pool's first /24
    planned = ring.plan(given, THREE, networks)
    assert [l["subnet"] for l in planned["links"]] == ["192.168.194.0/24", "192.168.193.0/24", "192.168.195.0/24"]
    again = ring.plan(given, THREE, dict(networks, spark1=dict(MGMT["spark1"], **{P0: ["192.168.194.1/24"]})))
    assert again["links"] == planned["links"]  # the ring's own addresses, once applied, move nothing


@pytest.mark.parametrize("hosts", [["s%d" % i for i in range(1, n + 1)] for n in (3, 4, 8)])
def test_rings_of_three_to_eight_pass(hosts):
    assert ring.check(closed(hosts), hosts) == []
    assert len(ring.plan(closed(hosts), hosts)["links"]) == len(hosts)


def test_a_node_count_outside_three_to_eight_is_refused():
    two = ["spark1", "spark2"]
    problems = ring.check({"links": [cable("spark1", "spark2"), dict(cable("spark2", "spark1"), a_if=P1, b_if=P0)]}, two)
    assert problems[0][:2] == ("all", 2)
    assert "a switchless ring joins 3 to 8 Sparks; the inventory has 2 (spark1, spark2). Two Sparks need no ring" in problems[0][2]
    nine = ["s%d" % i for i in range(9)]
    assert "beyond 8, use a switch" in messages(ring.check(closed(nine), nine))[0]


def test_a_cable_listed_twice_is_refused():
    given = closed(THREE)
    given["links"].append(cable("spark1", "spark2"))
    assert messages(ring.check(given, THREE)) == [
        "ring link spark1:enp1s0f0np0 <-> spark2:enp1s0f1np1 is listed twice (links 1 and 4); list each cable once"]


def test_a_port_used_twice_is_refused_naming_it():
    given = closed(THREE)
    given["links"][2] = dict(given["links"][2], b_if=P0)  # spark3 -> spark1's enp1s0f0np0, which spark1 -> spark2 uses
    problems = ring.check(given, THREE)
    assert problems[0][:2] == ("spark1", P0)
    assert problems[0][2] == ("spark1's port enp1s0f0np0 is in two ring links (spark1:enp1s0f0np0 <-> spark2:enp1s0f1np1 and "
                              "spark3:enp1s0f0np0 <-> spark1:enp1s0f0np0); a port takes one cable: give the second link spark1's "
                              "other ConnectX port")


def test_a_ring_that_does_not_close_is_refused_at_the_open_ends():
    given = {"links": closed(THREE)["links"][:2]}
    assert messages(ring.check(given, THREE)) == [
        "the ring does not close at spark1: it has 1 link(s) (to spark2), and in a ring each Spark has two, one per ConnectX "
        "port. Add or fix the link from its other port",
        "the ring does not close at spark3: it has 1 link(s) (to spark2), and in a ring each Spark has two, one per ConnectX "
        "port. Add or fix the link from its other port"]


def test_two_rings_are_not_one():
    six = ["s%d" % i for i in range(1, 7)]
    given = {"links": closed(six[:3])["links"] + closed(six[3:])["links"]}
    assert messages(ring.check(given, six)) == [
        "the links form more than one ring: s1 - s2 - s3 and s4, s5, s6; one ring must pass through every Spark"]


def test_a_link_on_the_interface_of_the_ansible_connection_is_refused():
    given = closed(THREE)
    given["links"][0] = dict(given["links"][0], a_if="enP7s7")
    problems = ring.check(given, THREE, connection={h: "enP7s7" for h in THREE})
    assert problems[0][:2] == ("spark1", "enP7s7")
    assert problems[0][2].startswith("spark1: ring link spark1:enP7s7 <-> spark2:enp1s0f1np1 uses enP7s7, the interface Ansible "
                                     "reaches spark1 over; applying it would cut the connection")


def test_overlapping_subnets_are_refused():
    given = closed(THREE, {0: "192.168.10.0/24", 1: "192.168.10.0/25", 2: "192.168.30.0/24"})
    assert messages(ring.check(given, THREE)) == [
        "ring link spark2:enp1s0f0np0 <-> spark3:enp1s0f1np1: subnet 192.168.10.0/25 overlaps 192.168.10.0/24 of link "
        "spark1:enp1s0f0np0 <-> spark2:enp1s0f1np1; give each cable its own subnet"]


def test_a_subnet_over_the_management_network_is_refused():
    given = closed(THREE, {0: "10.0.0.0/24"})
    problems = ring.check(given, THREE, networks=MGMT)
    assert problems[0][:2] == ("spark1", "10.0.0.0/24")
    assert problems[0][2].startswith("spark1: ring link spark1:enp1s0f0np0 <-> spark2:enp1s0f1np1's subnet 10.0.0.0/24 overlaps "
                                     "10.0.0.0/24 on enP7s7; traffic to that network would leave by the ring port")


@pytest.mark.parametrize("link,says", [
    ({"a": "spark1"}, "ring link 1 ({'a': 'spark1'}) is incomplete"),
    (cable("spark1", "spark9"), "names spark9, which is not a host of spark_cluster (spark1, spark2, spark3)"),
    (cable("spark1", "spark1"), "joins spark1 to itself"),
    (cable("spark1", "spark2", "192.168.10.1/24"), "has host bits set"),
    (cable("spark1", "spark2", "192.168.10.0/31"), "a /30 or wider"),
])
def test_a_malformed_link_is_named(link, says):
    given = closed(THREE)
    given["links"][0] = link
    assert any(says in m for m in messages(ring.check(given, THREE))), ring.check(given, THREE)


def test_a_pool_too_small_is_named():
    with pytest.raises(ring.RingError, match="has no free /24 left for link spark3:enp1s0f0np0 <-> spark1:enp1s0f1np1"):
        ring.plan(dict(closed(THREE), subnet_pool="192.168.0.0/23"), THREE)


def test_netplan_lists_only_the_ring_ports_with_jumbo_frames():
    ends = ring.plan(closed(THREE, {0: "192.168.10.0/24", 2: "192.168.30.0/24"}), THREE)["ends"]["spark1"]
    assert ring.netplan(ends) == (
        "# Written by dgx_spark.vllm (role fabric): the switchless ring's links of this node, one subnet per link.\n"
        "network:\n  version: 2\n  ethernets:\n"
        "    enp1s0f0np0:\n      mtu: 9000\n      addresses: [192.168.10.1/24]\n"
        "      # spark1:enp1s0f0np0 <-> spark2:enp1s0f1np1\n"
        "    enp1s0f1np1:\n      mtu: 9000\n      addresses: [192.168.30.2/24]\n"
        "      # spark3:enp1s0f0np0 <-> spark1:enp1s0f1np1\n")
