# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The supervisor's daemon: it runs on every node, started at boot by its systemd unit, and brings about, in order,
the steps its plan file names (module_utils/plan/boot.py plans them; read it first).

A step that waits (``tcp``, ``join``, ``health``) ends the look when it is not yet true; a step that acts
(``container``, ``driver``) checks the memory first and refuses to start when it does not fit, saying why in the
status file, which status.yml shows. A worker that reboots kills the head's vLLM (its rank is gone); the head's
supervisor starts vLLM again once the worker has joined. Playbooks that change the cluster hold the supervisor
(``hold`` file) while they work, so it never fights them; teardown removes it. A playbook that releases it sends it
SIGHUP: it looks at once instead of at its next look (module_utils/node/supervisor_control.py), and its figures
never stop answering.

With monitoring on (module_utils/plan/monitoring.py), the supervisor also serves the node's unified-memory figures and
its own state on the node's fabric address (module_utils/node/metrics.py), for the head's Prometheus.

``look`` decides one look from what ``Ops`` reads; ``main`` runs it on the node (stdlib only, with the modules of
this collection it imports copied beside it by the vllm_boot module). What the probe and the vllm_boot module read
of it is in module_utils/node/supervisor_state.py.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import command, completion, firewall_state, metrics
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import process_group as pg
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import write_text  # also supervisor.write_text to its callers
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import memory_fit
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import ray_state
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import unified_memory

INTERVAL = 5            # seconds between looks, unless the plan file says otherwise
EVENTS_KEPT = 30
WAITS = ("tcp", "join", "health")
# Starts of vLLM without the node reaching serving, before the supervisor gives up (a container is started again each
# time: its start is cheap and waits for the head).
MAX_STARTS = 3
GIB = 1024 ** 3


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

    def firewall(self, table, record):
        """The firewall table judged against the record of the one serve.yml loaded (node/firewall_state.py)."""
        return firewall_state.state(lambda argv: self.run(argv, timeout=20), table, record)

    def cuda(self):
        """CUDA's own free and total bytes through the node's driver, None without one, or {"unanswered_seconds"} where
        it gave no answer in time (probe/unified_memory.cuda_mem_info_bounded). Read only where nothing holds the GPU
        (compute_apps): a context is made and destroyed."""
        return unified_memory.cuda_mem_info_bounded()

    def compute_apps(self):
        """The processes nvidia-smi lists as holding the GPU (a rank of ours still there, another deployment's vLLM; none
        where it does not answer)."""
        rc, out, dummy = self.run(["nvidia-smi"] + unified_memory.APPS_QUERY, timeout=20)
        return unified_memory.parse_compute_apps(out) if rc == 0 else []

    def read(self, path):
        """A small regular file's text, never through a link (vLLM's state file is in a folder its container writes)."""
        text = command.read_small(path)
        if text is None:
            raise OSError("%s is absent, unreadable, a link or not a small regular file" % path)
        return text

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
        return unified_memory.summarize(unified_memory.parse_meminfo(self.read("/proc/meminfo")), compute_apps=self.compute_apps())


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
    # What only CUDA sees held (seed 002: nvidia-smi 0 MB used, free -g plenty), as the plan judges it (memory_fit.pinned)
    # Read where nothing holds the GPU, as the probe reads it (probe/node_read.py): not beside a rank still there.
    held = memory_fit.pinned("this node", 0, need["unaccounted_limit_bytes"], facts["mem_free_bytes"],
                             None if ops.compute_apps() else ops.cuda())
    if held:
        return held[1]
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
    if kind == "firewall":
        found = ops.firewall(step["table"], step["record"])
        return found == firewall_state.LOADED, firewall_state.why(step["table"], found, step["unit"])
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
        if "asked_for" in memo and memo["asked_for"] == (memo.get("pgid"), memo.get("started_at")):
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
            memo["started_at"] = (state or {}).get("started_at")
    for step in config["steps"]:
        done, missing = check(step, ops, memo)
        if done:
            continue
        if step["kind"] == "completion":
            if done is None:
                memo["asked_for"] = (memo.get("pgid"), memo.get("started_at"))  # a new container may reuse the number
                vouched = completion.vouched(config, ops, memo)
                memo["completion_ok"], memo["completion_detail"] = (True, vouched) if vouched else completion.ask(step, ops)
                what = "completion %s: %s" % ("passed" if memo["completion_ok"] else "FAILED", memo["completion_detail"])
                if memo["completion_ok"]:
                    memo["starts"] = {}
                return ("serving" if memo["completion_ok"] else "failed"), what, what
            return "failed", "completion: " + missing, None
        if step["kind"] == "firewall":  # fail closed: nothing starts while the ports may answer anyone
            return "refused", "not starting Ray or vLLM: " + missing, None
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


def write_status(path, status):
    write_text(path, json.dumps(status, indent=2, sort_keys=True))


def napper():
    """A sleep that SIGHUP ends early: the signal writes to a pipe the sleep waits on (signal.set_wakeup_fd), so a
    release is looked at at once, whatever the daemon was doing when it came."""
    readable, writable = os.pipe()
    os.set_blocking(writable, False)
    signal.set_wakeup_fd(writable)
    signal.signal(signal.SIGHUP, lambda signum, frame: None)

    def nap(seconds):
        if select.select([readable], [], [], seconds)[0]:
            os.read(readable, 4096)
    return nap


def main(argv=None, ops=None, sleep=None, rounds=None):
    """Run the supervisor of the plan file ``argv[0]`` until the file is gone (teardown)."""
    config_path = (argv or sys.argv[1:])[0]
    ops = ops or Ops()
    sleep = sleep or napper()
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
            # Its PID first, before the first look (which may ask a completion and the canary): whoever started it
            # knows at once that it runs.
            write_status(config["status"], dict(status, state="starting", detail="the first look", since=ops.now(),
                                                heartbeat=ops.now(), pid=os.getpid()))
        server = metrics.serve_metrics(config, ops, shared, server)
        state, detail, did = look(config, ops, memo)
        shared["state"] = state
        problem = "; ".join(filter(None, [shared.pop("metrics_error", None), metrics.write_textfile(config, ops, shared, memo)])) or None
        if problem and problem != memo.get("metrics_said"):  # a port taken: said once, tried again every look
            did = "; ".join(filter(None, [did, problem]))
        memo["metrics_said"] = problem
        status = record(status, state, detail, did, ops.now(), os.getpid())
        write_status(config["status"], status)
        sleep(config.get("interval", INTERVAL))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
