# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A detached vLLM process inside a container, in its own process group (fact 3).

Killing vLLM's API server alone leaves ``VLLM::EngineCore`` and its workers alive, holding the
weights; on a GB10 that memory is gone until they die. The process is therefore started under
``setsid`` (its PID is its process group ID) and stopped by signalling the whole group: TERM, a
grace period, then KILL. Its state (process group, config hash, argv) is kept in a JSON file in
the container so that a second run can tell "already running this configuration" from "changed".

Only argv lists are built here; the one ``sh -c`` script is a constant and takes its data as
positional arguments, never interpolated.
"""

from __future__ import annotations

import json
import time

# $0: pid file, $1: log file, then the command. setsid makes sh a session and group leader; exec
# keeps its PID, so the PID written is the process group of vLLM and everything it spawns.
LAUNCH_SCRIPT = 'echo $$ > "$0"; log="$1"; shift; exec "$@" >> "$log" 2>&1'


def exec_argv(docker, container, argv, detach=False, interactive=False):
    head = [docker, "exec"]
    if detach:
        head.append("-d")
    if interactive:
        head.append("-i")
    return head + [container] + list(argv)


def launch_argv(docker, container, argv, pid_file, log_file):
    return exec_argv(docker, container, ["setsid", "sh", "-c", LAUNCH_SCRIPT, pid_file, log_file] + list(argv), detach=True)


def alive_argv(docker, container, pgid):
    return exec_argv(docker, container, ["kill", "-0", "--", "-%d" % int(pgid)])


def signal_argv(docker, container, pgid, signal):
    return exec_argv(docker, container, ["kill", "-%s" % signal, "--", "-%d" % int(pgid)])


def read_argv(docker, container, path):
    return exec_argv(docker, container, ["cat", path])


def write_argv(docker, container, path):
    """Writes stdin to ``path`` (the data is given to run_command, never to a shell)."""
    return exec_argv(docker, container, ["sh", "-c", 'mkdir -p "$(dirname "$0")" && cat > "$0"', path], interactive=True)


def remove_argv(docker, container, *paths):
    return exec_argv(docker, container, ["rm", "-f"] + list(paths))


def parse_state(text):
    """The state file's content, or None when it is missing or unreadable."""
    try:
        state = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("pgid"), int):
        return None
    return state


def decide(state, running, config_hash, wanted):
    """What to do: 'none', 'start', 'restart' or 'stop'."""
    if wanted == "stopped":
        return "stop" if running else "none"
    if wanted == "restarted":
        return "restart" if running else "start"
    if not running:
        return "start"
    if config_hash and (state or {}).get("config_hash") != config_hash:
        return "restart"
    return "none"


def stop_group(run, docker, container, pgid, timeout, sleep=time.sleep, clock=time.monotonic):
    """TERM the process group, wait up to ``timeout`` seconds for it to go, then KILL it. ``run(argv)`` returns
    (rc, stdout, stderr). Returns True when it had to be killed."""
    def alive():
        return run(alive_argv(docker, container, pgid))[0] == 0

    run(signal_argv(docker, container, pgid, "TERM"))
    deadline = clock() + timeout
    while alive():  # each look is a docker exec: asked once per poll, never twice at the end
        if clock() >= deadline:
            run(signal_argv(docker, container, pgid, "KILL"))
            sleep(1)
            return True
        sleep(0.2)
    return False


class StartError(Exception):
    """vLLM could not be started; the message says where to look."""


def start_group(run, docker, container, argv, config_hash, state_file, log_file, sleep=time.sleep, clock=time.time):
    """Start ``argv`` detached in ``container`` as a process group and record it in ``state_file``: what the
    vllm_process module does, and what the boot supervisor does when a node comes back (module_utils/plan/boot.py).
    ``run(argv, data=None)`` returns (rc, stdout, stderr). Returns the process group; raises StartError."""
    pid_file = state_file + ".pid"
    run(remove_argv(docker, container, pid_file))
    rc, out, err = run(launch_argv(docker, container, argv, pid_file, log_file))
    if rc != 0:
        raise StartError("could not start vLLM in %s: %s" % (container, (err or out).strip()))
    pgid = None
    for dummy in range(50):
        rc, out, err = run(read_argv(docker, container, pid_file))
        if rc == 0 and out.strip().isdigit():
            pgid = int(out.strip())
            break
        sleep(0.2)
    if pgid is None:
        raise StartError("vLLM did not start in %s (no pid file %s); see %s there" % (container, pid_file, log_file))
    state = {"pgid": pgid, "config_hash": config_hash, "argv": list(argv), "started_at": clock()}
    rc, out, err = run(write_argv(docker, container, state_file), data=json.dumps(state))
    if rc != 0:
        raise StartError("could not write %s in %s: %s" % (state_file, container, (err or out).strip()))
    return pgid
