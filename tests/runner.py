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


# Reaching the simulated nodes as an outsider (this machine sits on both networks and is no node) or as a node.
def node_docker_exec(node, argv):
    """A command on the simulated node itself (not in one of its containers); its output, stripped."""
    import docker

    result = docker.from_env().containers.get(node).exec_run(argv)
    assert result.exit_code == 0, result.output
    return result.output.decode().strip()


# Connects to each address:port given as argv (from the source address argv[1], or any), 3 s each at most; prints JSON
# {"address:port": "open" | "refused" | the error's name}.
CONNECT_ALL = """
import json, socket, sys
found = {}
for target in sys.argv[2:]:
    address, port = target.rsplit(":", 1)
    s = socket.socket(); s.settimeout(3)
    if sys.argv[1] != "any": s.bind((sys.argv[1], 0))
    try:
        s.connect((address, int(port))); found[target] = "open"
    except ConnectionRefusedError:
        found[target] = "refused"
    except OSError as exc:
        found[target] = type(exc).__name__
    s.close()
print(json.dumps(found))
"""
NODE_ADDRESSES = {"sim-head": ("10.209.0.10", "10.210.0.10"), "sim-worker1": ("10.209.0.11", "10.210.0.11")}


def listening(node):
    """Every TCP port node listens on, as ss shows it there (its own services and every container's: host networking)."""
    rows = node_docker_exec(node, ["ss", "-H", "-t", "-l", "-n"]).splitlines()
    return sorted({int(row.split()[3].rsplit(":", 1)[1]) for row in rows})


def connect_all(targets, node=None, source="any"):
    argv = ["python3", "-c", CONNECT_ALL, source] + list(targets)
    out = node_docker_exec(node, argv) if node else subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return json.loads(out)
