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

# One docker exec starts vLLM and records it. $0: the state file, $1: the log file, then the command; the rest of the
# state's JSON (all but its process group) comes on stdin. The command runs in the background under setsid: a
# non-interactive sh starts it in the shell's own process group, so setsid makes it a session and group leader without
# a fork, and its PID ($!) is the process group of vLLM and everything it spawns. Its output, setsid's included, goes
# to the log, never to the exec's pipes, so the exec returns at once; it prints the process group once the state file
# holds it. A container without setsid is refused before anything starts; a state file that cannot be written stops
# what was started (nothing runs that the state file does not name). A vLLM that dies at once is recorded all the
# same: the wait that follows (vllm_process, the supervisor) finds it gone and shows the end of its log. (dash's kill
# takes a group as -N and no "--".)
LAUNCH_SCRIPT = ('state="$0"; log="$1"; shift; '
                 'command -v setsid > /dev/null || { echo "no setsid in this container" >&2; exit 1; }; '
                 'mkdir -p -- "$(dirname -- "$state")" || exit 1; '
                 'setsid sh -c \'log="$0"; exec "$@" >> "$log" 2>&1\' "$log" "$@" < /dev/null >> "$log" 2>&1 & '
                 'pgid=$!; { printf \'{"pgid": %d, \' "$pgid"; cat; } > "$state" '
                 '|| { kill -KILL -"$pgid" 2>/dev/null || kill -KILL "$pgid"; '
                 'echo "its state could not be written to $state; it was stopped" >&2; exit 1; }; '
                 'echo "$pgid"')


def exec_argv(docker, container, argv, detach=False, interactive=False):
    head = [docker, "exec"]
    if detach:
        head.append("-d")
    if interactive:
        head.append("-i")
    return head + [container] + list(argv)


def launch_argv(docker, container, argv, state_file, log_file):
    """Start ``argv`` and write its state file (the rest of the state's JSON on stdin): LAUNCH_SCRIPT."""
    return exec_argv(docker, container, ["sh", "-c", LAUNCH_SCRIPT, state_file, log_file] + list(argv), interactive=True)


# One docker exec stops a process group. $0: the group, $1: the seconds it gets after TERM; then KILL, a second for the
# kernel to take its memory back, and "killed" printed. A group already gone is left at once.
STOP_SCRIPT = ('pg="$0"; looks=$(($1 * 10)); kill -TERM -"$pg" 2> /dev/null || exit 0; '
               'while kill -0 -"$pg" 2> /dev/null; do '
               'if [ "$looks" -le 0 ]; then kill -KILL -"$pg" 2> /dev/null; sleep 1; echo killed; exit 0; fi; '
               'looks=$((looks - 1)); sleep 0.1; done')


def stop_argv(docker, container, pgid, timeout):
    return exec_argv(docker, container, ["sh", "-c", STOP_SCRIPT, str(int(pgid)), str(int(timeout))])


def alive_argv(docker, container, pgid):
    return exec_argv(docker, container, ["kill", "-0", "--", "-%d" % int(pgid)])


def read_argv(docker, container, path):
    return exec_argv(docker, container, ["cat", path])


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


def stop_group(run, docker, container, pgid, timeout):
    """TERM the process group, wait up to ``timeout`` seconds for it to go, then KILL it: STOP_SCRIPT, in one docker exec
    (a look every 0.1 s inside the container, where a look from the node is a docker exec of its own). ``run(argv)``
    returns (rc, stdout, stderr). Returns True when it had to be killed."""
    rc, out, dummy = run(stop_argv(docker, container, pgid, timeout))
    return rc == 0 and out.strip() == "killed"


class StartError(Exception):
    """vLLM could not be started; the message says where to look."""


def start_group(run, docker, container, argv, config_hash, state_file, log_file, clock=time.time):
    """Start ``argv`` detached in ``container`` as a process group and record it in ``state_file``, in one docker exec:
    what the vllm_process module does, and what the boot supervisor does when a node comes back
    (module_utils/node/supervisor.py). ``run(argv, data=None)`` returns (rc, stdout, stderr). Returns the process group;
    raises StartError."""
    rest = json.dumps({"config_hash": config_hash, "argv": list(argv), "started_at": clock()})
    rc, out, err = run(launch_argv(docker, container, argv, state_file, log_file), data=rest[1:])
    if rc != 0 or not out.strip().isdigit():
        raise StartError("could not start vLLM in %s: %s; see %s there" % (container, (err or out).strip() or "no process group", log_file))
    return int(out.strip())
