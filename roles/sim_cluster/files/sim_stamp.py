# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the simulated cluster stands exactly as the last sim.yml run left it, so that a run asking for nothing else
(no power cycle, the same node traps) only injects and takes back its traps (tasks/present.yml). The tests call sim.yml
between scenarios for their traps: a minute each when every image, folder, key and node is checked again.

    sim_stamp.py check STAMP [--keep] < inputs.json
                                             prints {"up": bool, "why": str, "pids": {node: pid}, "traps": {...}} and
                                             removes STAMP (--keep: a run in check mode): a run that fails before it
                                             writes it again leaves none, so the next run checks everything
    sim_stamp.py write STAMP < inputs.json   records what stands now (after a run that succeeded)

inputs.json: {"role": the role's folder, "inventory": the inventory's sources, "nodes": [node], "hub": its container,
"sockets": {node: its daemon's socket}, "head": node, "images": {"here": [reference], "head": [reference]} (write only),
"traps": sim_traps, "reboot": [node]}.

What stands is compared, never assumed: the digest of the role's files, the inventory's files and this machine's apt
and pip sources (what the images are built from); each node's and the hub's container (its ID and start time: a node
restarted lost its daemon); each node's daemon answering; the images here and on the head (their IDs). The node traps
that only a full run takes back (gid_drift's GID index, no_infiniband's devices, a ring's cables) must be the same.
"""

import hashlib
import json
import os
import subprocess
import sys

# Traps a full run takes back (node.yml writes the GID index and the devices, cables.yml plugs every cable): a run
# with other ones than the last can not skip it. A cable swap is a toggle: only none last time and none now.
NODE_TRAPS = ("gid_drift", "no_infiniband", "link_down")
TOGGLES = ("cable_swap",)
SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d", "/etc/pip.conf", "~/.config/pip/pip.conf", "~/.pip/pip.conf")


def files_digest(paths, skip=(".artifacts", ".secrets", "__pycache__")):
    digest = hashlib.sha256()
    for top in paths:
        top = os.path.expanduser(top)
        walked = [(os.path.dirname(top), [], [os.path.basename(top)])] if os.path.isfile(top) else sorted(os.walk(top))
        for folder, dirs, names in walked:
            dirs[:] = sorted(d for d in dirs if d not in skip)
            for name in sorted(names):
                path = os.path.join(folder, name)
                if any(part in skip for part in path.split(os.sep)):
                    continue
                digest.update(path.encode() + b"\0")
                with open(path, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def digest_of(inputs):
    extra = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    return hashlib.sha256(json.dumps([files_digest([inputs["role"]] + list(inputs["inventory"])), files_digest(SOURCES),
                                      extra, inputs["nodes"], inputs["hub"], inputs["sockets"]], sort_keys=True).encode()).hexdigest()


def inspect(argv, asked):
    """``docker ... inspect`` of the objects ``asked``: {name: object} for those that exist (named by the container's
    name or an image's tags)."""
    proc = subprocess.run(argv + list(asked), capture_output=True, text=True, check=False, timeout=60)
    try:
        found = json.loads(proc.stdout or "[]") or []
    except ValueError:
        return {}
    named = {}
    for item in found:
        for name in [item.get("Name", "").lstrip("/")] + (item.get("RepoTags") or []):
            if name in asked:
                named[name] = item
    return named


def containers(names):
    found = inspect(["docker", "container", "inspect"], names)
    return {name: [c["Id"], c["State"]["StartedAt"], c["State"]["Pid"]] for name, c in found.items() if c["State"].get("Running")}


def images(references, socket=None):
    if not references:
        return {}
    host = ["-H", "unix://" + socket] if socket else []
    return {name: image["Id"] for name, image in inspect(["docker"] + host + ["image", "inspect"], references).items()}


def answers(socket):
    return subprocess.run(["docker", "-H", "unix://" + socket, "version", "--format", "{{.Server.Version}}"],
                          capture_output=True, check=False, timeout=30).returncode == 0


def node_traps(traps):
    return {k: traps.get(k) for k in NODE_TRAPS if traps.get(k)}


def standing(inputs):
    """What stands now: the containers, the images (here and on the head) and the node traps in effect."""
    head_socket = inputs["sockets"][inputs["head"]]
    return {"digest": digest_of(inputs), "containers": containers(inputs["nodes"] + [inputs["hub"]]),
            "images": {"here": images([i for i in inputs["images"]["here"] if i]), "head": images(inputs["images"]["head"], head_socket)},
            "traps": inputs.get("traps") or {}}


def check(path, inputs, keep=False):
    try:
        with open(path, encoding="utf-8") as handle:
            last = json.load(handle)
        if not keep:
            os.unlink(path)
    except (OSError, ValueError):
        return {"up": False, "why": "no record of a run that succeeded", "traps": None}
    why = None
    now_traps = inputs.get("traps") or {}
    if inputs.get("reboot"):
        why = "nodes to power-cycle"
    elif node_traps(now_traps) != node_traps(last.get("traps") or {}) or any(now_traps.get(k) or last["traps"].get(k) for k in TOGGLES):
        why = "node traps change"
    elif digest_of(inputs) != last.get("digest"):
        why = "the role, the inventory or the build sources changed"
    else:
        running = containers(inputs["nodes"] + [inputs["hub"]])
        if {n: c[:2] for n, c in running.items()} != {n: c[:2] for n, c in last["containers"].items()}:
            why = "a node or the hub was restarted, stopped or removed"
        elif images(list(last["images"]["here"])) != last["images"]["here"]:
            why = "an image here changed"
        elif images(list(last["images"]["head"]), inputs["sockets"][inputs["head"]]) != last["images"]["head"]:
            why = "an image on the head changed"
        elif not all(answers(inputs["sockets"][n]) for n in inputs["nodes"]):
            why = "a node's Docker daemon does not answer"
    if why:
        return {"up": False, "why": why, "traps": None}
    return {"up": True, "why": "as the last run left it", "traps": last.get("traps") or {},
            "pids": {n: c[2] for n, c in running.items() if n in inputs["nodes"]}}


def main(argv):
    if len(argv) not in (3, 4) or argv[1] not in ("check", "write"):
        sys.exit(__doc__)
    inputs = json.load(sys.stdin)
    if argv[1] == "check":
        print(json.dumps(check(argv[2], inputs, keep=argv[3:] == ["--keep"])))
        return
    os.makedirs(os.path.dirname(argv[2]), exist_ok=True)
    with open(argv[2] + ".new", "w", encoding="utf-8") as handle:
        json.dump(standing(inputs), handle)
    os.rename(argv[2] + ".new", argv[2])
    print(json.dumps({"changed": False}))


if __name__ == "__main__":
    main(sys.argv)
