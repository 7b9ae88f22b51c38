#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_process
short_description: Run vLLM detached inside a container, in its own process group, idempotently
version_added: 1.0.0
description:
  - Starts a command (C(vllm serve ...)) inside a running container with C(docker exec), under C(setsid), so its
    PID is the process group of vLLM and everything it spawns; its output goes to a log file in the container.
  - Keeps the process group, the O(config_hash) and the command in a state file. A second run with the same hash
    and a live process changes nothing; a different hash restarts it.
  - Stops by signalling the whole process group (TERM, then KILL after O(stop_timeout)). Killing only the API
    server would leave C(VLLM::EngineCore) and its workers alive, holding the weights (on a GB10, memory gone
    until they die).
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  container:
    description: The running container to run vLLM in (the head's Ray container with the C(ray) backend).
    type: str
    required: true
  argv:
    description: The command and its arguments. Required with O(state=started) and O(state=restarted).
    type: list
    elements: str
  config_hash:
    description: Hash of the configuration; a running process with another hash is restarted.
    type: str
  state:
    description:
      - C(started), C(stopped) or C(restarted).
      - C(probed) changes nothing and reports RV(running), RV(healthy) and, when the process died, RV(log_tail);
        a wait loop (C(until)) on it stops as soon as vLLM dies instead of restarting it.
    type: str
    default: started
    choices: [started, stopped, restarted, probed]
  state_file:
    description: Path of the state file inside the container.
    type: str
    default: /dgx-spark/run/vllm.json
  log_file:
    description: Path of the log file inside the container (appended to).
    type: str
    default: /dgx-spark/logs/vllm.log
  stop_timeout:
    description: Seconds between TERM and KILL.
    type: int
    default: 60
  docker:
    description: Docker CLI.
    type: str
    default: docker
  health_url:
    description:
      - With O(state=started), also ask this URL (from the node; C(http://127.0.0.1:8000/health)) and return
        RV(healthy). Combined with C(until), this waits for the model to load and stops at once when vLLM dies,
        returning the end of its log.
    type: str
  wait:
    description:
      - With O(state=probed) and O(health_url), wait up to this many seconds for O(health_url) to answer 200 (asked every
        second), and stop waiting as soon as the process group dies (looked at every 5 s).
      - A loop of short calls (C(until), a few seconds each) shows how far the load is between them, from RV(progress).
    type: int
    default: 0
  log_lines:
    description: Lines of the log returned in RV(log_tail) when the process is not running.
    type: int
    default: 40
"""

EXAMPLES = r"""
- name: Serve inside the head's Ray container
  dgx_spark.vllm.vllm_process:
    container: dgx-spark-ray-spark1
    argv: [/dgx-spark/bin/vllm-serve, lukealonso/MiniMax-M2.5-NVFP4, --tensor-parallel-size, "2", --distributed-executor-backend, ray]
    config_hash: 3f2a9c0d1e4b5a67

- name: Stop it, engine and workers included
  dgx_spark.vllm.vllm_process:
    container: dgx-spark-ray-spark1
    state: stopped
"""

RETURN = r"""
pgid:
  description: Process group of the running vLLM (null when stopped).
  returned: always
  type: int
action:
  description: What was done, C(none), C(start), C(restart) or C(stop).
  returned: always
  type: str
killed:
  description: True when the process group did not stop on TERM within O(stop_timeout) and was killed.
  returned: always
  type: bool
running:
  description: True when the process group is alive after the action.
  returned: always
  type: bool
healthy:
  description: True when O(health_url) answered 200.
  returned: when O(health_url) is set
  type: bool
progress:
  description: With O(state=probed), while vLLM runs and O(health_url) does not answer yet, how far its load is, from its log.
  returned: when vLLM loads
  type: str
  sample: "loading the weights: 3 of 7 shards (42%)"
log_tail:
  description: The end of the log when the process is not running (why it died).
  returned: when the process is not running
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import Request

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import process_group as pg
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import run
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report.progress import load_progress
from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify.endpoint_check import tls_context

LOAD_LINES = 400  # of vLLM's log read for RV(progress): its load's lines are among the last ones while it loads
ALIVE_EVERY = 5  # seconds between liveness looks while waiting: each is a docker exec on a node that is loading a model
HEALTH_EVERY = 0.25  # a refused connection costs nothing: the launch's end is seen within a quarter second


class Process:
    """The vLLM process group in one container."""

    def __init__(self, module):
        self.module = module
        self.docker = module.params["docker"]
        self.container = module.params["container"]
        self.state_file = module.params["state_file"]

    def tail(self, lines=None):
        rc, out, err = run(self.module, pg.exec_argv(self.docker, self.container,
                                                     ["tail", "-n", str(lines or self.module.params["log_lines"]), self.module.params["log_file"]]))
        return out.splitlines() if rc == 0 else [(err or out).strip()]

    def healthy(self, url):
        # The process's one TLS context (endpoint_check.tls_context): open_url loads the CA certificates on every call,
        # plain HTTP and refused connections too (about 16 ms of CPU, four times a second, taken from the model's load).
        try:
            return Request(timeout=5, context=tls_context()).open("GET", url).getcode() == 200
        except Exception:  # pylint: disable=broad-except
            return False

    def read_state(self):
        rc, out, err = run(self.module, pg.read_argv(self.docker, self.container, self.state_file))
        if rc != 0 and "No such container" in err:
            self.module.fail_json(msg="container %s does not exist; start the Ray cluster first (playbooks/serve.yml)" % self.container)
        if rc != 0 and "is not running" in err:
            self.module.fail_json(msg="container %s is not running; start the Ray cluster first (playbooks/serve.yml)" % self.container)
        return pg.parse_state(out) if rc == 0 else None

    def wait_healthy(self, pgid, url, seconds):
        """True once ``url`` answers 200; False as soon as the process group is gone; its liveness at the deadline."""
        deadline = time.monotonic() + seconds
        looked = time.monotonic()
        while time.monotonic() < deadline:
            if self.healthy(url):
                return True
            if time.monotonic() - looked >= ALIVE_EVERY:
                if not self.alive(pgid):
                    return False
                looked = time.monotonic()
            time.sleep(HEALTH_EVERY)
        return self.alive(pgid)

    def alive(self, pgid):
        rc, out, err = run(self.module, pg.alive_argv(self.docker, self.container, pgid))
        return rc == 0

    def stop(self, state):
        killed = pg.stop_group(lambda argv: run(self.module, argv), self.docker, self.container, state["pgid"],
                               self.module.params["stop_timeout"])
        run(self.module, pg.remove_argv(self.docker, self.container, self.state_file))
        return killed

    def start(self, argv, config_hash):
        try:
            return pg.start_group(lambda args, data=None: run(self.module, args, data=data), self.docker, self.container, argv,
                                  config_hash, self.state_file, self.module.params["log_file"])
        except pg.StartError as exc:
            self.module.fail_json(msg=str(exc))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str", required=True),
            argv=dict(type="list", elements="str"),
            config_hash=dict(type="str"),
            state=dict(type="str", default="started", choices=["started", "stopped", "restarted", "probed"]),
            state_file=dict(type="str", default="/dgx-spark/run/vllm.json"),
            log_file=dict(type="str", default="/dgx-spark/logs/vllm.log"),
            stop_timeout=dict(type="int", default=60),
            docker=dict(type="str", default="docker"),
            health_url=dict(type="str"),
            log_lines=dict(type="int", default=40),
            wait=dict(type="int", default=0),
        ),
        required_if=[("state", "started", ["argv"]), ("state", "restarted", ["argv"])],
        supports_check_mode=True,
    )
    proc = Process(module)
    state = proc.read_state()
    running = bool(state) and proc.alive(state["pgid"])
    wanted = module.params["state"]
    if wanted == "probed":
        if running and module.params["wait"] > 0 and module.params["health_url"]:
            running = proc.wait_healthy(state["pgid"], module.params["health_url"], module.params["wait"])
        finish(module, proc, dict(changed=False, action="none", killed=False, pgid=(state or {}).get("pgid") if running else None),
               running)
    action = pg.decide(state, running, module.params["config_hash"], wanted)
    before = {"running": running, "config_hash": (state or {}).get("config_hash")}
    after = {"running": wanted != "stopped",
             "config_hash": module.params["config_hash"] if wanted != "stopped" else None}
    if action == "none":
        after = before
    result = dict(changed=action != "none", action=action, killed=False, pgid=(state or {}).get("pgid") if running else None,
                  diff=dict(before=before, after=after))
    if module.check_mode or action == "none":
        finish(module, proc, result, running and wanted != "stopped")
    if action in ("stop", "restart") and state:
        result["killed"] = proc.stop(state)
        result["pgid"] = None
    if action in ("start", "restart"):
        result["pgid"] = proc.start(module.params["argv"], module.params["config_hash"])
    finish(module, proc, result, action in ("start", "restart"))


def finish(module, proc, result, running):
    result["running"] = running
    if module.params["health_url"] and module.params["state"] != "stopped":
        result["healthy"] = running and proc.healthy(module.params["health_url"])
    if not running and module.params["state"] != "stopped":
        result["log_tail"] = proc.tail()
    elif module.params["state"] == "probed" and module.params["health_url"] and not result["healthy"]:
        result["progress"] = load_progress(proc.tail(LOAD_LINES)) or "vLLM runs; its log says nothing of its load yet"
    module.exit_json(**result)


if __name__ == "__main__":
    main()
