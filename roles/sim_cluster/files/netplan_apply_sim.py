# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated node's `netplan apply` (the sim inventory's fabric_netplan_apply_command).

A Spark applies netplan through systemd-networkd, which a simulated node does not run (its systemd leaves the
interfaces to Docker, which made them). This reads
the node's configuration with netplan's own parser (`netplan get`, every file of /etc/netplan merged, as `netplan
apply` reads it) and does what networkd does for an ethernet: its MTU, exactly its addresses, link up. An interface
that is not there yet (a cable not plugged) is skipped, as networkd waits for it. Interfaces no file names are left
as they are, as `netplan apply` leaves them. Prints what it set.

The apply_cuts trap (sim.yml) leaves an address in /run/dgx-spark-sim/apply-cuts: the next apply that configures a
port also routes that address (the controller's) out of that port, so the node stops answering over SSH, as an apply
that loses a node does. It acts once; the rollback of the ring's netplan flushes the port's routes.
"""

import json
import os
import subprocess
import sys

import yaml


def main():
    merged = yaml.safe_load(subprocess.run(["netplan", "get"], capture_output=True, text=True, check=True).stdout) or {}
    ethernets = ((merged.get("network") or {}).get("ethernets")) or {}
    present = {link["ifname"] for link in json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=True).stdout)}
    done = {}
    for name, config in sorted(ethernets.items()):
        if name not in present:
            continue
        if config.get("mtu"):
            subprocess.run(["ip", "link", "set", "dev", name, "mtu", str(config["mtu"])], check=True)
        subprocess.run(["ip", "addr", "flush", "dev", name], check=True)
        for address in config.get("addresses") or []:
            subprocess.run(["ip", "addr", "add", str(address), "dev", name], check=True)
        subprocess.run(["ip", "link", "set", "dev", name, "up"], check=True)
        done[name] = {"mtu": config.get("mtu"), "addresses": config.get("addresses") or []}
    cut = "/run/dgx-spark-sim/apply-cuts"
    if done and os.path.exists(cut):
        with open(cut, encoding="utf-8") as handle:
            stolen = handle.read().strip()
        os.unlink(cut)
        subprocess.run(["ip", "route", "replace", stolen + "/32", "dev", sorted(done)[0]], check=True)
        done["cut"] = stolen
    print(json.dumps(done))


if __name__ == "__main__":
    sys.exit(main())
