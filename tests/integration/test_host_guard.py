"""host_guard on the simulated nodes: earlyoom really runs there, reading the node's GB10 memory stand-in, and kills
the vLLM-like process holding the memory when the stand-in shows less available than its threshold; sshd is never
picked; the role converges twice with no change. The swap check reads this machine's swap (a node has no swap of its
own) and says so in a warning."""

import json
import os
import time

import docker
import pytest

from runner import ROOT, recap, record, run

pytestmark = pytest.mark.slow

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


def guard(log, *extra):
    return run(log, ["ansible-playbook", "playbooks/host_guard.yml"] + list(extra), timeout=900)


def node(name):
    return docker.from_env().containers.get(name)


def available_gib(name):
    meminfo = node(name).exec_run(["cat", "/proc/meminfo"]).output.decode()
    return int([l for l in meminfo.splitlines() if l.startswith("MemAvailable:")][0].split()[1]) / 1024 ** 2


@pytest.fixture(scope="module", name="nodes")
def fixture_nodes():
    run("guard-sim-up", ["ansible-playbook", "playbooks/sim.yml"], timeout=1800)
    yield ["sim-head", "sim-worker1"]


def test_host_guard_converges_twice_and_earlyoom_runs(nodes):
    rc, out = guard("guard-first")
    flat = " ".join(out.split())
    with open("/proc/sys/vm/swappiness", encoding="utf-8") as handle:  # a node reads this machine's (it has none of its own)
        swappiness = int(handle.read())
    for name in nodes:
        warned = "%s: vm.swappiness is %d, above 10" % (name, swappiness)
        assert (warned in flat) == (swappiness > 10), flat[-2000:]
    rc, out = guard("guard-again")
    assert all(h["changed"] == 0 for h in recap(out).values()), recap(out)
    for name in nodes:
        assert node(name).exec_run(["pgrep", "-x", "earlyoom"]).exit_code == 0
        args = node(name).exec_run(["cat", "/etc/default/earlyoom"]).output.decode()
        assert "-m 4 -s 100" in args and "--prefer '^(VLLM::|ray::|vllm)'" in args


def test_earlyoom_kills_the_process_holding_the_memory_and_sshd_stays(nodes):
    worker = node("sim-worker1")
    sshd_before = worker.exec_run(["pgrep", "-o", "-x", "sshd"]).output.decode().strip()
    assert sshd_before
    hold = int(113.5 * 1024 ** 3)  # leaves ~3.8 GiB of the idle 117.3: below 4% of the GB10's 128 GB
    started = time.monotonic()
    victim = worker.exec_run(["python3", "-c", VICTIM, str(hold)], detach=True)
    low = None
    for dummy in range(60):
        low = min(low or 999, available_gib("sim-worker1"))
        if worker.exec_run(["pgrep", "-f", "host-guard-test|VLLM::Worker"]).exit_code != 0 and low < 5:
            break
        time.sleep(0.5)
    assert low is not None and low < 5, low  # the stand-in showed the pressure
    assert worker.exec_run(["pgrep", "-x", "VLLM::Worker"]).exit_code != 0  # earlyoom ended it
    assert available_gib("sim-worker1") > 100  # its memory came back with it
    assert worker.exec_run(["pgrep", "-o", "-x", "sshd"]).output.decode().strip() == sshd_before
    record("trap", "memory pressure on a node (MemAvailable under earlyoom's 4%)", "earlyoom (host_guard) ends the vLLM "
           "process holding the memory; sshd and the node stay up", time.monotonic() - started)
    del victim
