# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node's probe reads, one function per source; the probe modules are their adapters.

Each function takes ``run(argv) -> (rc, stdout, stderr)`` and, where it can warn, ``warn(message)``, so one module
call reads a node whole (spark_node_info) and each single-purpose module reads its part with the same code.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import process_group as pg
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import read_record, read_small, read_text
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import image_info as ii, model_files as mf, ray_state
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.errors import ProbeError
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.roce import nccl_choice, read_devices
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.unified_memory import (
    APPS_QUERY, parse_compute_apps, parse_gpu_query, parse_meminfo, read_processes, summarize, validate_utilization)

GPU_QUERY = ["--query-gpu=name,driver_version,compute_cap,memory.total", "--format=csv,noheader,nounits"]


def query_nvidia_smi(run, warn, path, name):
    """Return (gpus, compute_apps), or (None, []) with a warning when nvidia-smi is absent or fails."""
    if not path or not os.path.exists(path):
        warn("%s not found: GPU facts are null (a node without the NVIDIA driver?)" % name)
        return None, []
    rc, out, err = run([path] + GPU_QUERY)
    if rc != 0:
        warn("%s failed (rc=%d): %s; GPU facts are null" % (path, rc, (err or out).strip()))
        return None, []
    gpus = parse_gpu_query(out)
    rc, out, err = run([path] + APPS_QUERY)
    if rc != 0:
        warn("%s --query-compute-apps failed (rc=%d): %s" % (path, rc, (err or out).strip()))
        return gpus, []
    return gpus, parse_compute_apps(out)


def memory(run, warn, proc_root, nvidia_smi_path, nvidia_smi_name, utilization=None, need=None):
    """The unified_memory fact: meminfo, the processes, nvidia-smi. Raises ProbeError naming the path."""
    if utilization is not None:
        validate_utilization(utilization)
    if not os.path.isdir(proc_root):
        raise ProbeError("proc_root %s does not exist or is not a directory" % proc_root)
    meminfo_path = os.path.join(proc_root, "meminfo")
    try:
        with open(meminfo_path, encoding="utf-8") as handle:
            meminfo = parse_meminfo(handle.read(), meminfo_path)
    except OSError as exc:
        raise ProbeError("cannot read %s: %s" % (meminfo_path, exc.strerror or exc))
    gpus, apps = query_nvidia_smi(run, warn, nvidia_smi_path, nvidia_smi_name)
    fact = summarize(meminfo, gpus, apps, read_processes(proc_root), utilization, need)
    if fact["mem_available_estimated"]:
        warn("%s has no MemAvailable line; it was estimated from MemFree and the caches" % meminfo_path)
    return fact


def roce(sysfs_root, warn):
    """The roce_gid_info answer: every RDMA port and its GIDs, and the NCCL choices they imply. Raises ProbeError."""
    ports, warnings = read_devices(sysfs_root)
    hca, index, more = nccl_choice(ports)
    for warning in warnings + more:
        warn(warning)
    return {"roce_devices": ports, "nccl_ib_hca": hca, "nccl_gid_index": index}


def image_id(run, image, docker="docker"):
    """The image's ID on this node, or None when the node lacks it."""
    rc, out, dummy = run([docker, "image", "inspect", "--format", "{{.Id}}", image])
    return out.strip() if rc == 0 and out.strip() else None


def image(run, image_name, the_id, docker="docker", gpus=None, cache_dir=None, write_cache=True):
    """The image's vLLM, Ray, `vllm serve` options and parsers, read once per image ID (cached in ``cache_dir``)."""
    cache = os.path.join(cache_dir, "%s-%s.json" % (the_id.replace(":", "_"), ii.SCRIPT_DIGEST)) if cache_dir else None
    if cache and os.path.exists(cache):
        try:
            with open(cache, encoding="utf-8") as handle:
                info = json.load(handle)
            info.update(image=image_name, id=the_id, cached=True)
            return info
        except (OSError, ValueError):
            pass
    argv = [docker, "run", "--rm", "--network", "none", "--entrypoint", "python3"]
    if gpus:
        argv += ["--gpus", gpus]
    rc, out, err = run(argv + [image_name, "-c", ii.PROBE_SCRIPT])
    info = ii.parse_probe_output(rc, out, err, image_name)
    info.update(image=image_name, id=the_id, cached=False)
    if cache and write_cache:
        try:  # only a cache: a full disk (which the plan then names) must not stop the probe
            os.makedirs(cache_dir, exist_ok=True)
            with open(cache + ".tmp", "w", encoding="utf-8") as handle:
                json.dump(info, handle)
            os.replace(cache + ".tmp", cache)
        except OSError:
            pass
    return info


def docker_info(run, docker="docker"):
    """Docker's server version and runtimes, or None when no daemon answers."""
    rc, out, dummy = run([docker, "info", "--format", "{{json .}}"])
    if rc != 0:
        return None
    try:
        info = json.loads(out)
    except ValueError:
        return None
    if not info.get("ServerVersion"):
        return None
    return {"version": info["ServerVersion"], "runtimes": sorted(info.get("Runtimes") or {}), "root_dir": info.get("DockerRootDir")}


def free_space(paths):
    """Free bytes on the filesystem of each of ``paths`` (of its nearest existing folder, for one not made yet):
    {path: {"at": folder, "free_bytes": n}}; a path with no existing folder above it is left out."""
    found = {}
    for path in paths:
        folder = path
        while folder and not os.path.isdir(folder):
            parent = os.path.dirname(folder)
            folder = None if parent == folder else parent
        if folder:
            st = os.statvfs(folder)
            found[path] = {"at": folder, "free_bytes": st.f_bavail * st.f_frsize}
    return found


def interfaces(run):
    """The node's interfaces with their IPv4 addresses, ``{ifname: ["10.0.0.11/24", ...]}`` (``ip -j -4 addr show``),
    or None when ``ip`` could not tell."""
    rc, out, dummy = run(["ip", "-j", "-4", "addr", "show"])
    if rc != 0:
        return None
    try:
        links = json.loads(out or "[]")
    except ValueError:
        return None
    return {link["ifname"]: ["%s/%s" % (a["local"], a.get("prefixlen", 32)) for a in link.get("addr_info") or []
                             if a.get("family") == "inet" and a.get("local")]
            for link in links if link.get("ifname")}


def addresses(found):
    """The IPv4 addresses of ``interfaces``' result, sorted; None when it is None."""
    if found is None:
        return None
    return sorted({cidr.split("/")[0] for cidrs in found.values() for cidr in cidrs})


def connection_interface(found, ssh_connection):
    """The interface whose address the Ansible connection arrived at (the third field of SSH_CONNECTION), or None for a
    local connection or an address no interface holds."""
    fields = (ssh_connection or "").split()
    if len(fields) < 3 or not found:
        return None
    return next((ifname for ifname, cidrs in sorted(found.items()) if any(c.split("/")[0] == fields[2] for c in cidrs)), None)


def connection_port(ssh_connection):
    """The port the Ansible connection arrived at on this node (the fourth field of SSH_CONNECTION: sshd's), or None for
    a local connection. The firewall opens it whatever the inventory says (firewall.reach)."""
    fields = (ssh_connection or "").split()
    return int(fields[3]) if len(fields) >= 4 and fields[3].isdigit() else None


def resolve(name):
    """The IPv4 addresses ``name`` resolves to on this node (the node's resolver, /etc/hosts included), in its order."""
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    found = []
    for info in infos:
        if info[4][0] not in found:
            found.append(info[4][0])
    return found


def lines(run, argv):
    """A command's output lines, or [] when it fails."""
    rc, out, dummy = run(argv)
    return out.splitlines() if rc == 0 else []


def container_env(run, names, docker="docker"):
    """The environment each existing container of ``names`` was created with: {name: ["K=V", ...]}."""
    if not names:
        return {}
    rc, out, dummy = run([docker, "container", "inspect", "--format", "{{json .Name}} {{json .Config.Env}}"] + list(names))
    found = {}
    for line in out.splitlines():
        name, dummy, env = line.partition(" ")
        try:
            found[json.loads(name).lstrip("/")] = json.loads(env) or []
        except ValueError:
            continue
    return found


def serving_argvs(container, docker="docker", host_file=None):
    """What :func:`serving` will run that is known before it runs: the liveness check of the process group its state
    file on the node names (``host_file``), so that a probe starts it with its other commands (node/command.py Batch).
    It is started even when the container is gone (a state file left behind): signal 0 changes nothing."""
    state = pg.parse_state(read_small(host_file)) if host_file else None
    return [pg.alive_argv(docker, container, state["pgid"])] if state else []


def serving_state(run, container, state_file, docker="docker", host_file=None):
    """vLLM's state file in ``container`` as the vllm_process module wrote it (its process group, config hash), or None.
    Read on the node where the container's folder is (``host_file``: no exec for it), else inside."""
    text = read_small(host_file) if host_file else None
    if text is None:  # not there, or not readable by this user: asked inside, as vLLM's launcher wrote it
        rc, out, dummy = run(pg.read_argv(docker, container, state_file))
        text = out if rc == 0 else None
    return pg.parse_state(text) if text else None


def serving(run, container, state_file, docker="docker", host_file=None):
    """vLLM's process group in ``container`` as the vllm_process module left it: {running, config_hash, pgid}."""
    state = serving_state(run, container, state_file, docker, host_file)
    if not state:
        return {"running": False, "config_hash": None, "pgid": None}
    rc, dummy, dummy = run(pg.alive_argv(docker, container, state["pgid"]))
    return {"running": rc == 0, "config_hash": state.get("config_hash"), "pgid": state["pgid"]}


def state(paths):
    """What the node holds of ``paths``: {path: "dir", a file's sha256, or None when absent}. Small files only (the
    launcher, Ray's carry-over list); what the plan would write is compared with it."""
    found = {}
    for path in paths:
        if os.path.isdir(path):
            found[path] = "dir"
        elif os.path.isfile(path):
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                digest.update(handle.read())
            found[path] = digest.hexdigest()
        else:
            found[path] = None
    return found


def records(paths):
    """The collection's small JSON records on the node ({path: the record, or None when absent, unreadable or not a
    mapping}). Only a regular file of at most node/command.py's RECORD_BYTES is read (read_record), never through a link: the state folder is mounted
    into the containers in part (module_utils/plan/commands.py MOUNTS), so what is there is read as data, with care."""
    return {path: read_record(path) for path in paths}


def devices(paths):
    """The device nodes under each of ``paths`` (what ``--device PATH`` gives a container): {path: sorted names}, or
    None for a path that is absent. An empty folder passes ``docker run --device`` and gives the container nothing."""
    found = {}
    for path in paths:
        if os.path.isdir(path):
            found[path] = sorted(name for name in os.listdir(path)
                                 if stat.S_ISCHR(os.stat(os.path.join(path, name)).st_mode))
        elif os.path.exists(path):
            found[path] = [os.path.basename(path)]
        else:
            found[path] = None
    return found


def model(models_dir, model_id, revision=None):
    """The model's config.json and the size of its weights on this node, or (None, None) when it is not here."""
    try:
        where = mf.locate(models_dir, model_id, revision)
    except mf.ModelError:
        return None, None
    snapshot = where["snapshot"]
    text = read_text(os.path.join(snapshot, "config.json")) if snapshot else None
    if text is None:
        return None, None
    try:
        config = json.loads(text)
    except ValueError:
        return None, None
    weights = 0
    for name in os.listdir(snapshot):
        if name.endswith(".safetensors"):
            weights += os.path.getsize(os.path.join(snapshot, name))
    return config, weights or None


def model_copy(models_dir, model_id, revision=None):
    """What the model role's check would read of this node's copy, without a module run of its own: the snapshot's
    commit, {relative path: size} of its files (model_files.walk), the shards its safetensors index names and the
    manifest the fetch kept here. The planner judges every copy with model_files.check against the head's manifest
    (plan/changes.model_copies); None when the model cannot be located."""
    try:
        where = mf.locate(models_dir, model_id, revision)
        key = mf.manifest_key(model_id, where["commit"])
    except mf.ModelError:
        return None
    snapshot = where["snapshot"]
    present = mf.walk(snapshot) if snapshot and os.path.isdir(snapshot) else {}
    index_text = read_text(os.path.join(snapshot, mf.INDEX)) if snapshot else None
    try:
        shards = mf.index_shards(index_text) if index_text is not None else None
    except mf.ModelError:
        shards = "unreadable"
    manifest = read_text(os.path.join(models_dir, mf.MANIFESTS, key + ".json"))
    try:
        manifest = json.loads(manifest) if manifest is not None else None
    except ValueError:
        manifest = None
    return {"commit": where["commit"], "snapshot": snapshot, "present": present, "shards": shards, "manifest": manifest}


RAY_PROBE_SECONDS = 20


def ray_argv(container, docker="docker"):
    """Ray's nodes as JSON, read by a short driver inside the head's Ray container (ray_state.PROBE_SCRIPT)."""
    return ray_state.probe_argv("auto", container=container, docker=docker, seconds=RAY_PROBE_SECONDS)


def ray(rc, out, err, container):
    """The Ray fact from :func:`ray_argv`'s answer: ray_state's summary, or ``{"error": why}`` when Ray cannot be read
    (the container stopped, Ray down). The planner judges it against the nodes it expects (the join gate)."""
    try:
        return ray_state.summarize(ray_state.parse_probe_output(rc, out, err, container, "auto", RAY_PROBE_SECONDS))
    except ray_state.RayStateError as exc:
        return {"error": str(exc)}
