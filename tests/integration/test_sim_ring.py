"""Switchless rings on the simulated cluster: three nodes cabled in a ring (a veth pair per cable, no address until the
fabric role applies the netplan). In `make test`: the ring is applied and proven from both ends, a link on the
connection's interface is refused, an apply that loses a node is rolled back on every node, and host_guard's earlyoom
acts on the ring's nodes (nothing serves there, so it can only end the test's own process). In `make test-extended`
(marker `extended`): the ring serves a TP=3 model and an outsider reaches SSH and its front door alone, a swapped and
a pulled cable are named, and a fourth node joins the ring and Ray joins all four. Leaves the ring torn down."""

import json
import os
import time
import urllib.request

import docker
import pytest

from runner import ROOT, connect_all, datagrams_from, listening, node_docker, open_listeners, recap, record, run, send_udp

pytestmark = pytest.mark.slow
extended = pytest.mark.extended

RING3 = os.path.join(ROOT, "inventories", "sim-ring3")
RING4 = os.path.join(ROOT, "inventories", "sim-ring4")
NODES = ["sim-r1", "sim-r2", "sim-r3"]
HEAD = "10.209.0.21"


VICTIM = r"""
import fcntl, json, os, sys, time
open("/proc/self/comm", "w").write("VLLM::Worker")
os.makedirs("/dev/shm/dgx-spark-sim-gb10", exist_ok=True)
path = "/dev/shm/dgx-spark-sim-gb10/rank-host-guard-test"
handle = open(path, "w")
fcntl.flock(handle, fcntl.LOCK_EX)
json.dump({"kind": "rank", "bytes": int(sys.argv[1]), "utilization": 0.95, "model": "host-guard-test"}, handle)
handle.flush()
print(os.getpid(), flush=True)
time.sleep(600)
"""

SAMPLER = r"""
import json, signal, subprocess, sys, time
victim = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
low, deadline = 999.0, time.monotonic() + 45
while victim.poll() is None and time.monotonic() < deadline:
    with open("/proc/meminfo", encoding="utf-8") as handle:
        low = min(low, [int(l.split()[1]) for l in handle if l.startswith("MemAvailable:")][0] / 1024 ** 2)
    time.sleep(0.01)
if victim.poll() is None:
    victim.kill()
code = victim.wait()
print(json.dumps({"low_gib": low, "ended_by": signal.Signals(-code).name if code < 0 else "exit %d" % code}))
"""


def playbook(name, inventory, *extra, log=None, check=False):
    return run(log or name, ["ansible-playbook", "-i", inventory, "playbooks/%s.yml" % name] + list(extra), check=check, timeout=1800)


def sim(inventory, log, traps=None, *extra):
    return playbook("sim", inventory, "-e", json.dumps({"sim_traps": traps or {}}), *extra, log=log, check=True)


def node(name, argv):
    result = docker.from_env().containers.get(name).exec_run(argv)
    assert result.exit_code == 0, result.output
    return result.output.decode()


def ports(name):
    """{port: (mtu, [addresses])} of a node's ConnectX ports."""
    found = json.loads(node(name, ["ip", "-j", "addr", "show"]))
    return {l["ifname"]: (l["mtu"], sorted("%s/%s" % (a["local"], a["prefixlen"]) for a in l.get("addr_info") or [] if a["family"] == "inet"))
            for l in found if l["ifname"].startswith("enp1s0")}


def chat(inventory, model):
    with open(os.path.join(inventory, ".secrets", "vllm_api_key"), encoding="utf-8") as handle:
        key = handle.read().strip()
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}).encode()
    request = urllib.request.Request("http://%s:8000/v1/chat/completions" % HEAD, data=body,
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.status


@pytest.fixture(scope="module", name="ring")
def fixture_ring():
    sim(RING3, "ring3-sim-up")
    yield RING3
    playbook("teardown", RING4, log="ring-teardown")
    run("ring-sim-down", ["ansible-playbook", "-i", RING4, "playbooks/sim.yml", "-e", "sim_state=absent"], check=False)


def test_the_ring_is_applied_and_proven_from_both_ends(ring):
    rc, out = playbook("fabric", ring, "--check", "--diff", log="ring3-fabric-check", check=True)
    assert out.count("+++ after: /etc/netplan/60-dgx-spark-dgx-spark-ring.yaml") == 3  # the netplan each node would get
    assert "+      addresses: [192.168.10.1/24]" in out and "+      addresses: [192.168.30.1/24]" in out
    for name in NODES:  # nothing applied
        assert all(addresses == [] for mtu, addresses in ports(name).values()), ports(name)
    rc, out = playbook("fabric", ring, log="ring3-fabric", check=True)  # the sim plugs cables; only the fabric role addresses them
    assert ports("sim-r1") == {"enp1s0f0np0": (9000, ["192.168.10.1/24"]), "enp1s0f1np1": (9000, ["192.168.30.2/24"])}
    assert ports("sim-r2") == {"enp1s0f0np0": (9000, ["192.168.20.1/24"]), "enp1s0f1np1": (9000, ["192.168.10.2/24"])}
    for name in NODES:  # confirmed: no rollback armed, the file in place, validated by netplan's own generator
        found = node(name, ["sh", "-c", "ls /etc/netplan; ls /var/lib/dgx-spark-vllm/dgx-spark/run/ring-try"]).split()
        assert found[0] == "60-dgx-spark-dgx-spark-ring.yaml" and "pending" not in found and "backup" not in found, found
    pinged = [line for line in out.splitlines() if line.startswith("ok: [sim-r") and " -> sim-r" in line]
    assert len(pinged) == 6, pinged  # each of the 3 links from both ends
    flat = " ".join(out.split())
    assert "sim-r1:enp1s0f0np0 <-> sim-r2:enp1s0f1np1 sim-r1 enp1s0f0np0 192.168.10.1/24 mtu 9000 rocep1s0f0:1 GID index 3" in flat
    rc, out = playbook("fabric", ring, log="ring3-fabric-again", check=True)
    assert all(h["changed"] == 0 for h in recap(out).values()), recap(out)


@extended
def test_the_ring_serves_tp3(ring):
    rc, out = playbook("serve", ring, log="ring3-serve", check=True)
    env = node("sim-r2", ["sh", "-c", "docker exec dgx-spark-ray-sim-r2 env"])
    assert "NCCL_IB_SUBNET_AWARE_ROUTING=1" in env and "NCCL_IB_SUBNET_PREFIX_LEN=24" in env
    assert "NCCL_IB_HCA==rocep1s0f0:1,rocep1s0f1:1" in env
    assert chat(ring, "sim-tiny-ring") == 200
    rc, out = playbook("serve", ring, log="ring3-serve-again", check=True)
    assert all(h["changed"] == 0 for h in recap(out).values()), recap(out)


@extended
def test_an_outsider_reaches_only_ssh_and_the_ring_heads_front_door(ring):
    """Where Ray and vLLM's ranks speak over the management network (the fabric address is the management address, as
    in inventories/sparks-ring), the table tells the nodes by their addresses: from this machine, which shares that
    network and is no node, every TCP port any ring node lists with ss, at every node's management address (the one
    network an outsider shares with a ring: each link is a cable between two nodes), answers only for SSH and the
    head's front door; a TCP port and a UDP socket opened now in the head's
    Ray container are refused to it and reached by a node."""
    assert chat(ring, "sim-tiny-ring") == 200  # vLLM's ranks and Ray's workers have opened their sockets
    spare = node_docker("sim-r1").containers.get("dgx-spark-ray-sim-r1")
    tcp, udp = open_listeners(spare)
    addresses = {name: sorted(a["local"] for l in json.loads(node(name, ["ip", "-j", "addr", "show"])) for a in l.get("addr_info") or []
                              if a["family"] == "inet" and not a["local"].startswith("127.")) for name in NODES}
    assert all(len(found) == 3 for found in addresses.values()), addresses  # the management address and two ring links
    ports = {name: listening(name) for name in NODES}
    assert tcp in ports["sim-r1"] and 6379 in ports["sim-r1"], ports
    targets = ["%s:%d" % (a, p) for name in NODES for a in addresses[name] if a.startswith("10.209.") for p in ports[name]]
    answers = connect_all(targets)
    opened = sorted(t for t, answer in answers.items() if answer == "open")
    assert opened == sorted(["10.209.0.21:22", "10.209.0.22:22", "10.209.0.23:22", "10.209.0.21:8000"]), answers
    send_udp(["%s:%d" % (HEAD, udp)])
    send_udp(["%s:%d" % (HEAD, udp)], node="sim-r2", source="10.209.0.22")
    assert datagrams_from(spare) == ["10.209.0.22"]
    near = connect_all(["%s:%d" % (HEAD, p) for p in (6379, 6800, tcp)], node="sim-r2", source="10.209.0.22")
    assert set(near.values()) == {"open"}, near
    print("outsider, ring: %d port x address pairs tried, %d answered" % (len(targets), len(opened)))


def test_links_on_the_connections_interface_or_over_the_management_network_are_refused_by_the_probe(ring):
    cut = {"spark_fabric_ring": {"links": [
        {"subnet": "192.168.10.0/24", "a": "sim-r1", "a_if": "enP7s7", "b": "sim-r2", "b_if": "enp1s0f1np1"},
        {"subnet": "10.209.0.0/24", "a": "sim-r2", "a_if": "enp1s0f0np0", "b": "sim-r3", "b_if": "enp1s0f1np1"},
        {"subnet": "192.168.30.0/24", "a": "sim-r3", "a_if": "enp1s0f0np0", "b": "sim-r1", "b_if": "enp1s0f1np1"}]}}
    rc, out = playbook("plan", ring, "-e", json.dumps(cut), log="ring3-plan-cut")
    flat = " ".join(out.split())
    assert rc != 0
    assert ("sim-r1: ring link sim-r1:enP7s7 <-> sim-r2:enp1s0f1np1 uses enP7s7, the interface Ansible reaches sim-r1 over; "
            "applying it would cut the connection") in flat
    record("bad input", "ring: a link on the interface of the Ansible connection", "refused by the probe's plan, naming the "
           "node, the interface and the fix (the ConnectX ports)")


@extended
def test_a_swapped_cable_and_a_pulled_one_are_named(ring):
    started = time.monotonic()
    sim(ring, "ring3-sim-swap", {"cable_swap": ["sim-r2"]})
    rc, out = playbook("fabric", ring, log="ring3-fabric-swap")
    flat = " ".join(out.split())
    assert rc != 0
    assert ("sim-r2: both its links fail from both ends while the others answer, so its two cables are probably swapped "
            "(enp1s0f0np0 and enp1s0f1np1). Swap them back") in flat
    sim(ring, "ring3-sim-unswap")
    playbook("fabric", ring, log="ring3-fabric-unswapped", check=True)
    record("ring", "two cables of a ring node swapped", "fabric.yml (and serve.yml) names the node and its two ports; nothing "
           "is changed; once plugged right, the links answer", time.monotonic() - started)
    started = time.monotonic()
    sim(ring, "ring3-sim-link-down", {"link_down": {"sim-r3": "enp1s0f0np0"}})
    rc, out = playbook("fabric", ring, log="ring3-fabric-link-down")
    assert rc != 0
    assert "link sim-r3:enp1s0f0np0 <-> sim-r1:enp1s0f1np1: sim-r1 enp1s0f1np1 got no answer from sim-r3 at 192.168.30.1" in " ".join(out.split())
    sim(ring, "ring3-sim-link-up")
    playbook("fabric", ring, log="ring3-fabric-link-up", check=True)
    record("ring", "a ring cable pulled at one end (link down)", "fabric.yml names the link and both ends; once it is "
           "back, the links answer", time.monotonic() - started)


def test_an_apply_that_loses_a_node_is_rolled_back_everywhere(ring):
    started = time.monotonic()
    before = {n: ports(n) for n in NODES}
    sim(ring, "ring3-sim-apply-cuts", {"apply_cuts": ["sim-r2"]})
    moved = {"spark_fabric_ring": {"links": [
        {"subnet": "192.168.10.0/24", "a": "sim-r1", "a_if": "enp1s0f0np0", "b": "sim-r2", "b_if": "enp1s0f1np1"},
        {"subnet": "192.168.21.0/24", "a": "sim-r2", "a_if": "enp1s0f0np0", "b": "sim-r3", "b_if": "enp1s0f1np1"},
        {"subnet": "192.168.30.0/24", "a": "sim-r3", "a_if": "enp1s0f0np0", "b": "sim-r1", "b_if": "enp1s0f1np1"}]},
        "fabric_ring_rollback_after": 40, "fabric_ring_answer_timeout": 8}
    rc, out = playbook("fabric", ring, "-e", json.dumps(moved), log="ring3-fabric-cut")
    assert rc != 0
    assert "sim-r2 stopped answering over SSH after its ring netplan was applied; its own timer puts the previous one back" in out
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and ports("sim-r2") != before["sim-r2"]:
        time.sleep(2)
    assert {n: ports(n) for n in NODES} == before  # every node back on the confirmed netplan, sim-r2 by its own timer
    assert "rolled back" in node("sim-r2", ["cat", "/var/lib/dgx-spark-vllm/dgx-spark/run/ring-try/rollbacks.log"])
    rc, out = playbook("fabric", ring, log="ring3-fabric-after-cut", check=True)  # reachable again, nothing to change
    assert all(h["changed"] == 0 for h in recap(out).values()), recap(out)
    record("ring", "a netplan apply that loses a node (its SSH cut)", "every other node rolls back at once, the lost node "
           "by its own timer; the run names the node; it answers again and a second run changes nothing",
           time.monotonic() - started)


def available_gib(name):
    meminfo = node(name, ["cat", "/proc/meminfo"])
    return int([l for l in meminfo.splitlines() if l.startswith("MemAvailable:")][0].split()[1]) / 1024 ** 2


def test_host_guard_converges_twice_and_earlyoom_runs_on_the_nodes(ring):
    rc, out = playbook("host_guard", ring, log="guard-first", check=True)
    flat = " ".join(out.split())
    with open("/proc/sys/vm/swappiness", encoding="utf-8") as handle:  # a node reads this machine's (it has none of its own)
        swappiness = int(handle.read())
    for name in NODES:
        assert ("%s: vm.swappiness is %d, above 10" % (name, swappiness) in flat) == (swappiness > 10), flat[-2000:]
    rc, out = playbook("host_guard", ring, log="guard-again", check=True)
    assert all(h["changed"] == 0 for h in recap(out).values()), recap(out)
    for name in NODES:
        node(name, ["pgrep", "-x", "earlyoom"])
        args = node(name, ["cat", "/etc/default/earlyoom"])
        assert "-m 4 -s 100" in args and "--prefer '^(VLLM::|ray::|vllm)'" in args


def test_earlyoom_ends_the_process_holding_the_memory_and_sshd_stays(ring):
    worker = docker.from_env().containers.get("sim-r2")
    sshd_before = node("sim-r2", ["pgrep", "-o", "-x", "sshd"]).strip()
    hold = int(113.5 * 1024 ** 3)  # leaves ~3.8 GiB of the idle 117.3: below 4% of the GB10's 128 GB
    started = time.monotonic()
    # Watched from inside the node every 10 ms: earlyoom may end the holder within a few hundred ms of the pressure
    # showing, quicker than a docker exec per sample from here could see it.
    result = worker.exec_run(["python3", "-c", SAMPLER, VICTIM, str(hold)])
    assert result.exit_code == 0, result.output
    seen = json.loads(result.output.decode().strip().splitlines()[-1])
    assert seen["low_gib"] < 5, seen  # the stand-in showed the pressure
    assert seen["ended_by"] in ("SIGTERM", "SIGKILL"), seen  # earlyoom ended it (it would otherwise sleep 600 s)
    for dummy in range(30):  # its memory comes back with it (the stand-in frees a dead rank's entry within seconds)
        if available_gib("sim-r2") > 100:
            break
        time.sleep(0.5)
    assert available_gib("sim-r2") > 100
    assert node("sim-r2", ["pgrep", "-o", "-x", "sshd"]).strip() == sshd_before
    record("trap", "memory pressure on a node (MemAvailable under earlyoom's 4%)", "earlyoom (host_guard) ends the vLLM "
           "process holding the memory; sshd and the node stay up", time.monotonic() - started)


@extended
def test_a_fourth_node_joins_the_ring_and_ray(ring):
    playbook("teardown", ring, log="ring3-teardown", check=True)
    sim(RING4, "ring4-sim-up")
    rc, out = playbook("serve", RING4, log="ring4-serve", check=True)
    for name in NODES + ["sim-r4"]:
        assert sorted(mtu for mtu, dummy in ports(name).values()) == [9000, 9000]
    status = node("sim-r1", ["docker", "exec", "dgx-spark-ray-sim-r1", "ray", "status"])
    assert len([line for line in status.splitlines() if line.strip().startswith("1 node_")]) == 4, status
    assert "parallelism: TP=4" in out
    assert chat(RING4, "sim-tiny-ring") == 200
