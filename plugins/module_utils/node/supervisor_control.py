# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The supervisor as a node's root controls it (module_utils/plan/boot.py plans it, module_utils/node/supervisor.py is
the daemon): installed held or released, started, stopped and removed, under systemd (its unit) or without it (a
detached process that records its PID in its status file). Used by the vllm_boot module and by node_teardown, which
removes it first so that it starts nothing again. ``run(argv)`` returns (rc, stdout, stderr); ``fail(msg=...)`` ends
the module.

A playbook that changes the cluster installs the plan's supervisor held before it changes anything: the hold is
written first, so that a supervisor already running never acts on a plan not verified yet, and the held supervisor
serves the node's figures from then on. Once the deployment is verified, the release removes the hold and wakes it
(SIGHUP: it looks at once); it is not restarted, so its figures never stop answering. The release also names the vLLM
the playbook verified (its process group and start time, in the ``verified`` file) when the playbook says it did
(``verified``: this run launched it and its endpoint check and canary passed): the supervisor does not ask that one
its completion and canary again (module_utils/node/completion.py). A hold removes the file; a vLLM the supervisor
starts itself after a boot, or one no run verified, it asks."""

from __future__ import annotations

import json
import os
import signal
import time

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import process_group, supervisor, supervisor_state
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import read_small, read_text, systemd_runs
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.netplan_try import detached
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import boot


class Supervisor:
    def __init__(self, plan, run, fail):
        self.plan, self.run, self.fail = plan, run, fail
        self.where = plan["paths"]
        self.systemd = systemd_runs()

    def status(self):
        return supervisor_state.read_status(self.where)

    def pid(self):
        return supervisor_state.supervisor_pid(self.status(), self.where["config"])

    def systemctl(self, *args):
        rc, out, err = self.run(["systemctl"] + list(args))
        if rc != 0 and args[0] != "stop":
            self.fail(msg="systemctl %s failed: %s" % (" ".join(args), (err or out).strip()))

    def start(self, restart):
        if self.systemd:
            self.systemctl("daemon-reload")
            self.systemctl("restart" if restart else "start", self.plan["unit_name"])
            return
        if restart:
            self.stop()
        rc, out, err = self.run(detached(boot.command(self.where)))
        if rc != 0:
            self.fail(msg="could not start the supervisor: %s" % (err or out).strip())
        for dummy in range(50):  # its first look writes its PID
            if self.pid():
                return
            time.sleep(0.2)

    def stop(self):
        if self.systemd:
            self.systemctl("stop", self.plan["unit_name"])
            return
        pid = self.pid()
        if pid:
            os.kill(int(pid), 15)
            for dummy in range(50):
                if not self.pid():
                    return
                time.sleep(0.1)

    def wake(self):
        """Make it look at once (a release): SIGHUP ends its wait between looks."""
        pid = self.pid()
        if pid:
            try:
                os.kill(int(pid), signal.SIGHUP)
            except OSError:
                pass

    def hold_only(self, holder, check):
        """Hold the supervisor the node runs, whatever its plan, without installing anything: what a playbook that
        knows the node's paths but no profile can do (recover.yml stopping the ranks; serve.yml then installs the
        plan and releases it). Writing a plan it does not have would leave the supervisor none."""
        where = self.where
        if holder is None:
            self.fail(msg="vllm_boot: this boot names the supervisor's paths only (no plan to install); only state=held "
                          "can use it. Give the plan's nodes.<host>.boot")
        held = os.path.exists(where["hold"])
        result = {"changed": not held, "written": [] if held else [where["hold"]],
                  "diff": {"before": {"held": held}, "after": {"held": True}}}
        if not held and not check:
            self.write_hold(holder)
        return result

    def write_hold(self, holder):
        where = self.where
        supervisor.write_text(where["hold"], "%s since %s\n" % (holder, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
        if where.get("verified") and os.path.lexists(where["verified"]):
            os.remove(where["verified"])  # what a release vouched for is this run's to say again

    def install(self, holder=None, check=False, verified=False):
        """Install this plan's supervisor where the node's copy differs and run it as the plan says (started when
        enabled, stopped when not). With ``holder`` it is held: the hold first (an existing hold is kept), then the
        files, then the start. Without, it is released: the hold goes and it is woken, not restarted. Returns what
        the module reports: changed, written, diff."""
        where, enabled = self.where, bool(self.plan.get("enabled"))
        if self.plan.get("config") is None:  # known by its paths only (recover.yml's stop of the ranks): held, no more
            return self.hold_only(holder, check)
        linked, held, running = os.path.islink(where["wants"]), os.path.exists(where["hold"]), self.running()
        files = boot.files(self.plan)  # boot imports every module it copies, so AnsiballZ carries them all
        stale = [(path, content, mode) for path, content, mode in files if read_text(path) != content]
        strays = self.strays()
        hold = holder is not None
        relink = enabled != linked
        legacy = running and bool(where.get("legacy_status")) and os.path.lexists(where["legacy_status"]) and not os.path.exists(where["status"])
        # Started again where its code or its unit changed: the unit's sandbox (its ReadWritePaths, node_exporter's folder
        # among them) and ordering take effect only so.
        start = enabled and (not running or legacy or bool(strays)
                             or any(path.endswith(".py") or path == where["unit"] for path, dummy, dummy2 in stale))
        stop = running and not enabled
        result = {"changed": bool(stale) or relink or hold != held or start or stop or legacy or bool(strays),
                  "written": [path for path, dummy, dummy2 in stale], "removed": strays,
                  "diff": {"before": {"plan": read_text(where["config"]), "at_boot": linked, "held": held},
                           "after": {"plan": files[0][1], "at_boot": enabled, "held": hold or held}}}
        if not result["changed"] or check:
            return result
        before = self.textfile()  # the node_exporter file the plan on the node writes, read before this plan replaces it
        if hold and not held:
            self.write_hold(holder)
        for path in strays:
            os.unlink(path)
        for path, content, mode in stale:
            supervisor.write_text(path, content, mode)
        os.makedirs(os.path.dirname(where["status"]), mode=0o755, exist_ok=True)  # the one folder its unit lets it write
        if relink and self.systemd:  # systemd links it as the unit's [Install] says (multi-user.target.wants)
            self.systemctl("enable" if enabled else "disable", self.plan["unit_name"])
        elif relink and enabled:  # a node without systemd: the same link, by hand
            os.makedirs(os.path.dirname(where["wants"]), exist_ok=True)
            os.symlink(where["unit"], where["wants"])
        elif relink:
            os.remove(where["wants"])
        if held and not hold:
            if verified:
                self.vouch(read_text(where["hold"]))
            os.remove(where["hold"])
        if stop:
            self.stop()
            if os.path.exists(where["status"]):  # its last look is history now; status.yml must not show it as current
                supervisor.write_status(where["status"], {"state": "off", "detail": "vllm_boot_start is false",
                                                          "events": (self.status() or {}).get("events") or []})
        elif start:
            self.start(restart=running)
        elif held and not hold:
            self.wake()
        if before and before != self.textfile():  # the figures no longer go there: node_exporter must not keep exporting them
            remove_file(before)  # after the restart the change of its unit brings: the old one wrote there until then
        legacy_status = where.get("legacy_status")
        if legacy_status and os.path.lexists(legacy_status) and not supervisor_state.supervisor_pid(
                supervisor_state.read_status({"status": legacy_status}), where["config"]):
            os.remove(legacy_status)  # the supervisor an earlier release started, which wrote it, is gone
        return result

    def vouch(self, hold):
        """At a release: the vLLM that runs now is the one the holder (``hold``: the hold file's text) verified."""
        for step in self.plan["config"]["steps"]:
            if step["kind"] == "driver" and self.where.get("verified"):
                state = process_group.parse_state(read_small(step["state_file_host"]))
                if state:
                    supervisor.write_text(self.where["verified"], json.dumps(
                        {"pgid": state["pgid"], "started_at": state.get("started_at"),
                         "by": (hold or "").split(" since ")[0].strip() or "a playbook"}) + "\n")

    def strays(self):
        """What is in its code folder that is not its copy of the code (the supervisor imports from that folder as root:
        a file an earlier release's containers could write there, a ``sitecustomize.py`` or a module named as one of
        the standard library's, would run). Links are listed, never followed."""
        lib, ours = self.where["lib"], set(boot.lib_paths(self.where))
        if os.path.islink(lib):
            return [lib]
        found = []
        for root, folders, names in os.walk(lib):  # does not descend into a link to a folder
            found += [os.path.join(root, n) for n in names + [f for f in folders if os.path.islink(os.path.join(root, f))]]
        return sorted(path for path in found if path not in ours)

    def running(self):
        return supervisor_state.supervisor_running(self.where, self.plan["unit_name"], self.run)

    def installed(self):
        """The supervisor's files on the node, and whether its code folder is there."""
        where = self.where
        present = [p for p in (where["wants"], where["unit"], where["config"], where["status"], where["hold"], where.get("verified"),
                               where.get("legacy_status")) if p and os.path.lexists(p)]
        return present, os.path.isdir(where["lib"])

    def textfile(self):
        """The node_exporter file the supervisor's plan on the node writes (its ``textfile``), or None."""
        try:
            return ((json.loads(read_text(self.where["config"]) or "{}").get("textfile")) or {}).get("path")
        except (ValueError, AttributeError):
            return None

    def remove(self, reload=True):
        """Stop it, then remove every file it wrote, and only those. Returns whether anything was there. Under systemd,
        systemd is reloaded unless the caller does it (``reload``: false, node_teardown while vLLM stops)."""
        present, lib = self.installed()
        if not present and not lib:
            return False
        self.stop()
        remove_file(self.textfile())  # the figures it wrote for a node_exporter, which must not outlive it
        for path in present:
            os.remove(path)
        for root, dummy, files in os.walk(self.where["lib"], topdown=False):
            for name in files:
                os.remove(os.path.join(root, name))
            os.rmdir(root)
        for folder in (os.path.dirname(self.where["status"]), os.path.dirname(self.where["config"])):
            if os.path.isdir(folder) and not os.listdir(folder):  # the folders it made, unless something else is in them
                os.rmdir(folder)
        if self.systemd and reload:
            self.systemctl("daemon-reload")
        return True


def remove_file(path):
    """Remove ``path`` where it is (a link as the link)."""
    if path and os.path.lexists(path) and not os.path.isdir(path):
        os.unlink(path)
