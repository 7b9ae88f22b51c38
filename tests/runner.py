"""Run a command for a test, keep its output under tests/output/logs, and fail with the tail of it."""

import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOGS = os.path.join(ROOT, "tests", "output", "logs")
VENV_BIN = os.path.join(ROOT, ".venv", "bin")


def environment(extra=None):
    env = dict(os.environ)
    env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")
    env.setdefault("ANSIBLE_CONFIG", os.path.join(ROOT, "ansible.cfg"))
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["PY_COLORS"] = "0"
    env.update(extra or {})
    return env


def run(name, argv, cwd=ROOT, env=None, timeout=3600, check=True, tail=120):
    """Run ``argv``; its combined output goes to tests/output/logs/<name>.log and is returned."""
    os.makedirs(LOGS, exist_ok=True)
    log = os.path.join(LOGS, name + ".log")
    with open(log, "w", encoding="utf-8") as handle:
        proc = subprocess.run(argv, cwd=cwd, env=environment(env), stdout=handle, stderr=subprocess.STDOUT,
                              timeout=timeout, check=False)
    with open(log, encoding="utf-8", errors="replace") as handle:
        output = handle.read()
    if check and proc.returncode != 0:
        lines = output.splitlines()
        raise AssertionError("%s exited %d (full log: %s); last lines:\n%s"
                             % (" ".join(argv), proc.returncode, log, "\n".join(lines[-tail:])))
    return proc.returncode, output


def recap(output):
    """{host: {"changed": n, "failed": n, "unreachable": n, ...}} from the last PLAY RECAP of an ansible-playbook run."""
    hosts = {}
    for line in output.split("PLAY RECAP")[-1].splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[1] == ":":
            hosts[parts[0]] = {k: int(v) for k, v in (p.split("=") for p in parts[2:] if "=" in p)}
    return hosts


SIM_ROOT = "/var/lib/dgx-spark-sim"


def node_docker(node, root=SIM_ROOT):
    """A Docker client of a simulated node's own daemon (its socket: <root>/nodes/<node>/run/docker/docker.sock)."""
    import docker

    return docker.DockerClient(base_url="unix://%s/nodes/%s/run/docker/docker.sock" % (root, node))


RELIABILITY = os.path.join(ROOT, "tests", "output", "reliability.jsonl")


def record(kind, name, does, seconds=None, load=None):
    """One row of docs/reliability.md (scripts/reliability_table.py writes it from these rows): a fault or trap the
    test injected (``kind``), what the collection did about it, the time from injection to a served completion, and
    what a load generator running meanwhile saw (tests/integration/load.py figures)."""
    os.makedirs(os.path.dirname(RELIABILITY), exist_ok=True)
    row = {"kind": kind, "name": name, "does": does, "load": load, "seconds": None if seconds is None else round(seconds, 1)}
    with open(RELIABILITY, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + chr(10))
