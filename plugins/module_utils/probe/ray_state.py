# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ray cluster state as facts, without the Ray dashboard.

``ray list nodes`` needs the dashboard (kept off: its jobs API is unauthenticated remote code
execution), and ``ray status`` is human text. The probe runs a short Python script on a cluster node
that prints ``ray.nodes()`` as JSON (``NodeID``, ``Alive``, ``NodeManagerAddress``, ``Resources``
are the keys vLLM itself relies on) and leaves with ``os._exit`` so that no shutdown handshake is
waited for (0.4 s instead of 1.5 s).

With Ray's token authentication on (the collection's Ray containers: plan/commands.RAY_AUTH_ENV), the script presents
the token from the file the container's ``RAY_AUTH_TOKEN_PATH`` names, as Ray's own clients do.

It asks the GCS's node table directly (``GcsClient.get_all_node_info``, what ``ray.nodes()`` reads,
converted as ``ray.nodes()`` converts it): no driver joins the cluster, so a look takes 0.45 s instead
of 1.35 s, and leaves no driver in Ray's job table. That client is Ray's own, not its public API, so
when the image's Ray lacks it or it fails, the script falls back to a driver (``ray.init`` and
``ray.nodes()``), whose error says what is wrong.
"""

from __future__ import annotations

import json

# Run with ``python3 -c PROBE_SCRIPT ADDRESS``. Prints one JSON object on stdout. Connecting to an
# unreachable GCS blocks in Ray's C++ client for minutes, out of reach of Python signal handlers, so
# callers wrap it in ``timeout --signal=KILL`` (see probe_argv).
# The GCS's node table is asked first over gRPC with Ray's own generated messages, loaded without Ray's package (its
# import takes half a second of every probe); any failure falls to Ray's client, then to a driver, which says why.
PROBE_SCRIPT = r"""
import json, os, sys
def out(obj, code=0):
    sys.stdout.write(json.dumps(obj, default=str)); sys.stdout.flush(); os._exit(code)
def node(n, alive):
    return {"NodeID": n.node_id.hex(), "Alive": alive, "NodeManagerAddress": n.node_manager_address,
            "NodeManagerHostname": n.node_manager_hostname, "NodeName": n.node_name,
            "Resources": dict(n.resources_total) if alive else {}, "DeathReasonMessage": n.death_info.reason_message}
try:
    import importlib.metadata, importlib.util, types
    base = importlib.util.find_spec("ray").submodule_search_locations[0]
    for name, path in (("ray", base), ("ray.core", base + "/core"), ("ray.core.generated", base + "/core/generated")):
        stub = types.ModuleType(name); stub.__path__ = [path]; sys.modules[name] = stub
    import grpc
    from ray.core.generated import gcs_pb2, gcs_service_pb2 as svc
    address = sys.argv[1]
    if address == "auto":
        with open("/tmp/ray/ray_current_cluster") as handle:
            address = handle.read().strip()
    ask = grpc.insecure_channel(address).unary_unary("/ray.rpc.NodeInfoGcsService/GetAllNodeInfo",
        request_serializer=svc.GetAllNodeInfoRequest.SerializeToString, response_deserializer=svc.GetAllNodeInfoReply.FromString)
    token = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if token:
        with open(token) as handle:
            token = handle.read().strip()
    reply = ask(svc.GetAllNodeInfoRequest(), timeout=5, metadata=(("authorization", "Bearer " + token),) if token else None)
    required = None
    if token:  # the same question without the token must be refused: Ray enforces it, not only asks for it
        try:
            ask(svc.GetAllNodeInfoRequest(), timeout=5)
            required = False
        except grpc.RpcError as exc:
            required = exc.code() == grpc.StatusCode.UNAUTHENTICATED
    out({"version": importlib.metadata.version("ray"), "token_required": required,
         "nodes": [node(n, n.state == gcs_pb2.GcsNodeInfo.ALIVE) for n in reply.node_info_list]})
except Exception:
    for name in ("ray.core.generated", "ray.core", "ray"):
        sys.modules.pop(name, None)
    for name in [m for m in sys.modules if m.startswith("ray.")]:
        sys.modules.pop(name, None)
try:
    import ray
except Exception as exc:
    out({"error": "import", "detail": "%s: %s" % (type(exc).__name__, exc)})
try:
    from ray._raylet import GcsClient
    from ray._private.services import canonicalize_bootstrap_address_or_die
    from ray.core.generated import gcs_pb2
    infos = GcsClient(address=canonicalize_bootstrap_address_or_die(sys.argv[1])).get_all_node_info(timeout=5)
    out({"version": ray.__version__, "nodes": [node(n, n.state == gcs_pb2.GcsNodeInfo.ALIVE) for n in infos.values()]})
except Exception:
    pass  # not this Ray's client, or no answer: a driver says why
try:
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
except Exception as exc:
    out({"error": "connect", "detail": "%s: %s" % (type(exc).__name__, exc)})
keep = ("NodeID", "Alive", "NodeManagerAddress", "NodeManagerHostname", "NodeName", "Resources", "DeathReasonMessage")
out({"version": ray.__version__, "nodes": [{k: n.get(k) for k in keep} for n in ray.nodes()]})
"""


PROBE_TIMEOUT_RC = 137  # timeout --signal=KILL
UNAUTHENTICATED = ("Ray answers without its token: its container sets RAY_AUTH_MODE=token, but Ray %s does not enforce it "
                   "(token authentication needs Ray 2.52 or later); any host that reaches its ports could run code. Use an "
                   "image with Ray 2.52 or later, or vllm_backend: mp")


def probe_argv(address, python="python3", container=None, docker="docker", seconds=20):
    """The argv that runs the probe, inside ``container`` when given, killed after ``seconds``."""
    argv = ["timeout", "--signal=KILL", str(seconds), python, "-c", PROBE_SCRIPT, address]
    if container:
        argv = [docker, "exec", container] + argv
    return argv


class RayStateError(Exception):
    """Ray could not be read; the message says why and what to do."""


def parse_probe_output(rc, stdout, stderr, where, address="auto", seconds=20):
    """Parse the probe's JSON; raise RayStateError with a remedy when Ray is absent or not running."""
    text = (stdout or "").strip()
    if rc == PROBE_TIMEOUT_RC and not text:
        raise RayStateError("no answer from Ray at %s on %s within %d s: is the head up and reachable?" % (address, where, seconds))
    if "No such container" in (stderr or ""):
        raise RayStateError("container %s does not exist: the Ray container is not running there "
                            "(start it with playbooks/serve.yml)" % where)
    if rc != 0 and not text:
        raise RayStateError("could not read Ray state on %s (rc=%d): %s" % (where, rc, (stderr or "").strip()[-300:]))
    try:
        data = json.loads(text.splitlines()[-1] if text else "")
    except ValueError:
        raise RayStateError("could not read Ray state on %s: unexpected output %r" % (where, text[-300:]))
    error = data.get("error")
    if error == "import":
        raise RayStateError("Ray is not installed on %s (%s); the image needs ray[default]" % (where, data.get("detail")))
    if error == "connect":
        raise RayStateError("Ray is not running on %s: %s. Start it with the ray_cluster role (playbooks/serve.yml)"
                            % (where, data.get("detail")))
    return data


def summarize(data):
    """Alive and dead nodes with their IPs and resources; GPU total over alive nodes."""
    alive, dead = [], []
    for node in data.get("nodes", []):
        entry = {
            "node_id": node.get("NodeID"),
            "node_ip": node.get("NodeManagerAddress"),
            "hostname": node.get("NodeManagerHostname"),
            "is_head": "node:__internal_head__" in (node.get("Resources") or {}),
            "resources": node.get("Resources") or {},
        }
        if node.get("Alive"):
            alive.append(entry)
        else:
            entry["death_reason"] = node.get("DeathReasonMessage") or ""
            dead.append(entry)
    alive.sort(key=lambda n: (not n["is_head"], n["node_ip"] or ""))
    # A node that died and came back under the same IP is listed twice; only the live one counts.
    live_ips = {n["node_ip"] for n in alive}
    dead = [n for n in dead if n["node_ip"] not in live_ips]
    return {
        "version": data.get("version"),
        "alive_nodes": alive,
        "dead_nodes": dead,
        "alive_count": len(alive),
        "gpu_total": sum(float(n["resources"].get("GPU", 0)) for n in alive),
        "alive_ips": sorted(live_ips),
        # False: the container asks for a token and Ray answered without one (a Ray before 2.52 ignores RAY_AUTH_MODE)
        "token_required": data.get("token_required"),
    }


def evaluate(state, expected_nodes=None, expected_gpus=None, expected_ips=None):
    """Add ``ready`` and ``missing_ips`` to a summary; ``reasons`` says what is not yet there."""
    reasons = []
    missing = sorted(set(expected_ips or []) - set(state["alive_ips"]))
    if missing:
        reasons.append("missing nodes: %s" % ", ".join(missing))
    if expected_nodes is not None and state["alive_count"] < expected_nodes:
        reasons.append("%d of %d nodes alive" % (state["alive_count"], expected_nodes))
    if expected_gpus is not None and state["gpu_total"] < expected_gpus:
        reasons.append("%g of %g GPUs" % (state["gpu_total"], expected_gpus))
    unexpected = sorted(set(state["alive_ips"]) - set(expected_ips)) if expected_ips else []
    if state.get("token_required") is False:
        reasons.append(UNAUTHENTICATED % state.get("version"))
    result = dict(state)
    result.update(ready=not reasons, missing_ips=missing, unexpected_ips=unexpected, reasons=reasons)
    return result


def validate_address(address):
    """A Ray Client address (ray://) makes vLLM a remote client, not a cluster member: refuse it."""
    if address and address.strip().lower().startswith("ray://"):
        raise RayStateError(
            "address %s is a Ray Client address; vLLM must run as a driver inside the head node's "
            "container (a ray:// client silently gives single-GPU inference). Use 'auto' or HEAD_IP:6379" % address)
    return address
