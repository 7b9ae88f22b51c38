"""Faults and bad input on the simulated cluster: each gets a clear error before anything changes,
and the next serve.yml recovers. Runs against inventories/sim; leaves the cluster torn down."""

import json
import os
import re
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import docker
import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import monitoring
from load import Load
from runner import (PULLED, REGISTRY, ROOT, SIM_ROOT, NODE_ADDRESSES, connect_all, datagrams_from, environment, keyless_answers, listening,
                    node_docker, node_docker_exec, open_listeners, push_to_registry, recap, record, registry_login, run, send_udp, untag_pulled)

pytestmark = pytest.mark.slow

SIM = os.path.join(ROOT, "inventories", "sim")
HEAD_RAY = "dgx-spark-ray-sim-head"
WORKER_RAY = "dgx-spark-ray-sim-worker1"


def playbook(name, *extra, log=None, check=False):
    return run(log or name, ["ansible-playbook", "playbooks/%s.yml" % name] + list(extra), check=check, timeout=1800)


def our_containers(dummy=None):
    """The collection's containers on every node's own daemon."""
    return sorted(c.name for node in ("sim-head", "sim-worker1")
                  for c in node_docker(node).containers.list(all=True, filters={"label": "dgx_spark.vllm.managed=true"}))


def every_container(client):
    """Every container on this machine's daemon and on each node's own, with its ID."""
    found = {("machine", c.name): c.id for c in client.containers.list(all=True)}
    for node in ("sim-head", "sim-worker1"):
        found.update({(node, c.name): c.id for c in node_docker(node).containers.list(all=True)})
    return found


def sim(log, traps=None, *extra):
    """sim.yml on the faults' cluster: takes back every trap not named in ``traps`` and injects those."""
    argv = ["ansible-playbook", "playbooks/sim.yml", "-e", json.dumps({"sim_traps": traps or {}})] + list(extra)
    return run(log, argv, timeout=900)


def node_shell(client, node, command):
    result = client.containers.get(node).exec_run(["sh", "-c", command])
    assert result.exit_code == 0, result.output
    return result.output.decode()


def available_gib(client, node):
    line = [l for l in node_shell(client, node, "cat /proc/meminfo").splitlines() if l.startswith("MemAvailable:")][0]
    return int(line.split()[1]) / 1024 ** 2


def supervisor(node, state=None, seconds=60):
    """The node's supervisor's status file (module_utils/plan/boot.py); with ``state``, waited for until it says so."""
    deadline = time.monotonic() + seconds
    while True:
        status = json.loads(node_docker_exec(node, ["cat", "/var/lib/dgx-spark-vllm/dgx-spark/boot/status/status.json"]))
        if state is None or status.get("state") == state or time.monotonic() > deadline:
            if state is not None and status.get("state") != state:  # what systemd says of the unit (or ps of the process)
                shown = "systemctl status 'dgx-spark-vllm-serve-*' --no-pager -n 30 2>/dev/null || ps -o pid,etime,args -C python3; date +%s"
                unit = node_docker_exec(node, ["sh", "-c", shown])
                assert status.get("state") == state, (status, unit)
            return status
        time.sleep(1)


def head():
    return node_docker("sim-head")


def worker():
    return node_docker("sim-worker1")


def chat():
    with open(os.path.join(SIM, ".secrets", "vllm_api_key"), encoding="utf-8") as handle:
        key = handle.read().strip()
    body = json.dumps({"model": "sim-tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}).encode()
    request = urllib.request.Request("http://10.209.0.10:8000/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status


FIRST_SERVE = []


@pytest.fixture(scope="module", name="client")
def fixture_cluster():
    client = docker.from_env()
    run("faults-sim-up", ["ansible-playbook", "playbooks/sim.yml"], timeout=1800)
    # Shorter looks than the defaults (30 s for the load, 15 s for the join): the simulated cluster's load of seconds
    # would end within one default look and print no progress line, which a Spark's load of minutes prints every 30 s.
    # test_the_first_serve_shows_each_waits_progress_and_no_poll_says_failed reads those lines.
    rc, out = playbook("serve", "-e", "vllm_serve_look_seconds=10", "-e", "ray_cluster_look_seconds=5", log="faults-serve-first")
    FIRST_SERVE.append(out)
    yield client
    playbook("teardown", log="faults-teardown")
    run("faults-sim-down", ["ansible-playbook", "playbooks/sim.yml", "-e", "sim_state=absent"], check=False)


def api_key():
    with open(os.path.join(SIM, ".secrets", "vllm_api_key"), encoding="utf-8") as handle:
        return handle.read().strip()


def test_second_run_and_status_change_nothing_and_lose_no_request_under_load(client):
    """8 concurrent streams (half streaming) run through a no-change serve.yml and through status.yml: no request
    fails and the endpoint never stops answering."""
    with Load(api_key()) as load:
        time.sleep(3)
        rc, out = playbook("serve", log="faults-serve-idempotent")
        time.sleep(2)
    figures = load.figures()
    assert all(h["changed"] == 0 and h["failed"] == 0 for h in recap(out).values()), recap(out)
    assert "Changes: none, every container and vLLM run as planned" in out
    assert "Join gate: every node and GPU has joined Ray (read by the head's probe)" in out
    assert figures["requests"] >= 16 and figures["streaming"] >= 8, json.dumps(figures)  # whole, with the first errors (a dict would be cut short)
    assert figures["failed"] == 0 and figures["outage_s"] < 15, json.dumps(figures)  # whole, with the first errors (a dict would be cut short)
    record("load", "a no-change re-run of serve.yml", "changes nothing, restarts nothing", load=figures)
    with Load(api_key()) as load:
        time.sleep(3)
        rc, out = playbook("status", log="faults-status-under-load", check=True)
        time.sleep(2)
    figures = load.figures()
    assert "Healthy" in out
    assert "Now (over 2s): " in out and "output tokens/s" in out and "% used;" in out  # from vLLM's /metrics, under load
    live = [line for line in out.splitlines() if "Now (over 2s): " in line][0]
    assert " 0.0 output tokens/s" not in live, live  # 8 streams were answering
    assert figures["failed"] == 0 and figures["outage_s"] < 15, json.dumps(figures)  # whole, with the first errors (a dict would be cut short)
    record("load", "status.yml", "reads only", load=figures)


def test_the_first_serve_shows_each_waits_progress_and_no_poll_says_failed(client):
    """The first serve waited for the nodes to join and for vLLM to load: the output says how far each wait was, from
    Ray's count and from vLLM's log, and no poll prints FAILED (plugins/callback/progress.py)."""
    out = FIRST_SERVE[0]
    assert "FAILED - RETRYING" not in out
    waits = [line for line in out.splitlines() if line.startswith("... waiting [")]
    assert all(" (look " in line and " of at most " in line for line in waits), waits
    # Each look at vLLM's load names its stage from vLLM's log; the first may come before vLLM wrote anything (a load
    # that ends by the second look shows only that one).
    stages = ("engine starting", "ranks starting", "loading the weights", "sizing the KV cache", "serving, answering /health next")
    loads = [line.split(" - ", 1)[1].split(" (look")[0] for line in waits if "Wait for vLLM to load the model" in line]
    assert loads, waits
    assert all(said in stages or "shards" in said for said in loads[1:]), loads
    assert loads[0] in stages + ("vLLM runs; its log says nothing of its load yet",) or "shards" in loads[0], loads


CONNECT = """
import socket, sys
s = socket.socket(); s.settimeout(3)
if len(sys.argv) > 3: s.bind((sys.argv[3], 0))
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("open")
except ConnectionRefusedError:
    print("refused")
except OSError as exc:
    print(type(exc).__name__)
"""


def connect(address, port, node=None, source=None):
    """'open' or 'refused' for a TCP connection to ``address``:``port``, from this machine (no node of the cluster) or
    from ``node`` (from its ``source`` address)."""
    argv = ["python3", "-c", CONNECT, address, str(port)] + ([source] if source else [])
    if node:
        return node_docker_exec(node, argv)
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def models_status(key=None):
    headers = {"Authorization": "Bearer " + key} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request("http://10.209.0.10:8000/v1/models", headers=headers), timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_an_outsider_reaches_only_ssh_and_the_front_door_whatever_listens(client):
    """Deny by default, tried as an outsider would: every port either node lists as listening (read with ss there, not
    from the collection's plan), at every address of either node, from this machine, which sits on both the management
    and the fabric network and is no node of the cluster. Only SSH and the head's front door answer it; a port a
    process of the serving head's Ray container opens now, as vLLM's ranks pick theirs, is refused too, and so is a
    datagram to a UDP socket it opens. A node of the cluster, from its fabric address, reaches Ray's ports and that
    socket. The door answers only with the key."""
    spare = node_docker("sim-head").containers.get(HEAD_RAY)
    port, udp = open_listeners(spare)
    ports = {node: listening(node) for node in NODE_ADDRESSES}
    assert int(port) in ports["sim-head"], ports
    workers = [p for p in ports["sim-head"] if 10002 <= p <= 10101]
    assert workers and 6379 in ports["sim-head"] and 6800 in ports["sim-worker1"], ports  # Ray's, vLLM's rank among them
    bound = node_docker_exec("sim-head", ["ss", "-H", "-t", "-l", "-n"])
    for number in (6379, 6800, 6801, int(port)):
        assert "0.0.0.0:%d " % number in bound, bound  # on every interface: the table, not the address, refuses the outsider
    targets = ["%s:%d" % (address, p) for node, addresses in NODE_ADDRESSES.items() for address in addresses for p in ports[node]]
    answers = connect_all(targets)
    opened = sorted(t for t, answer in answers.items() if answer == "open")
    assert opened == sorted(["10.209.0.10:22", "10.210.0.10:22", "10.209.0.11:22", "10.210.0.11:22", "10.209.0.10:8000"]), answers
    assert all(answer == "refused" for t, answer in answers.items() if t not in opened), answers  # a reset, never a silent drop
    print("outsider: %d ports at %d addresses tried, %d answered" % (len(targets), 4, len(opened)))
    # The cluster's own nodes reach Ray's ports and the ranks' (the worker, from its fabric address).
    ray = ["10.210.0.10:%d" % p for p in [6379, 6800, 6801, 10001, workers[0], int(port)]]
    assert set(connect_all(ray, node="sim-worker1", source="10.210.0.11").values()) == {"open"}
    # Only from the fabric: a node's management address is not one of the cluster's.
    assert set(connect_all([t.replace("10.210.", "10.209.") for t in ray], node="sim-worker1", source="10.209.0.11").values()) == {"refused"}
    # UDP too: a datagram to the container's socket reaches it from the worker's fabric address only.
    send_udp(["%s:%d" % (address, udp) for addresses in NODE_ADDRESSES.values() for address in addresses])
    send_udp(["10.210.0.10:%d" % udp], node="sim-worker1", source="10.210.0.11")
    send_udp(["10.209.0.10:%d" % udp], node="sim-worker1", source="10.209.0.11")
    assert datagrams_from(spare) == ["10.210.0.11"]
    assert (models_status(), models_status("not-the-key"), models_status(api_key())) == (401, 401, 200)
    tables = node_docker_exec("sim-head", ["nft", "list", "tables"]).splitlines()
    assert tables.count("table inet dgx_spark_vllm_dgx_spark") == 1  # the collection's own, once (Docker's are left alone)


def test_without_the_key_no_route_vllm_serves_answers_but_health(client):
    """From this machine, no node, at the front door: every route the image's vLLM lists in its /openapi.json (read
    with the key), with each method it lists, and the routes it serves unlisted, asked without the key and with wrong
    ones: 401 (or nginx's own refusal), but GET /health."""
    asked, answered = keyless_answers("http://10.209.0.10:8000", api_key())
    assert answered == []
    print("front door: %d routes and methods asked without the key and with two wrong ones; only GET /health answered" % asked)


# Asks Ray's GCS for its node table over gRPC, as any client would: with no token, a wrong one, or the one in the file
# argv[3] names. Prints the gRPC status (OK or the error's code).
ASK_GCS = """
import sys, grpc
from ray.core.generated import gcs_service_pb2 as svc
token = {"none": None, "wrong": "not-the-token"}.get(sys.argv[2], None)
if sys.argv[2] == "file":
    token = open(sys.argv[3]).read().strip()
ask = grpc.insecure_channel(sys.argv[1]).unary_unary("/ray.rpc.NodeInfoGcsService/GetAllNodeInfo",
    request_serializer=svc.GetAllNodeInfoRequest.SerializeToString, response_deserializer=svc.GetAllNodeInfoReply.FromString)
try:
    reply = ask(svc.GetAllNodeInfoRequest(), timeout=10, metadata=(("authorization", "Bearer " + token),) if token else None)
    print("OK %d" % len(reply.node_info_list))
except grpc.RpcError as exc:
    print(exc.code().name)
"""


# Every TCP listener of a process this container sees, as [address, port, name, argv] (run in a Ray container: Ray's
# and vLLM's processes; the node's others are in other PID namespaces).
LISTENERS = """
import json, psutil
rows = []
for c in psutil.net_connections("tcp"):
    if c.status == "LISTEN" and c.pid:
        p = psutil.Process(c.pid)
        rows.append([c.laddr.ip, c.laddr.port, p.name(), " ".join(p.cmdline())[:200]])
print(json.dumps(rows))
"""
# Run from the Ray image on a node's network, as any local process could. argv[1]: the token's file, argv[2]: JSON
# [[address, port], ...] of Ray's service processes, argv[3]: the raylet's address. With the token it asks the raylet
# for its core workers' gRPC ports (Ray's own answer, not a list of ours), then asks every port without it: a gRPC
# call of each of Ray's services (an empty request) and an HTTP GET. Prints {"address:port": verdict}: "token" (a
# service refused the call as UNAUTHENTICATED, or HTTP 401, and nothing answered OK), "metrics" (HTTP 200 with
# Prometheus' text format alone), or what answered.
ASK_RAY_PORTS = """
import json, re, sys, urllib.request, grpc
from ray.core.generated import node_manager_pb2 as nm
token = open(sys.argv[1]).read().strip()
targets = [tuple(t) for t in json.loads(sys.argv[2])]
stats = grpc.insecure_channel(sys.argv[3]).unary_unary("/ray.rpc.NodeManagerService/GetNodeStats",
    request_serializer=nm.GetNodeStatsRequest.SerializeToString, response_deserializer=nm.GetNodeStatsReply.FromString)(
    nm.GetNodeStatsRequest(), timeout=10, metadata=(("authorization", "Bearer " + token),))
workers = sorted({w.port for w in stats.core_workers_stats if w.port})
targets += [(sys.argv[3].rsplit(":", 1)[0], p) for p in workers]
METHODS = ["/ray.rpc.NodeInfoGcsService/GetAllNodeInfo", "/ray.rpc.NodeManagerService/GetNodeStats",
           "/ray.rpc.ObjectManagerService/Pull", "/ray.rpc.CoreWorkerService/GetCoreWorkerStats",
           "/ray.rpc.ReporterService/HealthCheck", "/ray.rpc.RayletDriver/ClusterInfo"]
METRIC = re.compile(r"^(#.*|[a-zA-Z_:][a-zA-Z0-9_:]*({.*})? \\S+( \\d+)?)?$")
found = {}
for address, port in targets:
    codes = set()
    for method in METHODS:
        try:
            grpc.insecure_channel("%s:%d" % (address, port)).unary_unary(method, request_serializer=lambda x: x,
                                                                          response_deserializer=lambda x: x)(b"", timeout=5)
            codes.add("OK")
        except grpc.RpcError as exc:
            codes.add(exc.code().name)
    verdict = "token" if "UNAUTHENTICATED" in codes and "OK" not in codes else None
    if verdict is None:
        try:
            with urllib.request.urlopen("http://%s:%d/" % (address, port), timeout=5) as answer:
                body = answer.read().decode(errors="replace")
                verdict = "metrics" if all(METRIC.match(line) for line in body.splitlines()) else "HTTP %d" % answer.status
        except urllib.error.HTTPError as exc:
            verdict = "token" if exc.code == 401 else "HTTP %d" % exc.code
        except Exception as exc:
            verdict = "gRPC %s, HTTP %s" % (sorted(codes), type(exc).__name__)
    found["%s:%d" % (address, port)] = verdict
print(json.dumps({"workers": workers, "found": found}))
"""
RAY_SERVICES = re.compile(r"^(gcs_server|raylet|ray::DashboardAgent|ray::RuntimeEnvAgent)$")


def test_ray_refuses_a_client_without_its_token_even_on_the_nodes_loopback(client):
    """The firewall admits the node itself; Ray's token is what keeps out a process on it. Enumerated, not listed: on
    each node, every port a Ray process listens on (read in its Ray container) and every core worker's gRPC port (the
    raylet's answer, asked with the token), asked without the token from a container of the cluster's image on the
    node's network, at loopback where the port takes it: each refuses (UNAUTHENTICATED, HTTP 401) but Ray's metrics
    exporters, which serve Prometheus' text alone. The GCS answers a client with the node's token (0600, root's), and
    refuses a wrong one."""
    image = head().containers.get(HEAD_RAY).attrs["Config"]["Image"]
    mode = head().containers.get(HEAD_RAY).attrs["HostConfig"]["NetworkMode"]
    token = "/var/lib/dgx-spark-vllm/dgx-spark/container/keys/ray_auth_token"
    assert node_docker_exec("sim-head", ["stat", "-c", "%a %U", token]) == "600 root"
    volumes = {token: {"bind": "/run/token", "mode": "ro"}}
    tried, metrics = 0, []
    for node, name in (("sim-head", HEAD_RAY), ("sim-worker1", WORKER_RAY)):
        fabric = NODE_ADDRESSES[node][1]
        rows = json.loads(node_docker(node).containers.get(name).exec_run(["python3", "-c", LISTENERS]).output.decode())
        services = [r for r in rows if RAY_SERVICES.match(r[2]) or "/site-packages/ray/" in r[3] or "ray.util.client" in r[3]]
        targets = sorted({("127.0.0.1" if a in ("0.0.0.0", "::") else a, p) for a, p, dummy, dummy in services})
        assert {r[2] for r in services} >= {"gcs_server", "raylet"} if node == "sim-head" else {"raylet"}, rows
        out = node_docker(node).containers.run(image, ["python3", "-c", ASK_RAY_PORTS, "/run/token", json.dumps(targets), "%s:6800" % fabric],
                                               network_mode=mode, remove=True, volumes=volumes).decode().strip().splitlines()[-1]
        result = json.loads(out)
        assert result["workers"], result  # vLLM's ranks are Ray's core workers: their ports are asked too
        assert set(result["found"].values()) <= {"token", "metrics"}, (node, result)
        assert list(result["found"].values()).count("token") >= len(result["workers"]) + 2, (node, result)
        tried += len(result["found"])
        metrics += [t for t, verdict in result["found"].items() if verdict == "metrics"]
    print("Ray without its token: %d ports on 2 nodes tried, none answered; %d metrics exporters (%s)" % (tried, len(metrics), ", ".join(metrics)))

    def ask(address, how, mount=False):
        return head().containers.run(image, ["python3", "-c", ASK_GCS, address, how, "/run/token"], network_mode=mode, remove=True,
                                     volumes=volumes if mount else {}).decode().strip()

    assert ask("10.210.0.10:6379", "wrong") == "UNAUTHENTICATED"
    assert ask("127.0.0.1:6379", "file", mount=True) == "OK 2"  # the control: both nodes, with the token
    secret = node_docker_exec("sim-head", ["cat", token])
    for name in (HEAD_RAY, WORKER_RAY):  # each Ray asks for it; only its path is in the container's environment
        attrs = (head() if name == HEAD_RAY else worker()).containers.get(name).attrs
        assert "RAY_AUTH_MODE=token" in attrs["Config"]["Env"] and secret not in json.dumps(attrs), name


def ask(url, key=None, method="GET", context=None):
    """The status of one request as any HTTP client sees it (an error's code too)."""
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {}, method=method,
                                     data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_with_tls_an_outsider_gets_the_certificate_and_plain_http_is_refused(client):
    """vllm_tls: true, no certificate of the inventory's: serve.yml makes a self-signed one once, beside the inventory,
    and recreates the door (vLLM and Ray keep their containers). From this machine, which is no node: the door serves
    that certificate, for the head's address; plain HTTP gets nginx's 400 on every route, /health included, with the
    key too; HTTPS verified against the certificate answers /health, and everything else with the key alone; a client
    that trusts only the system's authorities refuses it. A second run changes nothing and status.yml asks through TLS
    (the supervisor's own checks use the door's loopback listener). Then the door goes back to plain HTTP."""
    cert = os.path.join(SIM, ".secrets", "tls", "cert.pem")
    rays = {n: node_docker(n).containers.get(c).id for n, c in (("sim-head", HEAD_RAY), ("sim-worker1", WORKER_RAY))}
    try:
        rc, out = playbook("serve", "-e", "vllm_tls=true", log="faults-serve-tls", check=True)
        assert "recreate dgx-spark-door-sim-head" in " ".join(out.split()), out[-3000:]
        assert oct(os.stat(os.path.join(SIM, ".secrets", "tls", "key.pem")).st_mode & 0o777) == "0o600"
        with open(cert, encoding="utf-8") as handle:
            assert ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("10.209.0.10", 8000))) == ssl.PEM_cert_to_DER_cert(handle.read())
        trusted = ssl.create_default_context(cafile=cert)  # its name checked too: the head's address is in it
        https = "https://10.209.0.10:8000"
        assert ask(https + "/health", context=trusted) == 200
        assert (ask(https + "/v1/models", context=trusted), ask(https + "/v1/models", api_key(), context=trusted)) == (401, 200)
        assert ask(https + "/invocations", method="POST", context=trusted) == 401
        plain = {(m, p): ask("http://10.209.0.10:8000" + p, key, m) for m, p in (("GET", "/health"), ("GET", "/v1/models"),
                 ("POST", "/invocations"), ("GET", "/metrics"), ("GET", "/openapi.json")) for key in (None, api_key())}
        assert set(plain.values()) == {400}, plain
        with pytest.raises(urllib.error.URLError) as refused:
            urllib.request.urlopen(https + "/health", timeout=10)
        assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
        rc, out = playbook("serve", "-e", "vllm_tls=true", log="faults-serve-tls-again", check=True)
        assert all(h["changed"] == 0 for h in recap(out).values()), recap(out)
        rc, out = playbook("status", "-e", "vllm_tls=true", log="faults-status-tls", check=True)
        flat = " ".join(out.split())
        assert "Healthy" in out and "Endpoint: serving sim-tiny" in flat and "supervisor: serving" in flat, flat[-3000:]
        assert {n: node_docker(n).containers.get(c).id for n, c in (("sim-head", HEAD_RAY), ("sim-worker1", WORKER_RAY))} == rays
    finally:
        playbook("serve", log="faults-serve-tls-off", check=True)
    assert models_status(api_key()) == 200


STATE = "/var/lib/dgx-spark-vllm/dgx-spark"
# What root runs, loads or trusts on a node, each from the state folder (docs/security.md)
ROOTS_FILES = [STATE + "/boot/plan.json", STATE + "/boot/lib", STATE + "/config/firewall.nft", STATE + "/config/last-known-good.json",
               STATE + "/config/canary-reference.json", STATE + "/run/baseline.json", STATE + "/secrets", STATE + "/door/nginx.conf",
               STATE + "/door/keys.conf"]
TRY_WRITES = "for d in $(find / -xdev -mindepth 1 -maxdepth 1 -type d) /dgx-spark/* /models; do " \
             "if touch \"$d/.dgx-w\" 2>/dev/null; then rm -f \"$d/.dgx-w\"; echo \"$d\"; fi; done"


def test_a_container_sees_only_its_folders_and_writes_only_its_log_and_state(client):
    """Read from the running containers, not from the plan: every mount Docker reports for each of the cluster's
    containers, and a write tried in every folder under /dgx-spark and /models (as the model's code would, as root).
    No container mounts the state folder or what of it root runs, loads or trusts; only the head's log and state
    folders take a write."""
    for node, name in (("sim-head", HEAD_RAY), ("sim-worker1", WORKER_RAY)):
        container = node_docker(node).containers.get(name)
        mounts = container.attrs["Mounts"]
        for mount in mounts:
            for path in ROOTS_FILES + [STATE]:
                assert not (path + "/").startswith(mount["Source"].rstrip("/") + "/"), (name, mount["Source"], path)
        written = [d for d in container.exec_run(["sh", "-c", TRY_WRITES]).output.decode().split() if d.startswith(("/dgx-spark/", "/models"))]
        # door: vLLM's socket; cache: vLLM's compile cache (every rank compiles)
        expected = ["/dgx-spark/cache", "/dgx-spark/door", "/dgx-spark/logs", "/dgx-spark/run"] if node == "sim-head" else ["/dgx-spark/cache"]
        assert written == expected, (name, written)
        assert sorted(m["Destination"] for m in mounts if m["RW"] and m["Destination"].startswith(("/dgx-spark", "/models"))) == expected
        seen = container.exec_run(["ls", "/dgx-spark"]).output.decode().split()
        assert seen == (["bin", "cache", "config", "door", "keys", "logs", "run"] if node == "sim-head" else ["cache", "config", "keys"]), (name, seen)
        keys = container.exec_run(["ls", "/dgx-spark/keys"]).output.decode().split()
        assert keys == ["ray_auth_token"], (name, keys)  # the clients' key is in no serving container: bench runs in its own
    # The front door mounts its configuration, its key file and vLLM's socket folder, all read-only, and writes nothing
    # but its own tmpfs: its filesystem is read-only.
    door = node_docker("sim-head").containers.get("dgx-spark-door-sim-head")
    assert all(not m["RW"] for m in door.attrs["Mounts"]) and door.attrs["HostConfig"]["ReadonlyRootfs"], door.attrs["Mounts"]
    tried = TRY_WRITES.replace("/dgx-spark/* /models", "/run/dgx-spark-door /etc/dgx-spark-door")
    written = door.exec_run(["sh", "-c", tried]).output.decode().split()
    assert written == ["/dev"], written  # Docker's own /dev tmpfs; nothing of the host's
    assert chat() == 200


# Every file root keeps in the node's state folder, outside the folders a container writes: read on the node (not a
# list of ours), by name. Those with these endings, or in boot/, root loads or runs; the others it writes or reads.
ROOTS_NAMES = "cd %s && find . -path ./container/cache -prune -o -path ./container/door -prune -o -path ./container/logs -prune " \
              "-o -path ./container/run -prune -o -type f -printf '%%P\\n'" % STATE
RUN_OR_LOAD = (".py", ".nft", ".conf", ".sh", "apply", "vllm-serve")
SENTINEL = "/root/dgx-spark-sentinel"  # a file of the node's: no container has it


def boot_order(node):
    """The order in which the node's systemd, at its last boot, made the collection's firewall unit active, started
    docker.service and started the supervisor (each unit's own timestamps, as `systemctl show` gives them)."""
    units = {"firewall": "dgx-spark-vllm-firewall-dgx-spark.service", "docker": "docker.service",
             "supervisor": "dgx-spark-vllm-serve-dgx-spark.service"}
    shown = node_docker_exec(node, ["systemctl", "show", "--property", "Id,ActiveEnterTimestampMonotonic,ExecMainStartTimestampMonotonic"]
                             + list(units.values()))
    stamps = {}
    for block in shown.strip().split("\n\n"):
        fields = dict(line.split("=", 1) for line in block.splitlines())
        # the firewall is done once active (a oneshot); Docker and the supervisor count from the start of their command
        stamp = "ActiveEnterTimestampMonotonic" if "firewall" in fields["Id"] else "ExecMainStartTimestampMonotonic"
        stamps[fields["Id"]] = int(fields[stamp])
    assert all(stamps.values()), shown  # 0: the unit did not run at this boot
    return sorted(units, key=lambda kind: stamps[units[kind]])


def test_what_a_container_plants_in_its_folders_is_never_followed_or_run_by_root(client):
    """As the model's code could, as root in the serving containers: in every folder a container writes (the head's
    cache, door, logs and run; the worker's cache), a link to a file of the node's, named as each file root writes in
    the state folder, and a script named as each one it loads or runs, beside the containers' own files. Then serve.yml,
    status.yml, recover.yml and a power cycle of the head (its systemd loads the firewall, then Docker, then the
    supervisor starts Ray and vLLM again, with no Ansible), and serve.yml once more: the node's file is unchanged and
    never shown, nothing planted ran, every link is still a link to it. The planted names are taken away at the end."""
    names = sorted(set(node_docker_exec("sim-head", ["sh", "-c", ROOTS_NAMES]).split()))
    assert {"boot/plan.json", "config/firewall.nft", "container/bin/vllm-serve", "secrets/vllm_api_key"} <= set(names), names
    runs = sorted({os.path.basename(n) for n in names if n.endswith(RUN_OR_LOAD) or n.startswith("boot/lib/")})
    writes = sorted({os.path.basename(n) for n in names} - set(runs))
    marker = "dgx-spark-sentinel-%d" % time.time_ns()
    # A name a container's own file has already (vLLM's log, its state) is left to it: only free names are planted.
    plant = ("for d in %s; do for f in %s; do [ -e \"$d/$f\" ] || { ln -s %s \"$d/$f\" && echo \"L $d/$f\"; }; done; "
             "for f in %s; do [ -e \"$d/$f\" ] || { printf '#!/bin/sh\\ntouch /planted-ran\\n' > \"$d/$f\" && chmod +x \"$d/$f\" "
             "&& echo \"S $d/$f\"; }; done; done")
    folders = {"sim-head": ("/dgx-spark/cache", "/dgx-spark/door", "/dgx-spark/logs", "/dgx-spark/run"), "sim-worker1": ("/dgx-spark/cache",)}
    before, planted = {}, {}
    for node, name in (("sim-head", HEAD_RAY), ("sim-worker1", WORKER_RAY)):
        node_docker_exec(node, ["sh", "-c", "printf %s > %s && chmod 600 %s" % (marker, SENTINEL, SENTINEL)])
        before[node] = node_docker_exec(node, ["stat", "-c", "%Y %s %i", SENTINEL])
        command = plant % (" ".join(folders[node]), " ".join(writes), SENTINEL, " ".join(runs))
        result = node_docker(node).containers.get(name).exec_run(["sh", "-c", command])
        assert result.exit_code == 0, result.output
        # as the node sees them: /dgx-spark/<folder> is <state>/container/<folder>
        planted[node] = [(kind, path.replace("/dgx-spark/", STATE + "/container/", 1)) for kind, path in
                         (line.split(" ", 1) for line in result.output.decode().splitlines())]
    links = sum(kind == "L" for found in planted.values() for kind, dummy in found)
    assert links >= len(writes) * 4 and len(planted["sim-head"]) + len(planted["sim-worker1"]) - links >= len(runs) * 4, planted
    shown = []
    try:
        shown.append(playbook("serve", log="faults-serve-planted", check=True)[1])
        shown.append(playbook("status", log="faults-status-planted", check=True)[1])
        shown.append(playbook("recover", log="faults-recover-planted", check=True)[1])
        since = time.time()
        sim("faults-sim-reboot-planted", None, "-e", "sim_reboot=sim-head")
        assert supervisor_did("sim-head", "completion passed", 300, since), supervisor("sim-head")
        assert boot_order("sim-head") == ["firewall", "docker", "supervisor"], boot_order("sim-head")
        assert answered_again(120)
        rc, out = playbook("serve", log="faults-serve-after-planted-reboot", check=True)
        shown.append(out)
        assert "Changes: none" in out, out[-2000:]
        for node in folders:
            assert node_docker_exec(node, ["stat", "-c", "%Y %s %i", SENTINEL]) == before[node], node
            assert node_docker_exec(node, ["cat", SENTINEL]) == marker, node
            assert node_docker_exec(node, ["sh", "-c", "test ! -e /planted-ran && echo none"]) == "none", node
            paths = [path for kind, path in planted[node] if kind == "L"]
            kept = node_docker_exec(node, ["sh", "-c", "for f in \"$@\"; do [ -L \"$f\" ] && readlink \"$f\"; done; true", "-"] + paths).split()
            assert set(kept) <= {SENTINEL}, (node, kept)  # a link still there still names the node's file: never replaced through
        assert not os.path.exists("/planted-ran")
        assert not any(marker in out for out in shown)
        print("planted: %d links and %d scripts in 5 folders; serve, status, recover, a power cycle of the head and serve "
              "again: none followed, none ran" % (links, sum(len(found) for found in planted.values()) - links))
    finally:
        for node in folders:
            node_docker_exec(node, ["sh", "-c", "rm -f \"$@\"", "-", SENTINEL] + [path for dummy, path in planted.get(node, [])])
    assert chat() == 200


def test_each_rank_loads_its_nodes_system_nccl_and_the_plan_names_both_builds(client):
    # inventories/sim sets vllm_nccl_library: system. Each node's image carries the wheel's stand-in and each node the
    # system's (same version, other build IDs): in every rank's container the image's file is the node's library.
    rc, out = playbook("plan", log="faults-plan-nccl", check=True)
    line = [l for l in out.splitlines() if "NCCL library the ranks load: system" in l][0]
    assert "the image's: 2.28.9+cuda13.0, build" in line and "sim-worker1's system: 2.28.9, build" in line
    for node, name in (("sim-head", HEAD_RAY), ("sim-worker1", WORKER_RAY)):
        container = node_docker(node).containers.get(name)
        env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
        target = env["VLLM_NCCL_SO_PATH"]
        assert target.endswith("/nvidia/nccl/lib/libnccl.so.2")
        mount = [m for m in container.attrs["Mounts"] if m["Destination"] == target][0]
        # the package's link (Docker resolves it at each start: an upgraded package's file is what the next container gets)
        assert re.fullmatch(r"/usr/lib/[\w-]+-linux-gnu/libnccl\.so\.2", mount["Source"]) and mount["RW"] is False
        seen = container.exec_run(["sha256sum", target]).output.decode().split()[0]
        assert seen == node_shell(client, node, "sha256sum %s" % mount["Source"]).split()[0], node
    # The image's own choice plans a warning that names the two builds, and would recreate the containers.
    rc, out = playbook("plan", "-e", "vllm_nccl_library=image", log="faults-plan-nccl-image", check=True)
    assert "same version in different builds" in out and "vllm_nccl_library: system does that" in out


# sim_tiny compiled (its --enforce-eager taken out): the CPU build compiles with inductor. vLLM 0.32's CPU build cannot
# load its own AOT artifact back ("'function' object has no attribute 'finalize_loading'", then it compiles again), so
# the compiled runs take the classic path (VLLM_USE_AOT_COMPILE=0), whose inductor cache is what a warm start reads.
# The CPU build compiles in vLLM's DYNAMO_TRACE_ONCE mode (its platforms/cpu.py), torch's inductor called directly, so
# vLLM's own "Directly load the compiled graph(s) ... from the cache" is never written here: inductor's own log says
# where each rank's graph came from ("fx graph cache hit" or "miss", TORCH_LOGS), every rank's line kept (RAY_DEDUP_LOGS).
COMPILED = {"vllm_extra_flags": {"--enforce-eager": None},
            "vllm_extra_env": {"VLLM_USE_AOT_COMPILE": "0", "TORCH_LOGS": "torch._inductor.codecache", "RAY_DEDUP_LOGS": "0"}}


def cache_files(node):
    """Every file of the node's compile caches: {folder: count}."""
    out = node_docker_exec(node, ["sh", "-c", "cd %s/container/cache && for d in *; do echo \"$d $(find \"$d\" -type f | wc -l)\"; done" % STATE])
    return dict((line.split()[0], int(line.split()[1])) for line in out.splitlines() if line.strip())


def vllm_log():
    return node_docker_exec("sim-head", ["cat", STATE + "/container/logs/vllm.log"])


def last_start():
    """The head's vllm.log since vLLM's last engine start (the log keeps every start)."""
    return vllm_log().rsplit("Initializing a V1 LLM engine", 1)[-1]


def graph_cache(text):
    """Inductor's word on each rank's compiled graph in ``text``: {'hit': {rank, ...}, 'miss': {rank, ...}}."""
    found = re.findall(r"\[rank(\d+)\]:.*fx graph cache (hit|miss) for key", text)
    return {word: {int(rank) for rank, said in found if said == word} for word in ("hit", "miss")}


def init_seconds():
    """vLLM's own figure for its last engine start: 'init engine (profile, create kv cache, warmup model) took N s'."""
    return float(re.findall(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s", vllm_log())[-1])


@pytest.mark.extended  # three compiled launches (about 4 minutes)
def test_a_recreated_rank_starts_from_its_nodes_compile_cache_and_a_compiled_setting_gets_a_new_one(client):
    compiled = json.dumps(COMPILED)
    for node in ("sim-head", "sim-worker1"):  # cold: no cache of this image and configuration on either node
        node_docker_exec(node, ["sh", "-c", "rm -rf %s/container/cache/*" % STATE])
    playbook("teardown", log="faults-teardown-cold", check=True)
    playbook("serve", "-e", compiled, log="faults-serve-compile-cold", check=True)
    cold, made = init_seconds(), {n: cache_files(n) for n in ("sim-head", "sim-worker1")}
    assert {0, 1} <= graph_cache(last_start())["miss"], last_start()[-3000:]  # both ranks compiled
    assert all(len(folders) == 1 and sum(folders.values()) > 10 for folders in made.values()), made  # every rank compiled
    # A recreated container (teardown, then serve: as an upgrade, a rollback or a drift repair recreates it) compiles
    # nothing new: its node's folder is the same and holds the same files.
    playbook("teardown", log="faults-teardown-warm", check=True)
    playbook("serve", "-e", compiled, log="faults-serve-compile-warm", check=True)
    warm = init_seconds()
    assert {n: cache_files(n) for n in ("sim-head", "sim-worker1")} == made
    # Each rank's log says its graph came from the cache, as a warm Spark's says "Directly load the compiled graph(s)".
    assert graph_cache(last_start()) == {"hit": {0, 1}, "miss": set()}, last_start()[-3000:]
    # The warm engine starts sooner than the cold one (vLLM's own figure, in the head's log).
    assert warm < cold, (cold, warm)
    assert chat() == 200
    # A setting that changes what is compiled gets a folder of its own, and the first stays for the image it serves.
    # (float32 answers differ from bfloat16's, which the canary refuses: the change is meant here.)
    changed = dict(COMPILED, vllm_extra_flags={"--enforce-eager": None, "--dtype": "float32"}, vllm_canary_accept=True)
    playbook("serve", "-e", json.dumps(changed), log="faults-serve-compile-dtype", check=True)
    assert all(len(cache_files(n)) == 2 for n in ("sim-head", "sim-worker1"))
    record("trap", "every recreated container compiling cold (seed 001: ~25 minutes cold, ~4 warm)",
           "vLLM's compile cache is kept per node and configuration: engine start %.1f s cold, %.1f s warm" % (cold, warm))
    playbook("serve", "-e", "vllm_canary_accept=true", log="faults-serve-eager-again", check=True)  # the profile's own answers again


def test_a_flushed_firewall_is_named_refuses_every_start_and_the_next_serve_loads_it_alone(client):
    """nft flush ruleset on a serving head: Ray's ports answer this machine; status.yml names the node, its supervisor
    refuses to start anything (fail closed), and serve.yml loads the table again with no other change."""
    saved = node_docker_exec("sim-head", ["iptables-save"])  # the outer Docker's DNS rules for the node container
    before = every_container(client)
    node_docker_exec("sim-head", ["nft", "flush", "ruleset"])
    # A Spark has no outer Docker: the node container's DNS rules are put back (as iptables-restore would), ours are not.
    node_docker_exec("sim-head", ["sh", "-c", "printf '%s\\n' \"$0\" | iptables-restore", saved])
    assert node_docker_exec("sim-head", ["nft", "list", "tables"]).splitlines() == ["table ip nat"]
    assert connect("10.210.0.10", 6379) == "open"  # the hole is real: Ray answers a non-node
    rc, out = playbook("status", log="faults-firewall-status")
    flat = " ".join(out.split())
    assert rc != 0 and "NOT OK: firewall table missing" in flat and "NOT healthy: run playbooks/serve.yml to restore service (sim-head)" in flat, flat[-3000:]
    refused = supervisor("sim-head", "refused", seconds=30)
    assert "the firewall table dgx_spark_vllm_dgx_spark is not loaded" in refused["detail"], refused
    # what an operator's Prometheus shows meanwhile: the head's supervisor stopped, firing once alert_for has passed
    deadline = time.monotonic() + 60
    while alert_state("SparkSupervisorStopped") != {"firing"} and time.monotonic() < deadline:
        time.sleep(2)
    assert alert_state("SparkSupervisorStopped") == {"firing"}, prometheus("/api/v1/alerts")
    rc, out = playbook("serve", log="faults-firewall-serve")
    assert rc == 0 and "sim-head: load the firewall table again (missing)" in " ".join(out.split()), out[-3000:]
    changed = {h: r["changed"] for h, r in recap(out).items()}
    assert changed == {"localhost": 0, "sim-head": 1, "sim-worker1": 0}, changed
    assert every_container(client) == before  # nothing was recreated
    assert connect("10.210.0.10", 6379) == "refused" and connect("10.210.0.10", 6379, node="sim-worker1") == "open"
    supervisor("sim-head", "serving", seconds=60)
    rc, out = playbook("status", log="faults-firewall-status-again")
    flat = " ".join(out.split())
    assert rc == 0 and "NOT OK" not in flat and not re.search(r"firewall table (missing|changed|unrecorded)", flat), flat[-3000:]


CENTRAL = "10.209.0.1:19090"  # this machine on the management network: no node of the cluster


def test_a_central_prometheus_gets_every_series_of_the_cluster_by_remote_write(client, tmp_path):
    """An organisation's own Prometheus on the management network (a Prometheus on this machine, no node, with its
    remote-write receiver on): serve.yml with its URL and a token file; the head's Prometheus is recreated, nothing
    else; the central one then holds the cluster's series, each labelled with the cluster's name, and the token is on
    the head for Prometheus alone. The next serve.yml without them takes it back."""
    central = client.containers.run(
        "dgx-spark-sim/prometheus:sim", ["--config.file=/etc/prometheus/prometheus.yml", "--web.listen-address=" + CENTRAL,
                                         "--web.enable-remote-write-receiver", "--storage.tsdb.path=/prometheus"],
        name="dgx-spark-test-central-prometheus", network_mode="host", detach=True, remove=True)
    token = tmp_path / "central.token"
    token.write_text("central-%d\n" % time.time_ns())
    os.chmod(token, 0o600)
    try:
        before = every_container(client)
        rc, out = playbook("serve", "-e", "vllm_monitoring_remote_write_url=http://%s/api/v1/write" % CENTRAL,
                           "-e", "vllm_monitoring_remote_write_token_file=%s" % token, log="faults-serve-remote-write", check=True)
        changed = {h: r["changed"] for h, r in recap(out).items()}
        assert changed["sim-worker1"] == 0 and changed["sim-head"] > 0, changed
        after = every_container(client)
        recreated = {name for name in set(before) & set(after) if before[name] != after[name]}
        assert {name for dummy, name in recreated} <= {"dgx-spark-prometheus"}, recreated
        kept = node_docker_exec("sim-head", ["stat", "-c", "%a %u", STATE + "/monitoring/config/keys/remote-write"])
        assert kept == "400 65534", kept
        asked = "http://%s/api/v1/query?%s" % (CENTRAL, urllib.parse.urlencode({"query": 'up{cluster="dgx-spark"}'}))
        deadline, seen = time.monotonic() + 90, []
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(asked, timeout=5) as answer:
                    seen = json.loads(answer.read())["data"]["result"]
            except OSError:
                seen = []
            if len(seen) >= 3:
                break
            time.sleep(3)
        jobs = sorted((r["metric"]["job"], r["metric"].get("node", "")) for r in seen)
        assert jobs == [("spark-nodes", "sim-head"), ("spark-nodes", "sim-worker1"), ("vllm", "")], seen
        assert token.read_text().strip() not in out
    finally:
        central.stop(timeout=2)
        rc, out = playbook("serve", log="faults-serve-remote-write-off", check=True)
    # turned off: the token is taken off the head with the setting
    assert node_docker_exec("sim-head", ["sh", "-c", "test -e %s/monitoring/config/keys/remote-write && echo kept || echo gone" % STATE]) == "gone"


def test_a_node_exporter_on_each_node_reads_the_nodes_figures_from_its_textfile_folder(client):
    """A node_exporter already on each node, its textfile collector reading Ubuntu's folder: serve.yml with that folder
    given changes no container, only each node's supervisor (its plan and its sandbox's writable folders); within a few
    looks each node's file holds its own figures, labelled with the cluster and the node, written by root, 0644. The
    next serve.yml without it takes the files away and leaves the folder's other files alone."""
    folder = "/var/lib/prometheus/node-exporter"
    nodes = ("sim-head", "sim-worker1")
    for node in nodes:
        node_docker_exec(node, ["sh", "-c", "mkdir -p %s && echo '# their own' > %s/their_own.prom" % (folder, folder)])
    try:
        before = every_container(client)
        playbook("serve", "-e", "vllm_monitoring_textfile_dir=" + folder, log="faults-serve-textfile", check=True)
        assert every_container(client) == before  # no container was recreated for it
        for node in nodes:
            path = "%s/dgx_spark_vllm_dgx-spark.prom" % folder
            deadline, text = time.monotonic() + 30, ""
            while time.monotonic() < deadline:
                text = node_docker_exec(node, ["sh", "-c", "cat %s 2>/dev/null || true" % path])
                if "dgx_spark_supervisor_state" in text:
                    break
                time.sleep(1)
            assert re.search(r'^dgx_spark_memory_available_bytes\{cluster="dgx-spark",node="%s"\} [1-9][0-9]*$' % node, text, re.M), text
            assert re.search(r'^dgx_spark_supervisor_state\{cluster="dgx-spark",node="%s",state="[a-z]+"\} 1$' % node, text, re.M), text
            assert node_docker_exec(node, ["stat", "-c", "%a %U", path]) == "644 root"
    finally:
        playbook("serve", log="faults-serve-textfile-off", check=True)
    for node in nodes:  # taken away with the setting; node_exporter's own files stay
        assert node_docker_exec(node, ["ls", folder]) == "their_own.prom"
        node_docker_exec(node, ["rm", "-r", folder])


def prometheus(path):
    """The head's Prometheus API (it listens on the head's loopback only): the answer's data."""
    code = "import sys,urllib.request;print(urllib.request.urlopen('http://127.0.0.1:9090' + sys.argv[1], timeout=10).read().decode())"
    answer = json.loads(node_docker_exec("sim-head", ["python3", "-c", code, path]))
    assert answer["status"] == "success", answer
    return answer["data"]


def query(expr, at=None):
    return prometheus("/api/v1/query?" + urllib.parse.urlencode(dict({"query": expr}, **({"time": at} if at else {}))))["result"]


def alert_state(name):
    return {a["state"] for a in prometheus("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name}


@pytest.mark.extended  # every serve here waits for Prometheus's targets already; the panels' queries are the extra
def test_prometheus_scrapes_vllm_and_every_node_and_every_panel_query_evaluates(client):
    """serve.yml ran Prometheus on the head (vllm_monitoring in the sim's inventory): vLLM's endpoint and each node's
    figures are up, vLLM's series are there after a completion, the node figures are the unified memory's, every
    dashboard panel's query evaluates, and one panel is drawn from Prometheus's answer (tests/output)."""
    targets = prometheus("/api/v1/targets?state=active")["activeTargets"]
    assert sorted((t["labels"]["job"], t["labels"].get("node"), t["health"]) for t in targets) == [
        ("spark-nodes", "sim-head", "up"), ("spark-nodes", "sim-worker1", "up"), ("vllm", None, "up")], targets
    urls = {"http://10.209.0.10:8000/metrics", "http://10.210.0.10:9101/metrics", "http://10.210.0.11:9101/metrics"}
    assert {t["scrapeUrl"] for t in targets} == urls
    assert connect("10.210.0.11", 9101) == "refused"  # a node's figures answer the cluster's nodes only
    assert connect("10.209.0.10", 9090) == "refused"  # Prometheus listens on the head's loopback
    started = time.time()
    assert chat() == 200
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not query("vllm:generation_tokens_total > 0"):
        time.sleep(1)
    assert query("vllm:generation_tokens_total > 0"), "no vllm: series after a completion"
    memory = {r["metric"]["node"]: float(r["value"][1]) for r in query("dgx_spark_memory_total_bytes")}
    assert memory == {"sim-head": 130665259008.0, "sim-worker1": 130665259008.0}  # the GB10's MemTotal, not this machine's
    ranks = {r["metric"]["node"]: float(r["value"][1]) for r in query("dgx_spark_vllm_ranks")}
    assert ranks == {"sim-head": 1.0, "sim-worker1": 1.0}  # each node's rank, from its nvidia-smi
    rules = {r["name"]: r for g in prometheus("/api/v1/rules")["groups"] for r in g["rules"]}
    assert set(rules) >= {"VllmEndpointDown", "VllmKvCacheFull", "SparkMemAvailableLow", "SparkPinnedMemory"}
    assert all(r["health"] == "ok" and r["state"] == "inactive" for r in rules.values()), rules
    for title, unit, queries in monitoring.PANELS:
        for expr, legend in queries:
            prometheus("/api/v1/query?" + urllib.parse.urlencode({"query": monitoring.as_evaluated(expr)}))  # a query Prometheus refuses fails here
    # what the dashboard's variables list (Grafana's label_values asks these)
    assert prometheus("/api/v1/label/cluster/values") == ["dgx-spark"]
    assert prometheus("/api/v1/label/node/values") == ["sim-head", "sim-worker1"]
    assert prometheus("/api/v1/label/model_name/values"), "no model_name label on vLLM's series"
    # a rate: it needs two scrapes (5 s apart here) that saw tokens come; as Grafana asks it for this cluster's model
    expr = monitoring.as_evaluated(monitoring.PANELS[0][2][0][0], cluster="dgx-spark", model=".+")
    deadline, drawn = time.monotonic() + 60, time.monotonic() + 25  # 25 s of completions: five points to draw
    while time.monotonic() < deadline and (time.monotonic() < drawn or not query(expr + " > 0")):
        assert chat() == 200
        time.sleep(1)
    series = prometheus("/api/v1/query_range?" + urllib.parse.urlencode(
        {"query": expr, "start": started - 60, "end": time.time(), "step": 5}))["result"]
    assert series and max(float(v) for dummy, v in series[0]["values"]) > 0, (expr, series)
    draw_panel(monitoring.PANELS[0][0], expr, series)


def draw_panel(title, expr, series):
    """One dashboard panel drawn from Prometheus's answer, where no Grafana runs (tests/output/monitoring-panel.png)."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 3.5))
    for one in series:
        start = float(one["values"][0][0])
        axes.plot([float(t) - start for t, dummy in one["values"]], [float(v) for dummy, v in one["values"]], "o-", label="generated")
    axes.set(title="%s (Prometheus on the simulated head)" % title, xlabel="seconds", ylabel="tokens/s", ylim=(0, None))
    axes.text(0.01, 0.95, expr, transform=axes.transAxes, fontsize=7, va="top", family="monospace")
    axes.legend(loc="upper right")
    figure.tight_layout()
    os.makedirs(os.path.join(ROOT, "tests", "output"), exist_ok=True)
    figure.savefig(os.path.join(ROOT, "tests", "output", "monitoring-panel.png"), dpi=100)
    pyplot.close(figure)


def test_changed_profile_restarts_only_what_its_hash_touches(client):
    ray_ids = {HEAD_RAY: head().containers.get(HEAD_RAY).id, WORKER_RAY: worker().containers.get(WORKER_RAY).id}

    def pgid():
        return json.loads(head().containers.get(HEAD_RAY).exec_run(["cat", "/dgx-spark/run/vllm.json"]).output)["pgid"]

    before = pgid()
    rc, out = playbook("serve", "-e", "vllm_max_model_len=512", log="faults-serve-changed-profile", check=True)
    assert {HEAD_RAY: head().containers.get(HEAD_RAY).id, WORKER_RAY: worker().containers.get(WORKER_RAY).id} == ray_ids  # Ray untouched
    assert pgid() != before  # vLLM restarted with the new flags
    assert chat() == 200
    playbook("serve", log="faults-serve-profile-back", check=True)


def test_a_serving_node_shows_its_rank_in_memory_and_in_nvidia_smi(client):
    """The GB10 stand-in as the probes read it: each node's rank holds 0.3 x 119.67 GiB (the profile's utilization)."""
    for node in ("sim-head", "sim-worker1"):
        apps = node_shell(client, node, "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits")
        assert [int(line.split(",")[2]) for line in apps.splitlines()] == [36762], apps  # ceil(0.3 x 119.67 GiB) in MiB
        pid = apps.split(",")[0]
        assert node_shell(client, node, "cat /proc/%s/comm" % pid).strip()  # the node sees its rank's process
        assert 80 < available_gib(client, node) < 82  # 117.3 GiB idle, less the rank's pool


def test_traps_on_a_serving_cluster_are_named_by_the_plan_then_taken_back(client):
    """GID drift (the re-run recreates the drifted worker), a node that starts with less, a node without RDMA devices:
    preflight.yml (every check serve.yml makes first) names each with its host, value and fix, and changes nothing."""
    sim("faults-sim-traps-serving", {"gid_drift": ["sim-worker1"], "unbalanced": {"sim-worker1": 20}, "no_infiniband": ["sim-head"]})
    before = every_container(client)
    rc, out = playbook("preflight", log="faults-preflight-traps")
    assert rc != 0
    assert "Changes: sim-worker1: recreate dgx-spark-ray-sim-worker1" in out  # its NCCL_IB_GID_INDEX moved 5 -> 3
    assert "ERROR [sim-head]: sim-head: /dev/infiniband holds no device, so its container would get no RDMA device and NCCL " \
           "would fall back to sockets on this node alone (sim-worker1 hold rdma_cm, uverbs0" in out
    # each node's running rank counts as free (ours): 117.3 GiB idle, less the 20 GiB held on the worker
    assert "ERROR [all]: free memory is unbalanced across nodes (sim-head 117.3 GiB, sim-worker1 97.3 GiB)" in out
    assert every_container(client) == before
    record("trap", "GID index drift on one node (3 -> 5 after an interface event)",
           "the plan recreates that node's container with its new NCCL_IB_GID_INDEX, and restarts vLLM")
    record("trap", "a node without RDMA devices (/dev/infiniband empty)",
           "refused before any change, naming the node, the path and what the other nodes hold")
    record("trap", "unbalanced free memory (one node starts with 20 GiB less)",
           "refused before any change, naming each node's free memory and the tolerance to raise")
    sim("faults-sim-traps-taken-back")
    rc, out = playbook("plan", log="faults-plan-traps-taken-back", check=True)
    assert "Changes: none, every container and vLLM run as planned" in out


def test_a_hard_killed_worker_is_named_by_status_and_pins_its_memory_until_it_reboots(client):
    """docker kill of the worker's container: status names it; on a GB10 its rank's memory stays pinned, so the re-run
    refuses to launch into it and names the reboot; after the power cycle serve.yml restores the cluster, and puts the
    head's last-known-good record back over a controller's copy edited by hand, saying what differed."""
    started = time.monotonic()
    sim("faults-sim-hard-kill", {"hard_kill": ["sim-worker1"]})
    rc, out = playbook("status", log="faults-status-broken")
    assert rc != 0
    assert "sim-worker1 (10.210.0.11): dgx-spark-ray-sim-worker1 exited" in out and "NOT OK" in out
    # The worker's supervisor does not start its container into the pinned memory, and says why.
    assert supervisor("sim-worker1", "refused")["detail"].startswith(
        "not starting (container dgx-spark-ray-sim-worker1 runs): 36.6 GiB is used that nothing explains")
    rc, out = playbook("serve", log="faults-serve-pinned")
    assert rc != 0
    assert "ERROR [sim-worker1]: sim-worker1 holds 36.6 GiB that no process, GPU context or kernel structure explains: memory " \
           "pinned by a container that was killed hard. Nothing but a reboot frees it; reboot sim-worker1 before launching" in out
    assert worker().containers.get(WORKER_RAY).status == "exited"  # refused before any change
    rebooted = time.monotonic()
    sim("faults-sim-reboot-worker", None, "-e", "sim_reboot=sim-worker1")
    # The boot loaded the firewall before the node's Docker started: Ray's ports were never open to others.
    assert "table inet dgx_spark_vllm_dgx_spark" in node_docker_exec("sim-worker1", ["nft", "list", "tables"]).splitlines()
    assert answered_again(300)  # the supervisors bring it back: no Ansible in between
    back = time.monotonic() - rebooted
    # An idle GB10's 117.3 GiB less the new rank's 35.9 GiB (0.3 x 119.67): the pinned 36.6 GiB went with the reboot.
    assert 81 < available_gib(client, "sim-worker1") < 82
    copy = os.path.join(SIM, ".artifacts", "last-known-good.json")
    with open(copy, encoding="utf-8") as handle:
        kept = json.load(handle)
    with open(copy, "w", encoding="utf-8") as handle:  # the controller's copy edited by hand: not what the cluster serves
        json.dump(dict(kept, overrides={"max_model_len": 64}), handle)
    rc, out = playbook("serve", log="faults-serve-restore", check=True)
    assert "Changes: none, every container and vLLM run as planned" in out
    assert ("[WARNING]: The controller's copy %s differed from the last-known-good record on sim-head in overrides: the "
            "cluster's record wins, and the copy is now the same." % copy) in " ".join(out.split())
    with open(copy, encoding="utf-8") as handle:
        assert json.load(handle) == kept
    record("fault", "worker container killed hard (docker kill) while serving",
           "status names it; the node's supervisor and serve.yml refuse to start into the pinned memory and name the "
           "reboot; after the power cycle (sim.yml -e sim_reboot=sim-worker1) the cluster comes back by itself (%.0f s "
           "from the power cycle to a completion)" % back, time.monotonic() - started)
    rc, out = playbook("status", log="faults-status-healthy", check=True)
    assert "Healthy" in out


@pytest.mark.extended  # a relaunch (about 2 minutes); the drift's plan is in make test by the GID drift trap
def test_a_worker_container_missing_a_variable_is_recreated_by_the_next_run(client):
    started = time.monotonic()
    sim("faults-sim-missing-env", {"missing_env": {"sim-worker1": "VLLM_CPU_KVCACHE_SPACE"}})
    assert not any(e.startswith("VLLM_CPU_KVCACHE_SPACE=") for e in worker().containers.get(WORKER_RAY).attrs["Config"]["Env"])
    rc, out = playbook("serve", log="faults-serve-env-drift", check=True)
    assert ("Environment drift: sim-worker1: VLLM_CPU_KVCACHE_SPACE is missing in the container, planned '1' (common value); "
            "dgx-spark-ray-sim-worker1 is recreated") in out
    assert "VLLM_CPU_KVCACHE_SPACE=1" in worker().containers.get(WORKER_RAY).attrs["Config"]["Env"]
    assert chat() == 200
    record("trap", "a variable missing in one worker's container (made again by hand, our labels kept)",
           "the re-run names the drift and recreates that container; vLLM restarts", time.monotonic() - started)


def test_foreign_programs_on_our_ports_are_refused_and_page_cache_is_dropped(client):
    # As the model's code could, from inside the head's Ray container: in the folders it writes, a link named as a log
    # to a host file root alone reads, and files named as what root runs or loads. Teardown copies the logs to the
    # controller: never the link's target.
    plant = "ln -s /etc/shadow /dgx-spark/logs/planted.log && for f in apply plan.json firewall.nft; do echo 'touch /planted-ran' > /dgx-spark/run/$f; done"
    assert head().containers.get(HEAD_RAY).exec_run(["sh", "-c", plant]).exit_code == 0
    playbook("teardown", log="faults-teardown-for-port", check=True)
    kept = os.path.join(SIM, ".artifacts", "logs", "sim-head")
    assert os.path.isfile(os.path.join(kept, "vllm.log")) and not os.path.lexists(os.path.join(kept, "planted.log"))
    on_host = node_docker_exec("sim-head", ["sh", "-c", "test ! -e /planted-ran && ls " + STATE + "/logs"]).split()
    assert "vllm.log" in on_host and "planted.log" not in on_host, on_host  # nothing planted ran; the link was not followed
    sim("faults-sim-foreign", {"stale_ray": ["sim-head"], "foreign_port": {"sim-head": 8100}})
    # Both foreign programs listening before the probe looks: a Ray head takes seconds to open 6379, more on a busy machine.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not {6379, 8100} <= set(listening("sim-head")):
        time.sleep(1)
    rc, out = playbook("serve", "-e", "vllm_port=8100", log="faults-serve-port")  # a vllm_port of the user's choice
    assert rc != 0
    assert "sim-head: port(s) 6379, 8100 are held by a program this collection did not start" in out
    assert our_containers() == []  # nothing half-started
    for name in ("a stale Ray session of a foreign process on 6379", "the endpoint port (vllm_port 8100) taken by a foreign program"):
        record("trap", name, "refused before any change, naming the node and the ports; nothing is started")
    # The profile's own utilization (0.3 of CUDA's 119.67 GiB, with its runtime and floor: 37.9 GiB) on nodes where
    # other processes hold 75 GiB of the idle 117.3 (42.3 GiB left on each), and on the worker 70 GiB of page cache
    # that keeps 8 GiB of it from MemAvailable: vLLM fits there only after a drop. One launch, at the inventory's own
    # values, so the cluster serves as the next test expects once the held memory is given back.
    started = time.monotonic()
    sim("faults-sim-page-cache", {"page_cache": {"sim-worker1": 70}, "unbalanced": {"sim-head": 75, "sim-worker1": 75}})
    rc, out = playbook("serve", log="faults-serve-page-cache", check=True)
    assert "sim-worker1: dropping page caches freed 8.0 GiB; vLLM now fits" in out
    assert "sim-head: dropping page caches" not in out  # the head fits without it
    assert chat() == 200
    record("trap", "a page cache left by an earlier load (70 GiB, with 75 GiB held by other processes on each node)",
           "preflight drops the caches on that node only, reports what it freed, and serves", time.monotonic() - started)
    sim("faults-sim-memory-back")  # the other processes end
    rc, out = playbook("serve", log="faults-serve-after-page-cache", check=True)
    assert "Changes: none" in out


@pytest.mark.extended  # three launches (about 3.5 minutes); a head lost while serving is in make test
def test_head_killed_during_launch_fails_at_once_and_the_next_run_recovers(client):
    playbook("teardown", log="faults-teardown-for-kill", check=True)
    result = {}

    def serve():
        result["rc"], result["out"] = playbook("serve", log="faults-serve-kill")

    runner = threading.Thread(target=serve)
    started = time.monotonic()
    runner.start()
    smi = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits"
    # The precondition is fixed, not raced: every rank has claimed its pool (vLLM is loading on each node), so
    # the head's death leaves the worker's rank to die without freeing its pool as well, as on a Spark.
    for dummy in range(600):
        if all(client.containers.get(n).exec_run(["sh", "-c", smi]).output.strip() for n in ("sim-head", "sim-worker1")):
            break
        time.sleep(0.5)
    head().containers.get(HEAD_RAY).kill()
    killed = time.monotonic()
    runner.join()
    assert result["rc"] != 0
    assert "vLLM exited while loading on sim-head" in result["out"]
    assert time.monotonic() - started < 300
    rc, out = playbook("serve", log="faults-serve-after-kill")
    # The head's rank was killed hard: pinned. The worker's rank may have been pinned as well (it held its pool when
    # the head went): the refusal names each node to reboot, and only those.
    pinned = sorted(set(re.findall(r"reboot (sim-[a-z0-9-]+) before launching", out)))
    assert rc != 0 and "sim-head" in pinned, out[-3000:]
    sim("faults-sim-reboot-pinned", None, "-e", "sim_reboot=" + ",".join(pinned))
    playbook("serve", log="faults-serve-after-head-reboot", check=True)
    assert chat() == 200
    record("fault", "head container killed hard while vLLM loads",
           "serve fails at once naming vLLM's exit; the re-run refuses the pinned memory and names the reboot; after the "
           "power cycle serve recovers", time.monotonic() - killed)


def test_head_killed_while_serving_leaves_the_workers_ray_stale_and_the_next_runs_clean_it_up(client):
    """docker kill of the head's container while it serves: the worker's Ray is left joined to a dead head (a stale
    session of our own). The head's ranks were killed hard (pinned on a GB10), so serve names the reboot; after it, serve
    starts the head and restarts the worker's stale Ray."""
    started = time.monotonic()
    head().containers.get(HEAD_RAY).kill()
    assert worker().containers.get(WORKER_RAY).status == "running"  # still joined to the head that is gone
    rc, out = playbook("status", log="faults-status-head-killed")
    flat = " ".join(out.split())  # the callback wraps long lines; Prometheus runs beside Ray on the head
    assert rc != 0 and "sim-head (10.210.0.10): " in flat and "dgx-spark-ray-sim-head exited" in flat
    rc, out = playbook("serve", log="faults-serve-head-killed")
    assert rc != 0 and "reboot sim-head before launching" in out
    assert supervisor("sim-head", "refused")["detail"].startswith("not starting (container dgx-spark-ray-sim-head runs): ")
    rebooted = time.monotonic()
    sim("faults-sim-reboot-head-serving", None, "-e", "sim_reboot=sim-head")
    assert answered_again(300)  # no Ansible in between
    back = time.monotonic() - rebooted
    events = [e["what"] for e in supervisor("sim-worker1")["events"]]
    assert any(e.startswith("restarted container dgx-spark-ray-sim-worker1: the head's Ray went away and is back") or
               e.startswith("started container dgx-spark-ray-sim-worker1") for e in events), events  # joined the new head
    rc, out = playbook("serve", log="faults-serve-after-head-killed", check=True)
    assert "Changes: none, every container and vLLM run as planned" in out
    elapsed = time.monotonic() - started
    record("fault", "head container killed hard (docker kill) while serving",
           "status names it; the supervisor and serve refuse the pinned memory and name the reboot; after the power cycle "
           "the cluster comes back by itself (%.0f s from the power cycle to a completion)" % back, elapsed)
    record("fault", "a stale Ray session from our own dead head (the worker's Ray still joined to it)",
           "the worker's supervisor restarts its Ray once the head's port answers again; then the head starts vLLM", elapsed)


@pytest.mark.extended  # a relaunch after the disk is freed (about 3 minutes); the disk check is unit-tested
def test_a_full_disk_on_the_head_is_refused_before_any_change_and_the_next_run_serves(client):
    """The head's state folder on a 16 MB filesystem, filled (a tmpfs: this machine's disk is never filled)."""
    started = time.monotonic()
    playbook("teardown", log="faults-teardown-for-disk", check=True)
    sim("faults-sim-disk-full", {"disk_full": ["sim-head"]})
    state = "/var/lib/dgx-spark-vllm/dgx-spark"
    seen = head().containers.run("dgx-spark-sim/runtime:sim", ["df", "-P", "-k", "/x"], entrypoint=[], remove=True,
                                 volumes=[state + ":/x"]).decode().splitlines()[-1].split()
    assert node_shell(client, "sim-head", "df -P -k " + state).splitlines()[-1].split()[1:4] == seen[1:4] == ["16384", "16384", "0"]
    before = every_container(client)
    rc, out = playbook("serve", log="faults-serve-disk-full")
    assert rc != 0
    assert ("sim-head: the filesystem of %s has 0 B free, and a launch needs 2.0 GB there" % state) in " ".join(out.split())
    assert every_container(client) == before and our_containers() == []
    sim("faults-sim-disk-freed")
    playbook("serve", log="faults-serve-disk-freed", check=True)
    assert chat() == 200
    record("fault", "the head's disk full at launch (a 16 MB filesystem on its state folder, filled)",
           "refused before any change, naming the node, the folder, its free space and the reserve; once space is freed, "
           "serve serves", time.monotonic() - started)


def answered_again(seconds=180):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if chat() == 200:
                return True
        except Exception:  # noqa: BLE001 - not yet
            time.sleep(1)
    return False


def test_a_worker_power_cycle_under_load_comes_back_by_itself(client):
    """The worker loses power while 8 streams run; with no Ansible after the power cycle, its supervisor starts its Ray,
    the head's starts vLLM again once it has joined. The outage and the failed requests are measured, and every
    request succeeds again once it ends."""
    with Load(api_key(), max_requests=20000, max_seconds=900) as load:  # failures come fast: the time bounds it
        time.sleep(3)
        started = time.monotonic()
        sim("faults-sim-reboot-under-load", None, "-e", "sim_reboot=sim-worker1")
        assert answered_again(300)
        recovered = time.monotonic() - started
        time.sleep(5)
    figures = load.figures()
    assert figures["answered_after_last_failure"], json.dumps(figures)  # whole, with the first errors (a dict would be cut short)
    assert chat() == 200
    events = [e["what"] for e in supervisor("sim-head")["events"]]
    assert any(e.startswith("started vLLM in dgx-spark-ray-sim-head") for e in events), events
    record("fault", "worker node power-cycled while serving, under load",
           "the endpoint fails while the worker is gone; the worker's supervisor starts its Ray at boot, the head's "
           "starts vLLM again once it has joined; no Ansible", recovered, load=figures)
    rc, out = playbook("serve", log="faults-serve-after-reboot-under-load", check=True)
    assert "Changes: none, every container and vLLM run as planned" in out


def supervisor_did(node, what, seconds, since):
    """The supervisor's event since ``since`` (epoch seconds) that starts with ``what``, waited for (the node may still
    be booting), or None. The status file survives a boot: its earlier events are not this one."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            status = json.loads(node_docker_exec(node, ["cat", "/var/lib/dgx-spark-vllm/dgx-spark/boot/status/status.json"]))
            found = [e["what"] for e in status.get("events") or [] if e["what"].startswith(what) and e["at"] > since]
            if found:
                return found[-1]
        except Exception:  # noqa: BLE001 - the node or its file is not back yet
            pass
        time.sleep(1)
    return None


@pytest.mark.extended  # about 2 minutes; a power cycle under load (the worker's) and the supervisor's comeback are in make test
def test_both_nodes_power_cycled_come_back_by_themselves(client):
    """Both nodes lose power at once; nothing is run after the power cycle until a completion is served. Nothing else
    asks the endpoint meanwhile, so the head's supervisor asks the canary after its completion: token for token."""
    started, since = time.monotonic(), time.time()
    sim("faults-sim-reboot-all", None, "-e", "sim_reboot=all")
    asked = supervisor_did("sim-head", "completion passed", 300, since)
    recovered = time.monotonic() - started
    assert asked and asked.endswith("token for token (image, model "
                                    "revision and numerics unchanged)"), asked
    assert chat() == 200
    rc, out = playbook("status", log="faults-status-after-reboot-all", check=True)
    flat = " ".join(out.split())  # the callback wraps long lines
    assert "supervisor: serving" in flat and ("next boot: checks memory, then: the firewall table dgx_spark_vllm_dgx_spark is the one "
                                              "serve.yml loaded; container dgx-spark-ray-sim-head runs") in flat, flat[-3000:]
    record("fault", "both nodes power-cycled at once",
           "each node's supervisor starts its Ray at boot, the head's waits for the join and starts vLLM; no Ansible", recovered)


@pytest.mark.extended  # about 3 minutes; the supervisor's comeback is in make test by the power cycles
def test_a_killed_rank_comes_back_by_itself_or_by_recover(client):
    """A rank's process killed on the worker ends vLLM: the head's supervisor starts it again. With the supervisor
    off (vllm_boot_start: false), recover.yml names it and restarts the ranks only; on a healthy cluster it touches
    nothing."""
    kill_rank = ["docker", "exec", WORKER_RAY, "pkill", "-9", "-f", "^ray::RayWorker"]
    started = time.monotonic()
    node_docker_exec("sim-worker1", kill_rank)
    deadline = time.monotonic() + 60  # the sim's Prometheus scrapes every 5 s; the alert fires after 10 s down
    while time.monotonic() < deadline and "firing" not in alert_state("VllmEndpointDown"):
        time.sleep(2)
    assert "firing" in alert_state("VllmEndpointDown"), "the endpoint is down and its alert did not fire"
    assert answered_again(300)
    record("fault", "a rank's process killed (kill -9 of the worker's RayWorker)",
           "vLLM ends; the head's supervisor starts it again once every node is joined; no Ansible", time.monotonic() - started)
    playbook("serve", "-e", "vllm_boot_start=false", log="faults-serve-boot-off", check=True)
    assert supervisor("sim-head", "off")
    node_docker_exec("sim-worker1", kill_rank)
    time.sleep(3)
    started = time.monotonic()
    rc, out = playbook("recover", "-e", "vllm_boot_start=false", log="faults-recover-rank", check=True)
    assert "restart_ranks (sim-head): vLLM is not running on sim-head" in out
    assert "Changes: sim-head: start vLLM" in out
    assert chat() == 200
    record("fault", "a rank's process killed, the supervisor off (vllm_boot_start: false)",
           "recover.yml names it and restarts the ranks only (vLLM's process group), then verifies", time.monotonic() - started)
    rc, out = playbook("recover", log="faults-recover-healthy", check=True)
    assert "Nothing to recover: every node, Ray and the endpoint serve" in out
    assert all(h["changed"] == 0 for h in recap(out).values()), recap(out)
    playbook("serve", log="faults-serve-boot-on", check=True)
    assert supervisor("sim-head", "serving")


@pytest.mark.extended  # the runtime image's 4 GB stream to a worker takes about three minutes here
def test_an_image_removed_on_a_worker_is_sent_again_by_the_next_serve(client):
    image = "dgx-spark-sim/runtime:sim"
    started = time.monotonic()
    for node in ("sim-head", "sim-worker1"):  # held as a playbook holds them: a supervisor would start the worker again
        node_docker_exec(node, ["sh", "-c", "echo 'the test, by hand' > /var/lib/dgx-spark-vllm/dgx-spark/boot/hold"])
    stopped = worker().containers.get(WORKER_RAY)  # stopped as a user does (a hard kill would pin its rank's memory)
    stopped.stop(timeout=60)
    stopped.remove()  # then a prune, the container gone
    for dummy in range(90):  # the head's vLLM ends once its rank on the worker is gone, and its memory comes back
        if available_gib(client, "sim-head") > 100:
            break
        time.sleep(1)
    assert available_gib(client, "sim-head") > 100, "the head's vLLM still holds its memory after its worker's Ray stopped"
    worker().images.remove(image, force=True)
    rc, out = playbook("serve", log="faults-serve-image-removed", check=True)
    assert "sim-worker1" in out and worker().images.get(image).id == head().images.get(image).id
    assert chat() == 200
    record("fault", "the image removed on a worker", "serve.yml streams the head's image to that worker only "
           "(docker save | ssh | docker load), checks one image ID everywhere and serves", time.monotonic() - started)


@pytest.mark.extended  # a relaunch (about 2 minutes); a head lost while serving and finished by the next run is in make test
def test_an_interrupted_serve_is_finished_by_the_next_run(client):
    # A container of someone else's that merely carries our cluster label: teardown names it and leaves it alone.
    lookalike = head().containers.run("dgx-spark-sim/runtime:sim", ["sleep", "600"], name="hand-made-ray", detach=True,
                                      entrypoint=[], labels={"dgx_spark.vllm.cluster": "dgx-spark", "dgx_spark.vllm.node": "sim-head"})
    try:
        rc, out = playbook("teardown", log="faults-teardown-for-interrupt", check=True)
        assert "sim-head: container(s) hand-made-ray carry cluster dgx-spark's label but not dgx_spark.vllm.managed=true" in " ".join(out.split())
        assert head().containers.get("hand-made-ray").status == "running" and our_containers() == []
        record("trap", "a container of someone else's carrying the cluster's label", "teardown names it and leaves it running")
    finally:
        lookalike.remove(force=True)
    log = os.path.join(ROOT, "tests", "output", "logs", "faults-serve-interrupted.log")
    with open(log, "w", encoding="utf-8") as handle:
        proc = subprocess.Popen(["ansible-playbook", "playbooks/serve.yml"], cwd=ROOT, env=environment(None),  # pylint: disable=consider-using-with
                                stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    started = time.monotonic()
    try:
        for dummy in range(1200):  # killed as the containers start: Ray up on some nodes, vLLM not yet
            with open(log, encoding="utf-8", errors="replace") as handle:
                if "dgx_spark.vllm.ray_cluster" in handle.read():
                    break
            time.sleep(0.25)
        time.sleep(2)
    finally:
        os.killpg(proc.pid, 9)  # as a closed laptop or a cancelled AWX job leaves it
        proc.wait()
    rc, out = playbook("serve", log="faults-serve-after-interrupt", check=True)
    assert chat() == 200
    assert our_containers() == ["dgx-spark-door-sim-head", "dgx-spark-prometheus", HEAD_RAY, WORKER_RAY]  # nothing doubled or left over
    record("fault", "serve.yml killed mid-run (as Ray's containers start)", "the next serve.yml finishes the job from "
           "what the probe finds", time.monotonic() - started)


def test_unreachable_worker_stops_the_run_and_sim_then_serve_recover(client):
    started = time.monotonic()
    client.containers.get("sim-worker1").stop()
    rc, out = playbook("serve", log="faults-serve-unreachable")
    assert rc != 0
    assert "fatal: [sim-worker1]: UNREACHABLE!" in out
    assert "sim-worker1 was not probed: it was unreachable" in out
    assert head().containers.get(HEAD_RAY).status == "running"  # nothing on the head was touched
    dummy, out = playbook("status", log="faults-status-unreachable")  # the node that keeps the records' copy is the one down
    assert "sim-worker1 (10.210.0.11): unreachable" in out and "sim-head (10.210.0.10): dgx-spark" in out, out[-3000:]
    run("faults-sim-restart-node", ["ansible-playbook", "playbooks/sim.yml"], timeout=600)
    playbook("serve", log="faults-serve-after-unreachable", check=True)
    assert chat() == 200
    record("fault", "a worker node down (unreachable over SSH)",
           "serve stops before any change, naming the node; once it is back (sim.yml), serve restores the cluster",
           time.monotonic() - started)


DAMAGE = """
import glob, os, shutil, sys
from safetensors import safe_open
from safetensors.torch import load_file, save_file
MLP = ("mlp.down_proj.weight", "mlp.up_proj.weight")
def holds_mlp(path):  # the model may come in several shards; the first MLP weight is in one of them
    with safe_open(path, "pt") as handle:
        return any(k.endswith(MLP) for k in handle.keys())
# Only the served model's own files: other models' (the ring's, the model tests') may sit in the same folder.
shards = sorted({os.path.realpath(p) for p in glob.glob("/models/huggingface/hub/models--dgx-spark-sim--sim-tiny/**/*.safetensors",
                                                        recursive=True)})
if sys.argv[1] == "damage":
    path = [p for p in shards if holds_mlp(p)][0]
    shutil.copy2(path, path + ".orig")
    with safe_open(path, "pt") as handle:
        metadata = handle.metadata()
    tensors = load_file(path)
    name = sorted(k for k in tensors if k.endswith(MLP))[0]
    tensors[name] = -tensors[name]  # other weights, the same names, shapes and size: what a size check cannot see
    save_file(tensors, path, metadata=metadata)
else:
    path = [p for p in shards if os.path.exists(p + ".orig")][0]
    os.replace(path + ".orig", path)
print(path, os.path.getsize(path))
"""


def weights(action):
    """Damage (or restore) one weight tensor of the model on every node, in place, its size unchanged."""
    for node in (head(), worker()):
        node.containers.run("dgx-spark-sim/runtime:sim", ["python3", "-c", DAMAGE, action], entrypoint=[], remove=True,
                            volumes=["/var/lib/dgx-spark-vllm/models:/models"])


def test_the_canary_keeps_the_answers_and_catches_other_weights(client):
    """The first verified serve kept the canary's answers (token IDs) on the head and on the controller; with the
    controller's copy gone (an AWX job's fresh project copy), the head's are the reference: other weights
    under the same name (a damaged or swapped snapshot, same sizes) are caught by name before the run says it serves; with
    the weights back, a launch that changes only --max-model-len gives the same tokens. Two launches: the first changes
    --max-model-len too, so each proves the canary across a launch of other flags."""
    kept = json.loads(open(os.path.join(SIM, ".artifacts", "canary-reference.json"), encoding="utf-8").read())
    reference = kept["models"]["dgx-spark-sim/sim-tiny"]
    assert len(reference["answers"]) == 5 and all(len(a["tokens"]) == 16 for a in reference["answers"])
    assert json.loads(node_docker_exec("sim-head", ["cat", "/var/lib/dgx-spark-vllm/dgx-spark/config/canary-reference.json"])) == kept
    os.unlink(os.path.join(SIM, ".artifacts", "canary-reference.json"))  # as in an AWX job's fresh copy: the head's is the truth
    weights("damage")
    try:
        started = time.monotonic()
        rc, out = playbook("serve", "-e", "vllm_max_model_len=768", log="faults-serve-canary-damaged")
        assert rc != 0
        flat = " ".join(out.split())
        assert "sim-head: restart vLLM" in out  # the profile's 1024 changed: the running vLLM restarts
        assert "canary FAILED: the answers differ from the reference recorded" in flat and "token for token" in flat
        assert "'The capital of France is':" in flat
        record("canary", "other weights under the same model and revision (one tensor changed on every node, sizes kept)",
               "the canary's answers differ from the reference; serve fails naming the prompts", time.monotonic() - started)
    finally:
        weights("restore")
    started, since = time.monotonic(), time.time()
    rc, out = playbook("serve", log="faults-serve-canary-restored", check=True)
    assert "sim-head: restart vLLM" in out  # back from 768 to the profile's 1024
    assert re.search(r"canary passed: 5 prompts agree with the reference recorded \S+ token for token", " ".join(out.split()))
    assert json.loads(open(os.path.join(SIM, ".artifacts", "canary-reference.json"), encoding="utf-8").read()) == kept  # the report again
    # The release names the vLLM serve.yml verified: the woken supervisor does not ask it the canary again.
    said = supervisor_did("sim-head", "completion passed", 30, since) or ""
    assert said.startswith("completion passed: verified by serve.yml") and said.endswith("not asked again"), said
    record("canary", "a launch that changes only --max-model-len", "the canary's 5 greedy answers match the reference "
           "token for token", time.monotonic() - started)


@pytest.mark.parametrize("extra,message", [
    (["-e", "vllm_profile=nope"], "unknown profile 'nope'; available: minimax_m25_nvfp4_ep"),
    (["-e", "vllm_backend=slurm"], "value of vllm_backend must be one of: ray, mp, got: slurm"),
    (["-e", '{"vllm_extra_env": {"RAY_ADDRESS": "ray://10.210.0.10:10001"}}'], "is a Ray Client address"),
    (["-e", "vllm_gpu_memory_utilization=1.5"], "gpu_memory_utilization must be in (0, 1], got 1.5"),
    (["-e", "vllm_max_model_len=100000"], "max_model_len 100000 exceeds the model's 4096 tokens"),
    (["-e", "vllm_image=dgx-spark-sim/runtime:missing"], "The head sim-head does not hold dgx-spark-sim/runtime:missing"),
    (["-e", '{"vllm_extra_flags": {"--api-key": "sk-not-here"}}'], "vllm_extra_flags carries --api-key, a secret"),
])
def test_bad_input_is_refused_before_any_change(client, extra, message):
    before = every_container(client)
    rc, out = playbook("serve", *extra, log="faults-bad-input")
    assert rc != 0
    assert message in out and "sk-not-here" not in out
    assert every_container(client) == before
    record("bad input", " ".join(extra[1:]), "refused before any change: " + message)


def test_logs_shows_every_ranks_last_lines_and_status_names_each_log(client):
    rc, out = playbook("logs", "-e", "logs_lines=200", log="faults-logs")
    assert rc == 0 and all(h["changed"] == 0 and h["failed"] == 0 for h in recap(out).values()), recap(out)
    flat = " ".join(out.split())
    for shown in ("sim-head: docker logs %s" % HEAD_RAY, "sim-worker1: docker logs %s" % WORKER_RAY,
                  "sim-head: vLLM's log: docker exec %s tail /dgx-spark/logs/vllm.log" % HEAD_RAY):
        assert shown in flat, shown
    # vLLM's requests, and each Ray container's start (Docker keeps a container's log across its restarts: at least two)
    assert "POST /v1/chat/completions HTTP/1.1" in flat and flat.count("Ray runtime started") >= 2
    rc, out = playbook("status", log="faults-status-logs")
    flat = " ".join(out.split()).replace("''", "'")  # the YAML callback quotes a line holding an apostrophe
    assert rc == 0 and "logs: docker logs %s, vLLM's log: docker exec %s tail" % (HEAD_RAY, HEAD_RAY) in flat, flat[-3000:]
    assert "logs: docker logs %s" % WORKER_RAY in flat and "playbooks/logs.yml shows the last lines" in flat


def test_the_ssh_user_without_its_sudo_rule_is_refused_at_the_probe_and_plans_once_it_is_back(client):
    """On DGX OS the SSH user runs root's steps through sudo, as the simulated nodes' nvidia does (roles/sim_cluster). With
    its NOPASSWD rule taken away, sudo asks for a password nobody gave: the probe refuses, before any change, naming
    the host, the user and both fixes; with the rule back, the same inventory plans."""
    rule, kept = "/etc/sudoers.d/dgx-spark-sim", "/root/dgx-spark-sim.sudoers"
    before = every_container(client)
    try:
        for node in ("sim-head", "sim-worker1"):
            node_shell(client, node, "mv %s %s" % (rule, kept))
        rc, out = playbook("plan", log="faults-plan-sudo-password")
        flat = " ".join(out.split()).replace("''", "'")
        assert rc != 0 and "sudo asked nvidia for a password, and none was given" in flat, flat[-3000:]
        assert '"nvidia ALL=(ALL) NOPASSWD: ALL" in /etc/sudoers.d/' in flat and "--ask-become-pass" in flat
        assert re.search(r"sim-(head|worker1): sudo asked nvidia", flat) and every_container(client) == before
    finally:
        for node in ("sim-head", "sim-worker1"):
            node_shell(client, node, "if [ -e %s ]; then mv %s %s; fi" % (kept, kept, rule))
    rc, out = playbook("plan", log="faults-plan-sudo-nopasswd")
    assert rc == 0, out[-3000:]
    record("bad input", "an SSH user whom sudo asks for a password", "refused at the probe before any change, naming "
           "the host, the user, a NOPASSWD rule and --ask-become-pass")


def readme_first_request():
    """The README's first request, its shell and its Python block as written, for inventories/sim."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        section = handle.read().split("### The first request", 1)[1]
    shell = section.split("```sh\n", 1)[1].split("```", 1)[0]
    python = section.split("```python\n", 1)[1].split("```", 1)[0]
    return [block.replace("inventories/mycluster", "inventories/sim") for block in (shell, python)]


def test_the_readmes_first_request_answers_from_the_shell_and_from_python(client):
    shell, python = readme_first_request()
    answered = subprocess.run(["bash", "-c", "set -euo pipefail\n" + shell], cwd=ROOT, capture_output=True, text=True,
                              timeout=180, check=False)
    assert answered.returncode == 0, answered.stderr
    completion = json.loads(answered.stdout)
    assert completion["model"] == "sim-tiny" and completion["choices"][0]["message"]["content"], completion
    answered = subprocess.run([os.path.join(ROOT, ".venv", "bin", "python"), "-c", python], cwd=ROOT, capture_output=True,
                              text=True, timeout=180, check=False)
    assert answered.returncode == 0 and answered.stdout.strip(), answered.stderr
    assert api_key() not in answered.stdout + answered.stderr


def test_a_head_that_cannot_ssh_to_a_worker_lacking_the_image_is_refused_before_any_change(client):
    """The image is streamed `docker save | ssh <worker fabric address> docker load` from the head. A worker that lacks
    it (its tag taken away, the image kept under another) and no longer authorizes the head's key: serve.yml refuses
    after the plan and before any change, naming the head, the worker, what ssh said and the fix."""
    image, keep = "dgx-spark-sim/runtime:sim", "dgx-spark-sim/runtime:reach-test"
    keys = os.path.join(SIM_ROOT, "nodes", "sim-worker1", "run", "authorized_keys")
    with open(keys, encoding="utf-8") as handle:
        authorized = handle.read()
    before = every_container(client)
    worker().images.get(image).tag(keep)
    worker().images.remove(image)  # only the tag: the image stays under the test's, the running worker keeps it
    try:
        with open(keys, "w", encoding="utf-8") as handle:  # the controller's key only, as on a Spark nobody prepared
            handle.write(authorized.splitlines()[0] + "\n")
        rc, out = playbook("serve", log="faults-serve-no-ssh-to-worker")
        flat = " ".join(out.split())
        assert rc != 0 and "The head sim-head cannot stream the image to sim-worker1, which lacks it" in flat, out[-3000:]
        assert "Permission denied" in flat and "ssh-copy-id nvidia@10.210.0.11" in flat and "Nothing was changed." in flat
        assert every_container(client) == before
        assert all(h["changed"] == 0 for h in recap(out).values()), recap(out)
    finally:
        with open(keys, "w", encoding="utf-8") as handle:
            handle.write(authorized)
        worker().images.get(keep).tag(image)
        worker().images.remove(keep)
    record("bad input", "a worker lacking the image that does not authorize the head's key",
           "refused before any change: The head sim-head cannot stream the image to sim-worker1")


def pull_vars(tmp_path, **given):
    """image_source: pull with the registry's login, in a file (-e @file) as AWX gives a credential: never in argv."""
    path = tmp_path / "pull.json"
    path.write_text(json.dumps(dict({"image_source": "pull", "vllm_image": PULLED, "image_registry_username": "sim-puller",
                                     "image_registry_password": registry_login()["password"]}, **given)), encoding="utf-8")
    path.chmod(0o600)
    return "@" + str(path)


@pytest.mark.parametrize("fault, message", [
    ("wrong_login", "sim-worker1 cannot pull 10.209.0.6:5000/dgx-spark-sim/runtime:sim (image_source: pull, vllm_image): its registry "
                    "10.209.0.6:5000: it refused the login of sim-puller (HTTP 401). Fix: check image_registry_username and "
                    "image_registry_password. Nothing was changed."),
    ("no_ca", "sim-worker1 cannot pull 10.209.0.6:5000/dgx-spark-sim/runtime:sim (image_source: pull, vllm_image): its registry "
              "10.209.0.6:5000: its certificate is not trusted on this node"),
    ("no_login", "it asks for a login (HTTP 401, basic) and none was given. Fix: set image_registry_username and "
                 "image_registry_password (in AWX, a credential that gives them as extra variables, docs/awx.md)"),
])
def test_a_node_that_cannot_pull_the_image_is_refused_before_any_change(client, tmp_path, fault, message):
    """image_source: pull. The worker lacks the registry's image and cannot pull it: a wrong password, the registry's CA
    not where Docker reads it, or no login at all. serve.yml refuses before the probe, naming the node, the image, what
    the registry said and the fix, and nothing changes: no container, no image on the worker. (None of these reaches
    the manifest: the registry need not hold the image.)"""
    push_to_registry(push=False)
    untag_pulled("sim-worker1")
    ca = os.path.join(SIM_ROOT, "nodes", "sim-worker1", "certs.d", REGISTRY, "ca.crt")
    given = {"wrong_login": {"image_registry_password": "not-the-password"},
             "no_login": {"image_registry_username": "", "image_registry_password": ""}}.get(fault, {})
    before = every_container(client)
    if fault == "no_ca":
        os.rename(ca, ca + ".aside")
    try:
        rc, out = playbook("serve", "-e", pull_vars(tmp_path, **given), log="faults-serve-pull-" + fault)
    finally:
        if fault == "no_ca":
            os.rename(ca + ".aside", ca)
    flat = " ".join(out.split())
    assert rc != 0 and message in flat, out[-3000:]
    if fault == "no_ca":
        assert "Fix: place the registry's CA there as ca.crt" in flat and "/etc/docker/certs.d/10.209.0.6:5000" in flat
    assert every_container(client) == before and all(h["changed"] == 0 for h in recap(out).values()), recap(out)
    assert PULLED not in [t for i in worker().images.list() for t in i.tags]
    assert registry_login()["password"] not in out
    record("bad input", "image_source: pull, a worker that cannot pull (%s)" % fault.replace("_", " "),
           "refused before any change: " + message[:90])


def test_with_image_source_pull_a_worker_lacking_the_image_pulls_it_from_the_registry_with_the_login(client, tmp_path):
    """image_source: pull against Debian's docker-registry with TLS and a login: the worker lacking the image is asked
    first, then pulls it (the login in a config folder made for the pull and removed after), the plan reads one image ID
    everywhere and the cluster serves on; the next run pulls nothing and changes nothing."""
    wanted = push_to_registry()
    untag_pulled("sim-worker1")
    rc, planned = playbook("plan", "-e", pull_vars(tmp_path), log="faults-plan-pull")  # plan.yml asks and changes no node
    assert "Ask the registry for each image this node lacks" in planned and all(h["changed"] == 0 for h in recap(planned).values())
    assert PULLED not in [t for i in worker().images.list() for t in i.tags]
    started = time.monotonic()
    rc, out = playbook("serve", "-e", pull_vars(tmp_path), log="faults-serve-pull")
    flat = " ".join(out.split())
    assert "Pull the image this node lacks" in out and "changed: [sim-worker1] => (item=%s)" % PULLED in flat, out[-3000:]
    assert worker().images.get(PULLED).id == wanted == head().images.get("dgx-spark-sim/runtime:sim").id
    assert chat() == 200
    password = registry_login()["password"]
    assert password not in out
    leftovers = node_docker_exec("sim-worker1", ["sh", "-c", "cat ~nvidia/.docker/config.json /root/.docker/config.json 2>/dev/null; true"])
    assert password not in leftovers and "auths" not in leftovers, leftovers  # the daemon got the login in its API request alone
    seconds = time.monotonic() - started
    rc, again = playbook("serve", "-e", pull_vars(tmp_path), log="faults-serve-pull-again")
    assert all(h["changed"] == 0 for h in recap(again).values()), recap(again)
    record("day two", "image_source: pull from a registry with TLS and a login",
           "the worker lacking the image pulls it before the probe, one image ID everywhere, serving; the next run changes nothing",
           seconds)


BROKEN = b"""FROM dgx-spark-sim/runtime:sim
RUN printf '#!/bin/sh\\necho "vllm: this image is broken on purpose" >&2\\nexit 1\\n' > /opt/vllm/bin/vllm
"""


def build_on_head(tag, dockerfile):
    """An image built in the head's own daemon, as a Spark's operator would pull a new one onto the head."""
    import io  # pylint: disable=import-outside-toplevel

    image, dummy = head().images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True)
    return image.id


def remove_from_nodes(tag):
    """A test's image taken back from every node (its image stores are kept between runs)."""
    for node in ("sim-head", "sim-worker1"):
        try:
            node_docker(node).images.remove(tag)
        except docker.errors.ImageNotFound:
            pass


def kept_tags(node):
    """This node's kept tags (an image listed under the kept repository carries its other tags too)."""
    return sorted(t for i in node_docker(node).images.list("dgx-spark-vllm-kept") for t in i.tags
                  if t.startswith("dgx-spark-vllm-kept:"))


@pytest.mark.extended  # about 6 minutes (an image built and streamed, a failed launch, a rollback); a ring apply rolled back is in make test
def test_an_upgrade_that_fails_rolls_back_to_the_last_known_good_and_serves(client):
    """upgrade.yml to an image whose vllm entry point fails (it still imports: the probe and the plan pass): --check
    --diff shows the change and changes nothing; the real run names the failure, plans the last-known-good deployment
    again by the tag that kept its image, and verifies it (the canary token for token); the run fails, saying both.
    serve.yml afterwards changes nothing."""
    playbook("serve", log="faults-upgrade-before", check=True)  # its precondition: the inventory's deployment is the last-known-good
    recorded = json.load(open(os.path.join(SIM, ".artifacts", "last-known-good.json"), encoding="utf-8"))
    broken = build_on_head("dgx-spark-sim/runtime:broken", BROKEN)
    try:
        before = every_container(client)
        rc, out = playbook("upgrade", "-e", "vllm_image=dgx-spark-sim/runtime:broken", "--check", "--diff", log="faults-upgrade-check")
        assert rc == 0 and "Check mode: the upgrade to dgx-spark-sim/runtime:broken (%s, sim_tiny) would change image: " \
            "dgx-spark-sim/runtime:sim -> dgx-spark-sim/runtime:broken" % broken.split(":")[1][:12] in " ".join(out.split())
        assert every_container(client) == before and chat() == 200
        started = time.monotonic()
        rc, out = playbook("upgrade", "-e", "vllm_image=dgx-spark-sim/runtime:broken", log="faults-upgrade-broken")
        seconds = time.monotonic() - started
        flat = " ".join(out.split())
        assert rc != 0
        assert ("The upgrade to dgx-spark-sim/runtime:broken (%s, sim_tiny) failed: sim-head: Stop when vLLM died while loading, "
                "with the end of its log: vLLM exited while loading on sim-head" % broken.split(":")[1][:12]) in flat
        assert "vllm: this image is broken on purpose. Rolled back to dgx-spark-sim/runtime:sim" in flat
        assert re.search(r"canary passed: 5 prompts agree with the reference recorded \S+ token for token", flat)  # the rollback's verify
        assert chat() == 200
        summary = json.load(open(os.path.join(SIM, ".artifacts", "summary.json"), encoding="utf-8"))
        assert summary["upgrade"]["outcome"] == "rolled_back" and summary["upgrade"]["failures"][0]["host"] == "sim-head"
        now = json.load(open(os.path.join(SIM, ".artifacts", "last-known-good.json"), encoding="utf-8"))
        assert now["image_id"] == recorded["image_id"] and now["serve_config_hash"] == recorded["serve_config_hash"]
        for node in ("sim-head", "sim-worker1"):  # the image rolled back to is kept; the one that failed never was
            assert "dgx-spark-vllm-kept:dgx-spark-" + recorded["image_id"][7:19] in kept_tags(node)
            assert "dgx-spark-vllm-kept:dgx-spark-" + broken[7:19] not in kept_tags(node)
        assert available_gib(client, "sim-head") > 70  # the old vLLM was stopped before its container changed: nothing pinned
        record("upgrade", "an upgrade to an image whose vLLM fails at start", "the failure is named; the last-known-good "
               "deployment is planned again and verified (canary token for token) in %.0f s; the run fails saying both"
               % summary["upgrade"]["seconds"]["rollback"], seconds)
        rc, out = playbook("serve", log="faults-serve-after-rollback", check=True)  # the inventory's image: the same ID
        assert "Changes: none, every container and vLLM run as planned" in out
    finally:
        remove_from_nodes("dgx-spark-sim/runtime:broken")


def test_bench_writes_csv_json_plots_and_a_summary_compared_with_the_previous_run(client):
    """bench.yml on the serving cluster as shipped, no variable given (inventories/sim's small sweep; the input length
    derived from the profile's max_model_len): a row per point with real figures in the CSV and the JSON, two plots and
    a summary; the key in none of them. A deployment that does not run as planned is not measured. (The comparison with
    the previous run, from the cluster's record of it: test_awx_jobs.py; its wording: tests/unit/plan/test_bench.py.)"""
    import csv  # pylint: disable=import-outside-toplevel
    import glob  # pylint: disable=import-outside-toplevel

    rc, out = playbook("bench", "-e", "vllm_max_model_len=512", log="faults-bench-not-planned")
    assert rc != 0 and "bench.yml measures what serves. Run playbooks/serve.yml first" in " ".join(out.split())
    started = time.monotonic()
    rc, out = playbook("bench", log="faults-bench", check=True)
    seconds = time.monotonic() - started
    assert "Sweep of 3 points" in out and "c4-in992-out32: 8 prompts" in out  # 1024 - 32: the sweep fits max_model_len
    folder = sorted(glob.glob(os.path.join(SIM, ".artifacts", "bench", "*")))[-1]
    assert sorted(os.listdir(folder)) == ["bench.csv", "bench.json", "latency.png", "summary.md", "throughput.png"]
    with open(os.path.join(folder, "bench.csv"), encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["concurrency"]) for r in rows] == [1, 2, 4] and all(r["errors"] == "0" for r in rows), rows
    assert all(int(r["completed"]) == int(r["prompts"]) >= 4 and float(r["output_tokens_per_s"]) > 0 for r in rows), rows
    assert all(float(r["ttft_p99_ms"]) >= float(r["ttft_p50_ms"]) > 0 for r in rows), rows
    saved = json.load(open(os.path.join(folder, "bench.json"), encoding="utf-8"))
    assert saved["meta"]["profile"] == "sim_tiny" and saved["decode_bound"] > 0 and len(saved["rows"]) == 3
    for plot in ("throughput.png", "latency.png"):
        with open(os.path.join(folder, plot), "rb") as handle:
            data = handle.read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000, plot
    key = api_key()
    assert key not in out and not any(key in open(os.path.join(folder, f), "rb").read().decode("latin-1") for f in os.listdir(folder))
    record("bench", "bench.yml on the serving cluster as shipped (3 points, 8 prompts each)", "CSV, JSON, two plots and a summary; "
           "the key in none of them", seconds)


def test_bench_from_a_host_outside_the_cluster_loads_the_front_door_from_there(client):
    """vllm_bench_from=localhost (this machine, no node of the cluster; seed 004 measured from a third machine): the
    point runs in this machine's Docker from the deployment's image, asking the head's front door with the key, and no
    container starts on the head; the summary says where the load came from; nothing staged is left here. A host the
    inventory lacks, a node of the cluster, and another name for a node, are refused before anything runs."""
    import csv  # pylint: disable=import-outside-toplevel
    import glob  # pylint: disable=import-outside-toplevel

    rc, out = playbook("bench", "-e", "vllm_bench_from=sim-nowhere", log="faults-bench-from-nowhere")
    assert rc != 0 and "vllm_bench_from=sim-nowhere is no host of this inventory" in " ".join(out.split())
    rc, out = playbook("bench", "-e", "vllm_bench_from=sim-worker1", log="faults-bench-from-a-node")
    assert rc != 0 and "vllm_bench_from=sim-worker1 is a node of spark_cluster" in " ".join(out.split())
    with tempfile.TemporaryDirectory() as folder:  # another name for the worker, as a second inventory may give it
        with open(os.path.join(folder, "alias.yml"), "w", encoding="utf-8") as handle:
            # ... and a host without ansible_host beside it: every host's address is read, and one without is its name
            handle.write("all:\n  hosts:\n    sim-worker1-alias:\n      ansible_host: %s\n    sim-by-name:\n"
                         % NODE_ADDRESSES["sim-worker1"][0])
        rc, out = playbook("bench", "-i", SIM, "-i", os.path.join(folder, "alias.yml"), "-e", "vllm_bench_from=sim-worker1-alias",
                           log="faults-bench-from-a-node-alias")
    assert rc != 0 and ("vllm_bench_from=sim-worker1-alias reaches %s, the address of sim-worker1" % NODE_ADDRESSES["sim-worker1"][0]
                        in " ".join(out.split()))
    staged = sorted(glob.glob("/tmp/dgx-spark-bench-*"))
    since = int(time.time())
    rc, out = playbook("bench", "-e", "vllm_bench_from=localhost", "-e", '{"vllm_bench_concurrency": [2]}', log="faults-bench-from", check=True)
    until = int(time.time()) + 1
    started = {name: [e["Actor"]["Attributes"].get("image") for e in docker_client.events(
        since=since, until=until, decode=True, filters={"type": "container", "event": "start"})]
        for name, docker_client in (("here", client), ("sim-head", node_docker("sim-head")))}
    image_id = node_docker("sim-head").images.get("dgx-spark-sim/runtime:sim").id
    assert started["here"] == [image_id] and started["sim-head"] == [], started
    assert "- load generated from localhost, outside the cluster, through http://10.209.0.10:8000" in out
    folder = sorted(glob.glob(os.path.join(SIM, ".artifacts", "bench", "*")))[-1]
    with open(os.path.join(folder, "bench.csv"), encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 1 and rows[0]["errors"] == "0" and int(rows[0]["completed"]) == int(rows[0]["prompts"]) >= 8, rows
    assert sorted(glob.glob("/tmp/dgx-spark-bench-*")) == staged  # the key's copy and the tokenizer went with the sweep
    assert api_key() not in out


LAYERED = b"""FROM dgx-spark-sim/runtime:sim
RUN echo "a layer that changes nothing vLLM computes" > /etc/dgx-spark-upgrade-test
"""


@pytest.mark.extended
def test_an_upgrade_that_works_is_kept_and_the_image_before_it_stays(client):
    """upgrade.yml to the same image plus a layer (another image ID, the same numerics): vLLM is stopped by its process
    group before its containers change, the canary passes by the profile's tolerance across the image ID, the new
    deployment becomes the last-known-good one, and the image before it stays kept on every node. Going back with
    vllm_images_kept=1 lets go of the layered image's kept tag, and of nothing else."""
    before = json.load(open(os.path.join(SIM, ".artifacts", "last-known-good.json"), encoding="utf-8"))
    layered = build_on_head("dgx-spark-sim/runtime:layered", LAYERED)
    old_tag, new_tag = "dgx-spark-vllm-kept:dgx-spark-" + before["image_id"][7:19], "dgx-spark-vllm-kept:dgx-spark-" + layered[7:19]
    try:
        started = time.monotonic()
        rc, out = playbook("upgrade", "-e", "vllm_image=dgx-spark-sim/runtime:layered", log="faults-upgrade-layered", check=True)
        flat = " ".join(out.split())
        assert "sim-head: stop, then start vLLM" in flat
        assert re.search(r"canary passed: 5 prompts agree with the reference recorded \S+ within the tolerance, across: image_id", flat)
        assert "Upgraded to dgx-spark-sim/runtime:layered (%s, sim_tiny)" % layered[7:19] in flat
        now = json.load(open(os.path.join(SIM, ".artifacts", "last-known-good.json"), encoding="utf-8"))
        assert now["image_id"] == layered and now["kept_images"][-2:] == [old_tag, new_tag]
        for node in ("sim-head", "sim-worker1"):
            assert {old_tag, new_tag} <= set(kept_tags(node))
        assert available_gib(client, "sim-head") > 70  # stopped by its process group: nothing pinned
        record("upgrade", "an upgrade to another image ID with the same numerics", "vLLM stopped by its process group first; "
               "the canary passes by tolerance; the image before it stays kept", time.monotonic() - started)
        rc, out = playbook("upgrade", "-e", "vllm_image=dgx-spark-sim/runtime:sim", "-e", "vllm_images_kept=1",
                           log="faults-upgrade-back", check=True)
        assert "Upgraded to dgx-spark-sim/runtime:sim" in " ".join(out.split())
        assert json.load(open(os.path.join(SIM, ".artifacts", "last-known-good.json"), encoding="utf-8"))["kept_images"] == [old_tag]
        for node in ("sim-head", "sim-worker1"):
            assert kept_tags(node) == [old_tag]
            assert node_docker(node).images.get("dgx-spark-sim/runtime:layered").id == layered  # its own tag stays
    finally:
        remove_from_nodes("dgx-spark-sim/runtime:layered")
