"""Run a command for a test, keep its output under tests/output/logs, and fail with the tail of it."""

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

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


# Run inside a serving container, as the model's code could: a TCP listener and a UDP socket on ports the kernel picks,
# on every address; "tcp udp" goes to /tmp/dgx-spark-test-ports and each datagram's source address to
# /tmp/dgx-spark-test-udp, for two minutes.
LISTEN = """
import select, socket, time
t = socket.socket(); t.bind(("0.0.0.0", 0)); t.listen()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 0))
open("/tmp/dgx-spark-test-ports", "w").write("%d %d" % (t.getsockname()[1], u.getsockname()[1]))
end = time.time() + 120
while time.time() < end:
    if select.select([u], [], [], 1)[0]:
        data, peer = u.recvfrom(64)
        with open("/tmp/dgx-spark-test-udp", "a") as found:
            found.write(peer[0] + chr(10))
"""


def open_listeners(container):
    """(tcp, udp): the ports of a listener and a UDP socket opened now in ``container`` (a Docker SDK container)."""
    container.exec_run(["rm", "-f", "/tmp/dgx-spark-test-ports", "/tmp/dgx-spark-test-udp"])
    container.exec_run(["python3", "-c", LISTEN], detach=True)
    for dummy in range(50):
        ports = container.exec_run(["cat", "/tmp/dgx-spark-test-ports"]).output.decode().split()
        if len(ports) == 2 and all(p.isdigit() for p in ports):
            return int(ports[0]), int(ports[1])
        time.sleep(0.2)
    raise AssertionError("no listener opened in %s" % container.name)


# Sends three datagrams to each address:port given as argv, from the source address argv[1] (or any).
SEND_UDP = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if sys.argv[1] != "any": s.bind((sys.argv[1], 0))
for target in sys.argv[2:]:
    address, port = target.rsplit(":", 1)
    for dummy in range(3):
        try:
            s.sendto(b"dgx-spark-test", (address, int(port)))
        except OSError:
            pass
"""


def send_udp(targets, node=None, source="any"):
    argv = ["python3", "-c", SEND_UDP, source] + list(targets)
    if node:
        node_docker_exec(node, argv)
    else:
        subprocess.run(argv, capture_output=True, text=True, check=True)


def datagrams_from(container):
    """The source addresses of the datagrams the listener of open_listeners got (after a moment for late ones)."""
    time.sleep(1.5)
    out = container.exec_run(["sh", "-c", "cat /tmp/dgx-spark-test-udp 2>/dev/null || true"]).output.decode()
    return sorted(set(out.split()))


def ask(url, method="GET", key=None, body=None):
    """One request as an outsider makes it: its status (an HTTP error's too) and the first bytes of its body."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read(400)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(400)


# Routes vLLM serves that its /openapi.json does not list (mounted apps, documentation, stubs), and spellings that
# must not slip past the door's one open route.
UNLISTED = ("/metrics", "/docs", "/redoc", "/docs/oauth2-redirect", "/static/x", "/invocations", "/ping", "/tokenize", "/load",
            "/version", "//health", "/health/../invocations", "/%2e%2e/invocations", "/HEALTH", "/v1/../invocations", "/health/")


def keyless_answers(base, api_key):
    """Every route the image's vLLM lists (its /openapi.json, read through the door at ``base`` with the key), with
    every method it lists, and the routes it serves unlisted, asked without the key and with wrong ones. Returns
    (how many route and method pairs were asked, what answered other than 401 or nginx's own refusal, GET /health
    aside, which must answer 200)."""
    with urllib.request.urlopen(urllib.request.Request(base + "/openapi.json", headers={"Authorization": "Bearer " + api_key}),
                                timeout=60) as response:
        assert response.status == 200, response.status
        listed = json.loads(response.read())["paths"]
    asked = []
    for path, methods in sorted(listed.items()):
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        for method in sorted(m.upper() for m in methods if m in ("get", "post", "put", "delete", "patch")):
            asked.append((method, concrete))
    asked += [(method, path) for path in UNLISTED for method in ("GET", "POST")]
    assert len(asked) > 40, asked  # vLLM 0.32 lists about 50 routes
    answered = []
    for method, path in asked:
        for key in (None, "wrong-" + api_key, api_key.swapcase()):  # nginx compares a map's strings ignoring case
            status, body = ask(base + path, method=method, key=key, body=b"{}" if method != "GET" else None)
            if method == "GET" and path in ("/health", "//health"):  # nginx merges the slashes: the health route
                assert status == 200, (method, path, status)
            elif status != 401 and not (status in (400, 403) and b"<center>nginx</center>" in body):  # nginx's own refusals
                answered.append((method, path, key is not None, status, body[:80]))
    return len(asked), answered


# The simulation's image registry (roles/sim_cluster/tasks/registry.yml): TLS from its CA, a login; the serving image
# under its name, for image_source: pull.
REGISTRY = "10.209.0.6:5000"
PULLED = REGISTRY + "/dgx-spark-sim/runtime:sim"


def registry_login():
    with open(os.path.join(ROOT, "inventories", "sim", ".secrets", "registry_password"), encoding="utf-8") as handle:
        return {"username": "sim-puller", "password": handle.read().strip()}


def push_to_registry(push=True):
    """The head's serving image under the registry's name, and with ``push`` in the registry, pushed from the head's
    daemon as a site's build pushes it (the head trusts the registry's CA in /etc/docker/certs.d, as every node does):
    about 2 minutes the first time; the simulation keeps the registry's data. Returns the image's ID."""
    head = node_docker("sim-head")
    head.images.get("dgx-spark-sim/runtime:sim").tag(PULLED)
    for line in head.images.push(PULLED.rsplit(":", 1)[0], "sim", auth_config=registry_login(), stream=True, decode=True) if push else []:
        assert "error" not in line, line
    return head.images.get(PULLED).id


def untag_pulled(*nodes):
    """The registry's name taken from ``nodes`` (the tag only: the image stays under dgx-spark-sim/runtime:sim)."""
    import docker

    for node in nodes:
        try:
            node_docker(node).images.remove(PULLED)
        except docker.errors.ImageNotFound:
            pass
