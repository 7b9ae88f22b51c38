# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster comes back by itself: a supervisor on every node, started at boot, that does what the plan says.

Today's launch leaves nothing a node could restart by itself: ``vllm serve`` is a process exec'd into the head's Ray
container (fact 1), so a Docker restart policy brings back Ray at best, an orphaned Ray that serves nothing. And a
restart policy would start the containers before anything has looked at the node: a Spark that comes back with
memory pinned (fact 3) would load the model into what is left, and fail, or starve the OS.

So each node gets a small supervisor, a systemd unit ordered after Docker (``unit``), that reads the plan's steps for
that node (``plan``, written as JSON beside the node's state) and brings each one about in order, looking again every
few seconds. The order and the waits are data:

- a worker: the head's Ray port answers, then its Ray container runs (started only when the node's memory fits);
- the head: its Ray container runs, every node and GPU has joined (the join gate, fact 2), vLLM runs in the head's
  container as the process group vllm_process makes (started only when the memory fits), the endpoint answers, and
  one completion is asked of it (the smoke test of a boot), then the correctness canary's prompts, compared with the
  reference the head keeps (module_utils/canary.py): a boot must not bring back a deployment that answers wrong;
- the mp backend: each node's vLLM container runs; the head's endpoint answers.

A step that waits (``tcp``, ``join``, ``health``) ends the look when it is not yet true; a step that acts
(``container``, ``driver``) checks the memory first and refuses to start when it does not fit, saying why in the
status file, which status.yml shows. A worker that reboots kills the head's vLLM (its rank is gone); the head's
supervisor starts vLLM again once the worker has joined. Playbooks that change the cluster hold the supervisor
(``hold`` file) while they work, so it never fights them; teardown removes it.

With monitoring on (module_utils/monitoring.py), the supervisor also serves the node's unified-memory figures and its
own state on the node's fabric address, for the head's Prometheus: it runs on every node already, at boot too.

``round`` decides one look from what ``Ops`` reads; ``main`` runs it on the node (stdlib only, with the modules of
this collection it imports copied beside it by the vllm_boot module).
"""

from __future__ import annotations

import hashlib
import http.client
import importlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from ansible_collections.dgx_spark.vllm.plugins.module_utils import canary
from ansible_collections.dgx_spark.vllm.plugins.module_utils import endpoint
from ansible_collections.dgx_spark.vllm.plugins.module_utils import monitoring
from ansible_collections.dgx_spark.vllm.plugins.module_utils import process_group as pg
from ansible_collections.dgx_spark.vllm.plugins.module_utils import ray_state
from ansible_collections.dgx_spark.vllm.plugins.module_utils import unified_memory

UNIT_DIR = "/etc/systemd/system"
LIB_MODULES = ("boot", "canary", "endpoint", "errors", "monitoring", "process_group", "ray_state", "unified_memory")  # what the node's copy needs
PACKAGE = "ansible_collections.dgx_spark.vllm.plugins.module_utils"
INTERVAL = 5            # seconds between looks
EVENTS_KEPT = 30
WAITS = ("tcp", "join", "health")
# Starts of vLLM without the node reaching serving, before the supervisor gives up (a container is started again each
# time: its start is cheap and waits for the head).
MAX_STARTS = 3
GIB = 1024 ** 3


def unit_name(cluster):
    return "dgx-spark-vllm-serve-%s.service" % cluster


def paths(state_dir, cluster):
    """Where the supervisor's files are on a node: its unit, its copy of the code, its plan, its status, the hold."""
    name = unit_name(cluster)
    return {"unit": "%s/%s" % (UNIT_DIR, name), "wants": "%s/multi-user.target.wants/%s" % (UNIT_DIR, name),
            "lib": state_dir + "/boot/lib", "config": state_dir + "/boot/plan.json",
            "status": state_dir + "/boot/status.json", "hold": state_dir + "/boot/hold"}


def lib_paths(where):
    """The node's copy of each module the supervisor imports (LIB_MODULES), in that order."""
    lib = where["lib"] + "/" + PACKAGE.replace(".", "/")
    return ["%s/%s.py" % (lib, name) for name in LIB_MODULES]


def source(name):
    """This collection's module ``name`` as text, from wherever Python loaded it (the controller's checkout, or the zip
    Ansible sends to a node): what the node's copy must hold."""
    loaded = importlib.import_module(PACKAGE + "." + name)
    text = loaded.__loader__.get_source(loaded.__name__)  # Ansible's collection loader gives bytes
    return text.decode("utf-8") if isinstance(text, bytes) else text


def files(boot_plan):
    """Every file the supervisor's install writes, as (path, content, mode): its plan, its unit, its copy of the code."""
    where = boot_plan["paths"]
    return ([(where["config"], json.dumps(boot_plan["config"], indent=2, sort_keys=True) + "\n", 0o644),
             (where["unit"], boot_plan["unit"], 0o644)]
            + [(path, source(name), 0o644) for path, name in zip(lib_paths(where), LIB_MODULES)])


def probe_paths(where):
    """What the probe hashes so that the plan knows whether the install would change anything (``install_changes``)."""
    return [where["config"], where["unit"], where["wants"], where["hold"]] + lib_paths(where)


def install_changes(boot_plan, found, running=None):
    """What installing and releasing ``boot_plan`` would change on a node whose probe found ``found`` ({path: sha256,
    "dir" or None}, node_probe.state) and whether its supervisor runs (``running``): the files that differ, the boot
    link, a hold left by an interrupted run, a supervisor stopped that should run or running that should not. Empty
    when the node holds and runs exactly this supervisor; everything when the node was not probed."""
    if found is None:
        return ["not probed"]
    where = boot_plan["paths"]
    changes = []
    if running is not None and running != bool(boot_plan.get("enabled")):
        changes.append("process (%s)" % ("running although vllm_boot_start is false" if running else "not running"))
    changes += [path for path, content, dummy in files(boot_plan)
                if found.get(path) != hashlib.sha256(content.encode("utf-8")).hexdigest()]
    linked = found.get(where["wants"]) is not None  # the link read through: the unit's content
    if bool(boot_plan.get("enabled")) != linked:
        changes.append(where["wants"])
    if found.get(where["hold"]) is not None:
        changes.append(where["hold"])
    return changes


def supervisor_pid(status, config_path):
    """The running supervisor's PID (its status file names it; its command line must name this plan file)."""
    pid = (status or {}).get("pid")
    if not pid:
        return None
    try:
        with open("/proc/%s/cmdline" % pid, encoding="utf-8") as handle:
            cmdline = handle.read()
    except OSError:
        return None
    return pid if config_path in cmdline.split("\0") else None


def read_status(where):
    """The supervisor's status file (state, detail, since, events, pid), or None when there is none or it is broken."""
    try:
        with open(where["status"], encoding="utf-8") as handle:
            status = json.load(handle)
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def supervisor_running(where, name, run):
    """Whether the node's supervisor runs: its unit is active (systemd), or the process its status names runs this
    plan (a node without systemd). ``run`` runs an argv and returns (rc, out, err)."""
    if os.path.isdir("/run/systemd/system"):
        return run(["systemctl", "is-active", "--quiet", name])[0] == 0
    return bool(supervisor_pid(read_status(where), where["config"]))


def command(where):
    """The supervisor's command line (the unit's ExecStart): Python with the copied modules on its path."""
    return ["/usr/bin/env", "PYTHONPATH=" + where["lib"], "python3", "-m", PACKAGE + ".boot", where["config"]]


def unit(cluster, where, firewall_unit=None):
    """The systemd unit: after Docker (and the firewall's unit, which loads the table before Docker starts)."""
    after = "docker.service network-online.target" + (" " + firewall_unit if firewall_unit else "")
    return "\n".join([
        "# Written by dgx_spark.vllm for cluster %s; removed by teardown.yml." % cluster,
        "[Unit]",
        "Description=dgx_spark.vllm %s: bring the model back after a boot or a crash" % cluster,
        "After=" + after,
        "Wants=docker.service network-online.target",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + " ".join(command(where)),
        "Restart=on-failure",
        "RestartSec=5",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        ""])


def memory_need(memory_plan, node, settings):
    """What must be free on ``node`` before anything that loads the model starts: what vLLM requests (fact 3's fit)
    with room for its processes and the OS floor, and the most unaccounted (pinned) memory the planner accepts."""
    entry = ((memory_plan or {}).get("nodes") or {}).get(node)
    limit = int(float(settings["unaccounted_limit_gib"]) * GIB)
    if not entry:
        return {"need_available_bytes": None, "unaccounted_limit_bytes": limit}
    floor = int((memory_plan or {}).get("headroom_floor_bytes") or 0)
    return {"need_available_bytes": int(entry["requested_bytes"]) + int(entry.get("runtime_bytes") or 0) + floor,
            "unaccounted_limit_bytes": limit}


def steps(backend, is_head, cluster, containers, serve, node_paths):
    """The ordered steps of one node."""
    result = []
    if backend == "ray" and not is_head:
        host, port = cluster["ray_address"].rsplit(":", 1)
        # A worker's Ray stays joined to a head that went away until its raylet gives up (a minute or more): when the
        # head's port was lost and answers again, the worker's container is restarted to join the new head at once.
        result.append({"name": "the head's Ray (%s) answers" % cluster["ray_address"], "kind": "tcp", "host": host, "port": int(port),
                       "rejoin": containers[0]["name"], "check_memory": True})
    for spec in containers:
        result.append({"name": "container %s runs" % spec["name"], "kind": "container", "container": spec["name"], "check_memory": True})
    if not is_head:
        return result
    endpoint_info = cluster["endpoint"]
    if backend == "ray":
        result.append({"name": "every node and GPU joined Ray (%d GPUs)" % cluster["expected_ray_gpus"], "kind": "join",
                       "container": containers[0]["name"], "expected_nodes": cluster["expected_ray_nodes"],
                       "expected_gpus": cluster["expected_ray_gpus"], "expected_ips": cluster["expected_ips"]})
        result.append({"name": "vLLM runs in %s" % serve["container"], "kind": "driver", "container": serve["container"],
                       "argv": serve["command"], "config_hash": serve["config_hash"], "log_file": serve["log"],
                       "state_file": serve["state_file"], "state_file_host": node_paths["vllm_state_file"],
                       "check_memory": True})
    result.append({"name": "the endpoint answers", "kind": "health", "url": endpoint_info["local_health_url"]})
    result.append({"name": "one completion", "kind": "completion", "url": endpoint_info["local_health_url"].rsplit("/", 1)[0],
                   "model": endpoint_info["served_model_name"], "key_file": node_paths["api_key_file"],
                   # After a boot the canary's prompts are asked again and compared with the head's kept reference.
                   "canary": dict(cluster["canary"], reference_file=node_paths["canary_file"]) if cluster.get("canary") else None})
    return result


def plan(settings, backend, node, entry, cluster, firewall_unit=None):
    """The supervisor of one node: its files (unit and plan) and whether it is on (``vllm_boot_start``)."""
    where = paths(entry["paths"]["state_dir"], settings["cluster_name"])
    config = {"cluster": settings["cluster_name"], "node": node, "is_head": entry["is_head"], "backend": backend,
              "config_hash": (entry.get("serve") or {}).get("config_hash") or entry["config_hash"], "interval": INTERVAL,
              "status": where["status"], "hold": where["hold"],
              "memory": memory_need(cluster.get("memory"), node, settings),
              "metrics": metrics_config(settings, node, entry["fabric_ip"]),
              "steps": steps(backend, entry["is_head"], cluster, entry["containers"], entry.get("serve"), entry["paths"])}
    return {"enabled": bool(settings["boot_start"]), "unit_name": unit_name(settings["cluster_name"]), "paths": where,
            "unit": unit(settings["cluster_name"], where, firewall_unit), "config": config}


def metrics_config(settings, node, address):
    """Where this node serves its figures for the head's Prometheus, or None when it does not."""
    if not monitoring.nodes_served(settings):
        return None
    return {"address": address, "port": settings["monitoring"]["node_port"],
            "labels": {"cluster": settings["cluster_name"], "node": node}}


def installed(state_dir, cluster):
    """What status.yml and teardown.yml know of a node's supervisor without a profile: where it is (its plan, read
    from the node, says the rest)."""
    return {"enabled": None, "unit_name": unit_name(cluster), "paths": paths(state_dir, cluster), "config": None, "unit": None}


def next_boot(config, enabled, status):
    """What status.yml says this node does at its next boot, and how its last look went."""
    if not enabled or not config:
        return {"next_boot": "nothing: the supervisor is off (vllm_boot_start: false) or not installed; serve.yml starts the model",
                "state": (status or {}).get("state")}
    names = [s["name"] for s in config["steps"]]
    status = status or {}
    held = " (held now: %s)" % status.get("detail") if status.get("state") == "held" else ""
    return {"next_boot": "checks memory, then: " + "; ".join(names) + held, "state": status.get("state"),
            "detail": status.get("detail"), "since": status.get("since")}


class Ops:
    """What a look reads and does on the node. Tests give a fake; ``main`` gives this one."""

    docker = "docker"

    def run(self, argv, data=None, timeout=60):
        try:
            proc = subprocess.run([str(a) for a in argv], input=data, capture_output=True, text=True, timeout=timeout, check=False,
                                  env=dict(os.environ, LC_ALL="C", LANG="C"))
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 127, "", str(exc)
        return proc.returncode, proc.stdout, proc.stderr

    def exists(self, path):
        return os.path.exists(path)

    def read(self, path):
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    def connects(self, host, port):
        try:
            with socket.create_connection((host, port), timeout=2):
                return True
        except OSError:
            return False

    def http(self, url, body=None, key=None, timeout=5, text=False):
        """(status, parsed JSON or None; with ``text`` the body as text) of a GET, or of a POST of ``body``, to the
        node's own endpoint. http.client, as this runs on the node without Ansible's open_url."""
        parts = urlsplit(url)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        try:
            connection.request("POST" if body is not None else "GET", parts.path or "/",
                               body=json.dumps(body) if body is not None else None, headers=headers)
            answer = connection.getresponse()
            read = answer.read().decode("utf-8", "replace")
            if text:
                return answer.status, read
            return answer.status, (json.loads(read) if read.strip().startswith("{") else None)
        except (OSError, ValueError, http.client.HTTPException):
            return None, None
        finally:
            connection.close()

    def now(self):
        return time.time()

    def memory(self):
        """The unified_memory fact of this node: its /proc/meminfo and nvidia-smi's compute apps."""
        rc, out, dummy = self.run(["nvidia-smi"] + unified_memory.APPS_QUERY, timeout=20)
        apps = unified_memory.parse_compute_apps(out) if rc == 0 else []
        return unified_memory.summarize(unified_memory.parse_meminfo(self.read("/proc/meminfo")), compute_apps=apps)


def metrics_text(config, ops, shared):
    """What the node's /metrics answers: its figures now, and the supervisor's last state."""
    try:
        fact = ops.memory()
    except (OSError, ValueError, KeyError):
        fact = {}
    return monitoring.node_metrics(fact, shared.get("state"), config["metrics"]["labels"])


def serve_metrics(config, ops, shared, server=None):
    """Serve /metrics where the plan says (a thread of the supervisor); moved when the plan moves it, stopped when the
    plan turns monitoring off. Returns the server now running, or None."""
    wanted = config.get("metrics")
    where = (wanted["address"], wanted["port"]) if wanted else None
    if server is not None and server.server_address[:2] == where:
        return server
    if server is not None:
        server.shutdown()
        server.server_close()
    if where is None:
        return None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics_text(config, ops, shared).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # the supervisor's status file is its log
            pass

    try:
        server = ThreadingHTTPServer(where, Handler)
    except OSError as exc:
        shared["metrics_error"] = "cannot serve /metrics on %s:%d: %s" % (where[0], where[1], exc)
        return None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def memory_problem(need, ops):
    """Why the node's memory does not allow a start now, or None."""
    try:
        facts = unified_memory.summarize(unified_memory.parse_meminfo(ops.read("/proc/meminfo")))
    except (OSError, ValueError, KeyError) as exc:
        return "could not read /proc/meminfo: %s" % exc
    unaccounted, available = facts["unaccounted_bytes"], facts["mem_available_bytes"]
    if unaccounted >= need["unaccounted_limit_bytes"]:
        return ("%.1f GiB is used that nothing explains: memory pinned by a container killed hard. Nothing but a reboot "
                "frees it; reboot this node" % (unaccounted / GIB))
    if need["need_available_bytes"] and available < need["need_available_bytes"]:
        return ("%.1f GiB available, the plan needs %.1f GiB; free memory (a page cache: echo 3 > /proc/sys/vm/drop_caches) "
                "or run serve.yml with a lower gpu_memory_utilization" % (available / GIB, need["need_available_bytes"] / GIB))
    return None


def container_running(ops, name):
    rc, out, err = ops.run([ops.docker, "inspect", "--format", "{{.State.Running}}", name], timeout=20)
    if rc != 0:
        return False, "no container %s (%s): run serve.yml" % (name, (err or out).strip()[-120:])
    return out.strip() == "true", "not running"


def driver_state(ops, step):
    """vLLM's process group when it is alive (its state file read on the node, where the container's folder is)."""
    try:
        state = pg.parse_state(ops.read(step["state_file_host"]))
    except OSError:
        state = None
    if not state:
        return None
    alive = ops.run(pg.alive_argv(ops.docker, step["container"], state["pgid"]), timeout=20)[0] == 0
    return state if alive else None


def check(step, ops, memo):
    """(true now, what is missing) for one step."""
    kind = step["kind"]
    if kind == "tcp":
        answers = ops.connects(step["host"], step["port"])
        if not answers:
            memo["head_lost"] = True
        return answers and not (memo.get("head_lost") and step.get("rejoin")), "no answer yet"
    if kind == "container":
        return container_running(ops, step["container"])
    if kind == "join":
        if memo.get("driver_alive"):  # the gate guards vLLM's start; once vLLM runs it is not asked (Ray's client is heavy)
            return True, ""
        rc, out, err = ops.run(ray_state.probe_argv("auto", container=step["container"], docker=ops.docker), timeout=40)
        try:
            state = ray_state.evaluate(ray_state.summarize(ray_state.parse_probe_output(rc, out, err, step["container"])),
                                       step["expected_nodes"], step["expected_gpus"], step["expected_ips"])
        except ray_state.RayStateError as exc:
            return False, str(exc)
        return state["ready"], "; ".join(state["reasons"])
    if kind == "driver":
        return memo.get("driver_alive", False), "not running"
    if kind == "health":
        return ops.http(step["url"])[0] == 200, "not answering 200 yet"
    if kind == "completion":
        if "asked_for" in memo and memo["asked_for"] == memo.get("pgid"):
            return memo.get("completion_ok", False), memo.get("completion_detail", "")
        return None, "to ask"
    raise ValueError("unknown step kind %r" % kind)


def docker(ops, verb, container):
    """``docker <verb...> <container>``; raises StartError with Docker's words when it fails."""
    rc, out, err = ops.run([ops.docker] + verb + [container], timeout=120)
    if rc != 0:
        raise pg.StartError("docker %s %s failed: %s" % (verb[0], container, (err or out).strip()[-300:]))


def act(step, ops):
    """Start what ``step`` names; returns what was done."""
    if step["kind"] == "tcp":  # the head came back: join it again
        docker(ops, ["restart", "--time", "10"], step["rejoin"])
        return "restarted container %s: the head's Ray went away and is back" % step["rejoin"]
    if step["kind"] == "container":
        docker(ops, ["start"], step["container"])
        return "started container %s" % step["container"]
    pgid = pg.start_group(lambda argv, data=None: ops.run(argv, data=data), ops.docker, step["container"], step["argv"],
                          step["config_hash"], step["state_file"], step["log_file"])
    return "started vLLM in %s (process group %d)" % (step["container"], pgid)


def ask(step, ops):
    """(passed, detail) of one short completion from the node's own endpoint, with the key the launcher reads."""
    try:
        key = ops.read(step["key_file"]).strip()
    except OSError as exc:
        return False, "no API key at %s: %s" % (step["key_file"], exc)
    status, answer = ops.http(step["url"] + "/v1/chat/completions", endpoint.chat_request(step["model"], "Say hello.", max_tokens=8),
                              key=key, timeout=120)
    if status != 200:
        return False, "the completion answered %s" % status
    passed, detail = endpoint.judge({"kind": "chat"}, answer)
    if not passed:
        return passed, detail
    passed, verdict = ask_canary(step, ops, key)
    return passed, "%s; %s" % (detail, verdict) if verdict else detail


def in_flight(step, ops):
    """How many requests vLLM runs or queues now (its /metrics gauges), or 0 when it does not say."""
    status, metrics = ops.http(step["url"] + "/metrics", text=True)
    if status != 200 or not metrics:
        return 0
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    return int(total)


def ask_canary(step, ops, key):
    """(passed, verdict) of the canary's prompts, one at a time, against the reference the head keeps (serve.yml's);
    (True, None) when there is none to compare with."""
    spec = step.get("canary")
    try:
        kept = canary.stored_for(json.loads(ops.read(spec["reference_file"])), spec["basis"]["model"]) if spec else None
    except (OSError, ValueError):
        kept = None
    if not kept:
        return True, None
    busy = in_flight(step, ops)
    if busy:  # batched with other requests, a near-tie between two logits may flip: asked alone, or not at all
        return True, "canary not asked: %d requests were in flight" % busy
    answers = []
    for prompt in spec["settings"]["prompts"]:
        status, answer = ops.http(step["url"] + "/v1/completions", canary.request(step["model"], prompt, spec["settings"]),
                                  key=key, timeout=120)
        try:
            if status != 200:
                raise ValueError("it answered %s" % status)
            answers.append({"prompt": prompt, "tokens": canary.tokens_of(answer), "text": answer["choices"][0].get("text") or ""})
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return False, "canary FAILED: the prompt %r: %s" % (prompt, exc)
    verdict = canary.compare(kept, spec["basis"], answers, spec["settings"])
    return verdict["passed"], verdict["message"]


def start(config, step, ops, memo, refusal):
    """Start what ``step`` names when the node's memory allows it (``refusal`` begins the reason when it does not), at
    most MAX_STARTS times for vLLM without the node serving in between."""
    problem = memory_problem(config["memory"], ops) if step.get("check_memory") else None
    if problem:
        return "refused", "%s: %s" % (refusal, problem), None
    starts = memo.setdefault("starts", {})
    if step["kind"] == "driver" and starts.get(step["name"], 0) >= MAX_STARTS:  # no restart loop: an orphaned Ray that serves nothing
        return "failed", ("%s: started %d times without the node serving; not starting it again. Its log says why; "
                          "run serve.yml (or recover.yml) once it is fixed" % (step["name"], MAX_STARTS)), None
    starts[step["name"]] = starts.get(step["name"], 0) + 1
    try:
        return "starting", step["name"], act(step, ops)
    except pg.StartError as exc:
        return "failed", str(exc), str(exc)


def look(config, ops, memo):
    """One look: (state, detail, what was done or None). States: held, waiting, refused, starting, serving, failed."""
    if ops.exists(config["hold"]):
        return "held", "a playbook is changing the cluster (%s)" % config["hold"], None
    for step in config["steps"]:
        if step["kind"] == "driver":
            state = driver_state(ops, step)
            memo["pgid"], memo["driver_alive"] = (state or {}).get("pgid"), state is not None
    for step in config["steps"]:
        done, missing = check(step, ops, memo)
        if done:
            continue
        if step["kind"] == "completion":
            if done is None:
                memo["asked_for"] = memo.get("pgid")
                memo["completion_ok"], memo["completion_detail"] = ask(step, ops)
                what = "completion %s: %s" % ("passed" if memo["completion_ok"] else "FAILED", memo["completion_detail"])
                if memo["completion_ok"]:
                    memo["starts"] = {}
                return ("serving" if memo["completion_ok"] else "failed"), what, what
            return "failed", "completion: " + missing, None
        if step["kind"] == "tcp" and memo.get("head_lost") and ops.connects(step["host"], step["port"]):
            memo["head_lost"] = False  # whatever follows, this head is the one to join
            if container_running(ops, step["rejoin"])[0]:
                return start(config, step, ops, memo, "not restarting %s" % step["rejoin"])
            continue
        if step["kind"] in WAITS:
            return "waiting", "%s: %s" % (step["name"], missing), None
        return start(config, step, ops, memo, "not starting (%s)" % step["name"])
    memo["starts"] = {}  # serving: a later failure gets its tries again
    return "serving", "every step holds", None


def record(status, state, detail, did, now, pid):
    """The status file's next content: the state, since when, the last events."""
    status = dict(status or {})
    events = list(status.get("events") or [])
    if status.get("state") != state:
        events.append({"at": now, "what": "%s: %s" % (state, detail)})
    if status.get("state") != state or status.get("detail") != detail:
        status.update(state=state, detail=detail, since=now)
    if did:
        events.append({"at": now, "what": did})
    status.update(events=events[-EVENTS_KEPT:], heartbeat=now, pid=pid)
    if state == "serving" and not status.get("serving_since"):
        status["serving_since"] = now
    if state != "serving":
        status.pop("serving_since", None)
    return status


def write_text(path, text, mode=0o644):
    """Write ``text`` to ``path`` whole or not at all (a reader never sees half a file), making its folder."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temp = path + ".tmp"
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(temp, mode)
    os.replace(temp, path)


def write_status(path, status):
    write_text(path, json.dumps(status, indent=2, sort_keys=True))


def main(argv=None, ops=None, sleep=time.sleep, rounds=None):
    """Run the supervisor of the plan file ``argv[0]`` until the file is gone (teardown)."""
    config_path = (argv or sys.argv[1:])[0]
    ops = ops or Ops()
    memo, status, shared, server = {}, None, {}, None
    while rounds is None or rounds > 0:
        rounds = None if rounds is None else rounds - 1
        try:
            config = json.loads(ops.read(config_path))
        except (OSError, ValueError):
            return 0  # removed by teardown.yml: nothing to bring back
        if status is None:  # this start of the supervisor (a boot): the last events are kept, the state is looked at anew
            try:
                events = json.loads(ops.read(config["status"])).get("events") or []
            except (OSError, ValueError, AttributeError):
                events = []
            status = {"events": events + [{"at": ops.now(), "what": "supervisor started"}], "started": ops.now()}
        server = serve_metrics(config, ops, shared, server)
        state, detail, did = look(config, ops, memo)
        shared["state"] = state
        problem = shared.pop("metrics_error", None)
        if problem and problem != memo.get("metrics_said"):  # a port taken: said once, tried again every look
            did = "; ".join(filter(None, [did, problem]))
        memo["metrics_said"] = problem
        status = record(status, state, detail, did, ops.now(), os.getpid())
        write_status(config["status"], status)
        sleep(config.get("interval", INTERVAL))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
