# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The supervisor as a node's root controls it (module_utils/plan/boot.py plans it, module_utils/node/supervisor.py is the daemon): started, stopped and
removed under systemd (its unit) or without it (a detached process that records its PID in its status file). Used by
the vllm_boot module and by node_teardown, which removes it first so that it starts nothing again. ``run(argv)``
returns (rc, stdout, stderr); ``fail(msg=...)`` ends the module."""

from __future__ import annotations

import os
import time

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import supervisor_state
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.netplan_try import detached
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import boot


class Supervisor:
    def __init__(self, plan, run, fail):
        self.plan, self.run, self.fail = plan, run, fail
        self.where = plan["paths"]
        self.systemd = os.path.isdir("/run/systemd/system")

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

    def running(self):
        return supervisor_state.supervisor_running(self.where, self.plan["unit_name"], self.run)

    def installed(self):
        """The supervisor's files on the node, and whether its code folder is there."""
        where = self.where
        present = [p for p in (where["wants"], where["unit"], where["config"], where["status"], where["hold"]) if os.path.lexists(p)]
        return present, os.path.isdir(where["lib"])

    def remove(self):
        """Stop it, then remove every file it wrote, and only those. Returns whether anything was there."""
        present, lib = self.installed()
        if not present and not lib:
            return False
        self.stop()
        for path in present:
            os.remove(path)
        for root, dummy, files in os.walk(self.where["lib"], topdown=False):
            for name in files:
                os.remove(os.path.join(root, name))
            os.rmdir(root)
        folder = os.path.dirname(self.where["config"])
        if os.path.isdir(folder) and not os.listdir(folder):  # the folder it made, unless something else is in it
            os.rmdir(folder)
        if self.systemd:
            self.systemctl("daemon-reload")
        return True
