# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the simulated cluster stands exactly as the last sim.yml run left it, so that a run asking for nothing else
(no power cycle, the same node traps) only injects and takes back its traps (tasks/present.yml). The tests call sim.yml
between scenarios for their traps: a minute each when every image, folder, key and node is checked again.

    sim_stamp.py check STAMP [--keep] < inputs.json
        prints {"up": bool, "images_up": bool, "why": str, "recipe": digest, "pids": {node: pid}, "traps": {...},
        "images": {...}, "named": {...}} and removes STAMP (--keep: a run in check mode): a run that fails before it writes it again leaves none, so the
        next run checks everything. Anything it cannot read makes it answer "not up", never fail.
    sim_stamp.py write STAMP < inputs.json
        records what stands now (after a run that succeeded), with the recipe digest its check computed

inputs.json: {"recipe": [files and folders the cluster is made from], "settings": {what the run was asked, resolved},
"state": [files and folders a full run writes: keys, known hosts, sysfs, devices], "nodes": [node], "head": node,
"hub": its container (or a list: the hub and the image registry), "sockets": {node: its daemon's socket}, "traps":
sim_traps, "reboot": [node]; for write also
"digest": the check's recipe digest, "images": {"here": [reference], "head": [reference]}, "named": {what the
nodes' steps need of the images' steps, such as the node image's name}}.

What stands is compared, never assumed: the digest of the recipe (the role's files and the others it builds from, the
inventory's files, this machine's apt and pip sources, the variables the run resolved); the digest of what a full run
writes on this machine for the nodes (the keys, the known hosts, the simulated sysfs and devices), as the last run
left it; each node's and the hub's container (its ID and start time: a node restarted lost its daemon); each node's
daemon answering; the images here and on the head (their IDs). The node traps only a full run takes back (gid_drift's
GID index, no_infiniband's devices, a ring's cables) must be the same. When only the nodes differ (a power cycle, other
node traps, a node restarted or its files changed), the images, the models and the hub are not checked again.
"""

import hashlib
import json
import os
import stat
import subprocess
import sys

# Traps a full run takes back (node.yml writes the GID index and the devices, cables.yml plugs every cable): a run
# with other ones than the last can not skip it. A cable swap is a toggle: only none last time and none now.
NODE_TRAPS = ("gid_drift", "no_infiniband", "link_down")
TOGGLES = ("cable_swap",)
SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d", "/etc/pip.conf", "~/.config/pip/pip.conf", "~/.pip/pip.conf")
SKIP = (".artifacts", ".secrets", "__pycache__")  # in the recipe's folders: what runs write, not what they are made from
CHUNK = 1 << 20


def entry(digest, path, shown):
    """One file system entry into ``digest``: a regular file by its content, a link by its target, anything else (a
    device, a socket) by its kind and device number; never opened unless regular."""
    try:
        found = os.lstat(path)
    except OSError as exc:
        digest.update(("%s ? %s\0" % (shown, exc.strerror)).encode())
        return
    if stat.S_ISLNK(found.st_mode):
        digest.update(("%s -> %s\0" % (shown, os.readlink(path))).encode())
    elif stat.S_ISREG(found.st_mode):
        digest.update(("%s %o\0" % (shown, stat.S_IMODE(found.st_mode))).encode())
        try:
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(CHUNK), b""):
                    digest.update(block)
        except OSError as exc:
            digest.update(("? %s" % exc.strerror).encode())
    else:
        digest.update(("%s %o %d\0" % (shown, found.st_mode, found.st_rdev)).encode())


def files_digest(paths, skip=()):
    """The digest of every entry under ``paths`` (files or folders, followed through linked folders once each), named
    relative to their top; names in ``skip`` are left out below a top."""
    digest = hashlib.sha256()
    for top in paths:
        top = os.path.expanduser(top)
        digest.update(("[%s]\0" % top).encode())
        if not os.path.isdir(top):
            entry(digest, top, ".")
            continue
        seen = set()
        for folder, dirs, names in os.walk(top, followlinks=True):
            real = os.path.realpath(folder)
            if real in seen:
                dirs[:] = []
                continue
            seen.add(real)
            dirs[:] = sorted(d for d in dirs if d not in skip)
            for name in sorted(n for n in names if n not in skip):
                path = os.path.join(folder, name)
                entry(digest, path, os.path.relpath(path, top))
    return digest.hexdigest()


def recipe_digest(inputs):
    extra = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    return hashlib.sha256(json.dumps([files_digest(list(inputs["recipe"]) + list(inputs["inventory"]), SKIP), files_digest(SOURCES),
                                      extra, inputs.get("settings"), inputs["nodes"], inputs["hub"], inputs["sockets"]],
                                     sort_keys=True, default=str).encode()).hexdigest()


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
    """What stands now: the recipe it was made from, what a full run wrote, the containers, the images (here and on the
    head) and the traps in effect."""
    head_socket = inputs["sockets"][inputs["head"]]
    return {"recipe": inputs.get("digest") or recipe_digest(inputs), "state": files_digest(inputs["state"]),
            "containers": containers(inputs["nodes"] + services(inputs)), "named": inputs.get("named") or {},
            "images": {"here": images([i for i in inputs["images"]["here"] if i]), "head": images(inputs["images"]["head"], head_socket)},
            "traps": inputs.get("traps") or {}}


def services(inputs):
    """The containers that serve the nodes (the model hub, the image registry): ``hub`` names one or a list."""
    return list(inputs["hub"]) if isinstance(inputs["hub"], list) else [inputs["hub"]]


def same(running, last, names):
    """Whether the containers ``names`` run as ``last`` recorded them (the same ID, started at the same time)."""
    return {n: c[:2] for n, c in running.items() if n in names} == {n: c[:2] for n, c in last["containers"].items() if n in names}


def judge_images(last, inputs, recipe, running):
    """Why the images, the models and the hub may not stand as ``last`` recorded them, or None: the recipe, the images
    here and on the head, the hub's container (``running``: the containers as they run now)."""
    if recipe != last.get("recipe"):
        return "the recipe changed (the role, the inventory, the variables or the build sources)"
    if not same(running, last, services(inputs)):
        return "the hub or the registry was restarted, stopped or removed"
    if images(list(last["images"]["here"])) != last["images"]["here"]:
        return "an image here changed"
    if images(list(last["images"]["head"]), inputs["sockets"][inputs["head"]]) != last["images"]["head"]:
        return "an image on the head changed"
    return None


def judge_nodes(last, inputs, running):
    """Why the nodes may not stand as ``last`` recorded them, or None; and their processes when they do."""
    now_traps = inputs.get("traps") or {}
    last_traps = last.get("traps") or {}
    if inputs.get("reboot"):
        return "nodes to power-cycle", None
    if node_traps(now_traps) != node_traps(last_traps) or any(now_traps.get(k) or last_traps.get(k) for k in TOGGLES):
        return "node traps change", None
    if not same(running, last, inputs["nodes"]):
        return "a node was restarted, stopped or removed", None
    if files_digest(inputs["state"]) != last.get("state"):
        return "a key, the known hosts, a node's sysfs or devices changed", None
    if not all(answers(inputs["sockets"][n]) for n in inputs["nodes"]):
        return "a node's Docker daemon does not answer", None
    return None, {n: c[2] for n, c in running.items() if n in inputs["nodes"]}


def check(path, inputs, keep=False):
    """``up``: everything stands (only the traps run); ``images_up``: the images, the models and the hub stand (a power
    cycle, other node traps or a node changed run the nodes' steps only), with the image names the record holds."""
    answer = {"up": False, "images_up": False, "traps": None, "recipe": None, "images": None, "named": None}
    try:
        answer["recipe"] = recipe_digest(inputs)
        try:
            with open(path, encoding="utf-8") as handle:
                last = json.load(handle)
        except (OSError, ValueError):
            return dict(answer, why="no record of a run that succeeded")
        finally:
            if not keep and os.path.lexists(path):
                os.unlink(path)
        running = containers(inputs["nodes"] + services(inputs))  # one docker inspect for the hub, the registry and the nodes
        why = judge_images(last, inputs, answer["recipe"], running)
        if not why:
            answer.update(images_up=True, images={k: sorted(v) for k, v in last["images"].items()}, named=last.get("named") or {})
            why, pids = judge_nodes(last, inputs, running)
    except Exception as exc:  # pylint: disable=broad-except  # anything unread: every step runs
        return dict(answer, up=False, images_up=False, why="the record could not be compared (%s: %s)" % (type(exc).__name__, exc))
    if why:
        return dict(answer, why=why)
    return dict(answer, up=True, why="as the last run left it", traps=last.get("traps") or {}, pids=pids)


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
