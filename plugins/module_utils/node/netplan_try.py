# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A ring's netplan applied the way ``netplan try`` does, without a terminal (fact 9).

``netplan try`` applies a configuration and puts the previous one back unless someone presses Enter in time. A
playbook has no one to press it, and must prove every link from both ends before it keeps anything, so the steps are
split: on every node, *try* (netplan's own generator validates the file; the previous file is kept; a rollback is
armed as a detached process that outlives the SSH session; then the file is applied), then, from the controller, the
links are pinged and each node must still answer; then *confirm* everywhere (the armed rollback is disarmed), or
*roll back* everywhere. A node that stops answering rolls back by itself when its timer fires.

The pending try lives in one folder of the node's state: ``pending`` (its presence arms the rollback), ``path``,
``backup`` (absent when there was no file), ``interfaces`` (the ports whose tried addresses are flushed) and
``apply`` (the command that applies netplan). ``ring-rollback`` reads them; the timer and an immediate rollback run
the same script. Pure: the module does the I/O.
"""

from __future__ import annotations

ROLLBACK_SCRIPT = """#!/bin/sh
# Written by dgx_spark.vllm (module ring_netplan): puts back the netplan a ring apply replaced, unless it was
# confirmed. ring-rollback PENDING_DIR [DELAY_SECONDS]. The timer armed by a try and an immediate rollback run it.
dir=$1
sleep "${2:-0}"
[ -e "$dir/pending" ] || exit 0
path=$(cat "$dir/path")
if [ -e "$dir/backup" ]; then cp "$dir/backup" "$path" && chmod 600 "$path"; else rm -f "$path"; fi
for ifname in $(cat "$dir/interfaces"); do ip addr flush dev "$ifname" 2>/dev/null; ip route flush dev "$ifname" 2>/dev/null; done
sh -c "$(cat "$dir/apply")"
rc=$?
rm -f "$dir/pending" "$dir/backup"
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) rolled back $path (apply exited $rc)" >> "$dir/rollbacks.log"
exit $rc
"""


def decide(current, content, pending):
    """What a try does: 'none' when the node runs ``content`` already and nothing is pending, else 'try'."""
    return "none" if current == content and not pending else "try"


def pending_files(folder, path, backup, interfaces, apply_command):
    """The files of a pending try: {file path: content}; ``backup`` None leaves out ``backup`` (no previous file)."""
    files = {folder + "/path": path + "\n", folder + "/interfaces": " ".join(interfaces) + "\n", folder + "/apply": apply_command + "\n"}
    if backup is not None:
        files[folder + "/backup"] = backup
    return files


def timer_argv(script, folder, seconds):
    """The rollback timer: the script after ``seconds`` (started in a session of its own, so it outlives SSH)."""
    return ["sh", script, folder, str(int(seconds))]


def detached(argv):
    """``argv`` started in a session of its own, its standard streams on /dev/null, and not waited for: the command
    returns at once, and what it started outlives the module and the SSH session (``setsid -f`` forks it)."""
    return ["sh", "-c", 'exec setsid -f "$@" </dev/null >/dev/null 2>&1', "sh"] + list(argv)


def is_our_timer(cmdline, script, folder):
    """A process's /proc/PID/cmdline (NUL-separated) is our timer for ``folder``: only that one is ever killed."""
    args = cmdline.rstrip("\0").split("\0")
    return len(args) == 4 and args[:3] == ["sh", script, folder] and args[3].isdigit()
