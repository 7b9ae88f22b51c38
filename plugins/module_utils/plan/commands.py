# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's commands and containers: vLLM's flags gated by the image (fact 13), its argv, `ray start`
(facts 5, 6, 20), every container the collection runs (facts 8, 16) and the helpers of the model role."""

from __future__ import annotations

import json
import re
import shlex

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import code, door, firewall, flags as flag_utils, labels as container_labels, nccl_library
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import compile_cache
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import container_name, CONTAINER_FOLDERS, MODELS_MOUNT, STATE_MOUNT

OBJECT_STORE_BYTES = 1073741824  # fact 5: Ray would reserve ~30% of RAM for plasma otherwise
LAUNCHER = STATE_MOUNT + "/bin/vllm-serve"
VLLM_LOG = STATE_MOUNT + "/logs/vllm.log"
VLLM_STATE = STATE_MOUNT + "/run/vllm.json"  # vllm_process's state file in the head's container (its default)
# Ray's token authentication (Ray 2.52 and later): every gRPC and HTTP port of Ray's but the metrics export asks for the
# cluster's token, so a process that can reach a port and lacks the token is refused. Turned on by the environment only
# (RAY_AUTH_MODE; Ray refuses it in system_config), the token read from a file (RAY_AUTH_TOKEN_PATH: never in an
# environment, an argv or `docker inspect`). With the mode on and no token, `ray start` fails: fail closed.
RAY_TOKEN_FILE = STATE_MOUNT + "/keys/ray_auth_token"
RAY_AUTH_ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": RAY_TOKEN_FILE}
RAY_AUTH_SINCE = (2, 52)
# On SIGTERM (`docker stop`), `ray start --block` first asks the GCS to drain its node and waits up to 30 s for the raylet
# to leave (Ray 2.60's node.py: made for Ray Serve's proxies, which stop taking traffic first). No Ray Serve runs here and
# vLLM is stopped by its process group before (fact 3), so the drain only delays every teardown and recreation: off (a
# lone Ray head's `docker stop` took 1.5 s instead of 2.1 s on this project's 2-core machine). A Ray without the variable
# ignores it; a profile's own container env may set it again.
RAY_STOP_ENV = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
GCS_WAIT_SECONDS = 120  # how long vLLM's Ray driver waits for the head's GCS (serve_command)
# What each kind of container mounts of the node's container/ folder (base.CONTAINER_FOLDERS), each at STATE_MOUNT/<name>,
# read-only unless the folder is one containers write. The Ray head runs the launcher and writes vLLM's log and state;
# a Ray worker needs only vLLM's config and Ray's token; an mp rank runs the launcher; the fetch writes its log.
MOUNTS = {"ray-head": ("bin", "config", "keys", "logs", "run", "door"), "ray-worker": ("config", "keys"), "vllm": ("bin", "config", "keys", "door"),
          "model-fetch": ("bin", "fetch", "logs")}
# The launcher runs `vllm serve` with the arguments it is given, after checking the files vLLM would load against their
# pins. vLLM has no key: it serves on a Unix socket only root reaches, behind the front door, which holds the key
# (module_utils/plan/door.py); a socket a vLLM before it left is removed first (vLLM binds without unlinking).
LAUNCHER_SCRIPT = """#!/bin/sh
# Written by dgx_spark.vllm (the plan's launcher): runs `vllm serve` with the arguments it is given.
# vLLM has no key and no TCP port: it serves on a Unix socket only root reaches, behind the front door,
# which holds the key (module_utils/plan/door.py). Fail closed: no rank starts when a file vLLM would
# load differs from its pin (vllm_code_pins).
set -e
socket=%s
while [ $# -gt 0 ]; do
  case "$1" in
    --dgx-spark-pin=*)
      pin=${1#--dgx-spark-pin=}
      if ! printf '%%s  %%s\\n' "${pin%%%%:*}" "${pin#*:}" | sha256sum -c --status 2>/dev/null; then
        echo "dgx_spark.vllm: ${pin#*:} is missing or differs from its sha256 in vllm_code_pins (${pin%%%%:*});" \\
          "vLLM is not started. Put back the file you reviewed, or review it and pin its new sha256." >&2
        exit 78
      fi
      shift ;;
    *) break ;;
  esac
done
for arg in "$@"; do [ "$arg" = --uds ] && rm -f "$socket"; done
exec vllm serve "$@"
""" % door.VLLM_SOCKET


def launch(argv, pins=()):
    """The launcher with vLLM's arguments (``argv`` without ``vllm serve``), after the files it checks first."""
    return [LAUNCHER] + code.launcher_args(pins) + list(argv[2:])


def serve_command(argv, ray_address=None, pins=()):
    """What starts ``vllm serve`` with ``argv`` in its container: the launcher (it gives vLLM the key). With Ray, the
    head's GCS address is named (RAY_ADDRESS): vLLM is launched as soon as the head's Ray container starts, without
    waiting for its Ray, which boots while vLLM imports (seconds before it calls ``ray.init``). Named, Ray's driver
    connects to that cluster, retrying while its GCS and this node's raylet come up; without the name, a vLLM that
    found no cluster yet would start a Ray of its own inside the container and serve alone (fact 1). The join gate
    waits for the head and the workers while vLLM loads."""
    command = launch(argv, pins)
    # Ray's driver waits about 20 s for a named GCS by default; a head that boots slowly gets GCS_WAIT_SECONDS.
    return ["env", "RAY_ADDRESS=" + ray_address, "RAY_gcs_server_port_wait_time_s=%d" % GCS_WAIT_SECONDS] + command if ray_address else command


def state_files(inputs, paths, non_carry):
    """The small files a node's state folder holds: the launcher, vLLM's do_not_track (its config folder is read-only in
    the containers), and with Ray the names it must not carry over."""
    files = [{"path": paths["launcher"], "content": LAUNCHER_SCRIPT, "mode": "0755"},
             {"path": paths["do_not_track_file"], "content": "", "mode": "0644"}]
    if inputs["backend"] == "ray":
        files.append({"path": paths["non_carry_over_file"], "content": json.dumps(non_carry, indent=4, sort_keys=True) + "\n",
                      "mode": "0644"})
    return files


def serve_flags(inputs, findings, parallel):
    """The vLLM flags of the profile, gated by the image (fact 13)."""
    profile = inputs["profile"]
    vllm = profile.get("vllm", {})
    overrides = inputs.get("overrides") or {}
    flags = {}
    flags.update(vllm.get("flags") or {})
    flags.update(inputs.get("extra_flags") or {})
    kv_dtype = vllm.get("kv_cache_dtype")
    if kv_dtype and kv_dtype != "auto":
        flags.setdefault("--kv-cache-dtype", kv_dtype)
    if parallel["expert_parallel"]:
        flags.setdefault("--enable-expert-parallel", True)
    image = inputs.get("image_info") or {}
    ray_version = image.get("ray_version")  # an image built by this run is unknown yet: Ray's verification refuses it then
    if inputs["backend"] == "ray" and ray_version and version_parts(ray_version) < RAY_AUTH_SINCE:
        since = ".".join(map(str, RAY_AUTH_SINCE))
        findings.error("all", ray_version, "%s has Ray %s, without token authentication (Ray %s and later): any host that reaches "
                       "Ray's ports could run code on the cluster. Use an image with Ray %s or later, or vllm_backend: mp"
                       % (inputs["settings"].get("image"), ray_version, since, since))
    options = image.get("options")
    if options:
        kept, dropped, errors = flag_utils.gate(flags, options, vllm.get("optional_flags") or (), inputs["settings"].get("image") or "the image",
                                                image.get("version"))
        for message in dropped:
            findings.warn(message)
        for message in errors:
            findings.error("all", None, message)
        flags = kept
        if inputs["backend"] == "mp" and "--nnodes" not in options:
            findings.error("all", "mp", "backend mp needs vLLM's --nnodes, which %s (vLLM %s) lacks; use vllm_backend: ray or a newer image"
                           % (inputs["settings"].get("image"), image.get("version")))
        parsers = image.get("reasoning_parsers")
        name = flags.get("--reasoning-parser")
        if parsers and name and name not in parsers and not flags.get("--reasoning-parser-plugin"):
            findings.error("all", name, "reasoning parser %s is not in %s (it has %s); a wrong parser fails silently"
                           % (name, inputs["settings"].get("image"), ", ".join(parsers)))
        tools = image.get("tool_parsers")
        name = flags.get("--tool-call-parser")
        if tools and name and name not in tools and not flags.get("--tool-parser-plugin"):
            findings.error("all", name, "tool-call parser %s is not in %s (it has %s)" % (name, inputs["settings"].get("image"), ", ".join(tools)))
    max_len = overrides.get("max_model_len") or vllm.get("max_model_len")
    return flags, (int(max_len) if max_len else None)


def version_parts(text):
    """The leading numbers of a version ("2.60.0rc1" -> (2, 60, 0))."""
    found = re.match(r"\d+(\.\d+)*", str(text))
    return tuple(int(part) for part in found.group(0).split(".")) if found else ()


def model_revision(inputs):
    """The revision to fetch and serve: the inventory's override, else the profile's (None: the hub's main)."""
    return (inputs.get("overrides") or {}).get("model_revision") or inputs["profile"]["model"].get("revision")


def planned_flags(inputs, parallel, utilization, max_len):
    """The values the plan gives the options it sets itself (flags.OWNED), as argv text: what a profile's or
    vllm_extra_flags' flag of the same name must say, if it says anything. vLLM's defaults where the argv omits one."""
    model = inputs["profile"]["model"]
    return {"--host": inputs["endpoint"]["bind"] or "0.0.0.0", "--port": str(inputs["settings"]["port"]), "--uds": door.VLLM_SOCKET,
            "--model": str(model["id"]),
            "--served-model-name": model.get("served_name"), "--revision": model_revision(inputs),
            "--tensor-parallel-size": str(parallel["tensor_parallel_size"]), "--pipeline-parallel-size": str(parallel["pipeline_parallel_size"]),
            "--data-parallel-size": str(parallel["data_parallel_size"]), "--gpu-memory-utilization": "%g" % utilization,
            "--max-model-len": str(max_len) if max_len else None, "--distributed-executor-backend": inputs["backend"]}


def serve_argv(inputs, parallel, flags, utilization, max_len, rank, head_ip):
    profile = inputs["profile"]
    model = profile["model"]
    argv = ["vllm", "serve", model["id"]]
    if model.get("served_name"):  # else vLLM serves the model under its id, as the write-ups that name none
        argv += ["--served-model-name", model["served_name"]]
    if rank == 0:  # the endpoint's rank serves on the door's socket (module_utils/plan/door.py), never on a TCP port
        argv += ["--uds", door.VLLM_SOCKET]
    argv += ["--tensor-parallel-size", str(parallel["tensor_parallel_size"])]
    if parallel["pipeline_parallel_size"] > 1:
        argv += ["--pipeline-parallel-size", str(parallel["pipeline_parallel_size"])]
    if parallel["data_parallel_size"] > 1:
        argv += ["--data-parallel-size", str(parallel["data_parallel_size"])]
    argv += ["--gpu-memory-utilization", "%g" % utilization]
    if max_len:
        argv += ["--max-model-len", str(max_len)]
    revision = model_revision(inputs)
    if revision:
        argv += ["--revision", revision]
    argv += flag_utils.to_argv(flags)
    if inputs["backend"] == "ray":
        argv += ["--distributed-executor-backend", "ray"]
    else:
        argv += ["--distributed-executor-backend", "mp", "--nnodes", str(parallel["nodes"]), "--node-rank", str(rank),
                 "--master-addr", head_ip, "--master-port", str(inputs["settings"]["master_port"])]
        if rank > 0:
            argv.append("--headless")
    return argv


def ray_command(inputs, fabric_ip, is_head, head_ip):
    """`ray start` of one node: its own fabric IP (fact 6), a 1 GiB object store (fact 5), no dashboard (fact 20), every
    port pinned so that the firewall can name them (module_utils/plan/firewall.py)."""
    settings = inputs["settings"]
    object_store = (inputs["profile"].get("ray") or {}).get("object_store_memory", OBJECT_STORE_BYTES)
    command = (["ray", "start", "--node-ip-address", fabric_ip, "--num-gpus", str(settings["gpus_per_node"]),
                "--object-store-memory", str(object_store)]
               + firewall.ray_port_flags(is_head, settings["ray_ports_offset"]) + ["--disable-usage-stats", "--block"])
    if is_head:
        command[2:2] = ["--head", "--port", str(settings["ray_port"]), "--include-dashboard=false"]
    else:
        command[2:2] = ["--address", "%s:%d" % (head_ip, settings["ray_port"])]
    return command


def gpus(settings):
    """Docker's --gpus value, or None for none (the simulated cluster)."""
    return None if str(settings["gpus"]).lower() in ("none", "false", "") else settings["gpus"]


def labels(settings, name, role):
    """The labels of a container of this deployment (module_utils/plan/labels.py)."""
    return container_labels.labels(settings["cluster_name"], name, role)


def state_volumes(paths, kind):
    """The bind mounts of a container of ``kind`` (MOUNTS): the folders of container/ it needs, never the state
    folder itself (root runs the supervisor's code and loads the firewall's ruleset from there)."""
    writable = {name for name, dummy, rw in CONTAINER_FOLDERS if rw}
    return ["%s/%s:%s/%s%s" % (paths["container_dir"], name, STATE_MOUNT, name, "" if name in writable else ":ro") for name in MOUNTS[kind]]


def container_spec(inputs, name, role, env, paths, command, kind):
    """One container as the apply step creates it; identical RDMA options on every node (fact 8)."""
    settings = inputs["settings"]
    container = inputs["profile"].get("container") or {}
    volumes = state_volumes(paths, kind) + ["%s:%s:ro" % (paths["models_dir"], MODELS_MOUNT)]
    volumes += container.get("extra_volumes") or []
    volumes += nccl_library.volumes(inputs.get("nccl_library"), name)  # vllm_nccl_library: system
    volumes += compile_cache.volumes(paths, inputs.get("compile_cache"))  # this configuration's compile cache alone
    return {
        "name": container_name(settings, role, name),
        "image": settings["image"],
        "command": command,
        "env": dict(sorted(({**RAY_STOP_ENV, **env, **RAY_AUTH_ENV} if role == "ray" else dict(env)).items())),
        "network_mode": settings["network_mode"].replace("{node}", name),
        "ipc_mode": settings["ipc_mode"],
        "shm_size": container.get("shm_size") or settings["shm_size"],
        "devices": list(settings["devices"] or []),
        "capabilities": list(settings["capabilities"] or []),
        "ulimits": list(settings["ulimits"] or []),
        "gpus": gpus(settings),
        "volumes": volumes,
        "init": True,
        "restart_policy": "no",  # fact 16: keep exited containers and their logs; no --rm
        "labels": labels(settings, name, role),
    }


def disk_reserve_bytes(settings):
    """Free space a fetch or copy must leave on a node's models disk."""
    return int(float(settings["model_disk_reserve_gb"]) * 1024 ** 3)


def model_fetch_argv(inputs, name, paths, model_id, revision):
    """`docker run` of the head's one-off fetch container: the cluster's image (it carries huggingface_hub), the
    cache layout the containers read (HF_HOME=/models/huggingface), the token as a 0600 file, never in argv."""
    settings = inputs["settings"]
    argv = ["docker", "run", "--rm", "--name", "%s-model-fetch" % settings["cluster_name"],
            "--network", settings["network_mode"].replace("{node}", name)]
    for key, value in sorted(labels(settings, name, "model-fetch").items()):
        argv += ["--label", "%s=%s" % (key, value)]
    argv += ["-v", "%s:%s" % (paths["models_dir"], MODELS_MOUNT)]
    for volume in state_volumes(paths, "model-fetch"):
        argv += ["-v", volume]
    argv += ["-e", "HF_HOME=%s/huggingface" % MODELS_MOUNT, "-e", "HF_HUB_DISABLE_TELEMETRY=1"]
    if settings["hf_endpoint"]:
        argv += ["-e", "HF_ENDPOINT=%s" % settings["hf_endpoint"]]
    argv += ["--entrypoint", "python3", settings["image"], STATE_MOUNT + "/bin/fetch_model.py", model_id,
             "--revision", revision or "main", "--token-file", STATE_MOUNT + "/fetch/hf_token", "--node", name,
             "--reserve-bytes", str(disk_reserve_bytes(settings)),
             "--log", STATE_MOUNT + "/logs/model-fetch.log"]
    if settings["model_verify_checksums"]:
        argv.append("--checksums")
    return argv


# A container keeps the folder it was started with: when the models folder is deleted and made again, a running
# container still sees the old one (empty) and vLLM finds no weights, however complete the new folder is. This names
# each running container of the deployment on the node that sees another folder than the node's.
STALE_MODELS = ('folder=$(stat -c %i "$1") || exit 0; mount=$2; shift 2; '
                'for c in $(docker ps --quiet "$@"); do '
                'seen=$(docker exec "$c" stat -c %i "$mount" 2>/dev/null) || continue; '
                '[ "$seen" = "$folder" ] || docker inspect --format "{{.Name}}" "$c" | sed "s,^/,,"; done')


def stale_models_argv(settings, name, paths):
    """What names the deployment's running containers on node ``name`` that see a models folder replaced since."""
    filters = [a for f in container_labels.filters(settings["cluster_name"], name) for a in ("--filter", f)]
    return ["sh", "-c", STALE_MODELS, "sh", paths["models_dir"], MODELS_MOUNT] + filters


def rsync_daemon(paths):
    """The head's rsync daemon for the model copy: its start (a daemon a failed run left is stopped first) and its stop
    (the copy's one-time secret removed with it)."""
    pid, config, secrets = (shlex.quote(paths[k]) for k in ("rsync_pid", "rsync_config", "rsync_secrets"))
    stop = 'pid=%s; if [ -s "$pid" ]; then kill "$(cat "$pid")" 2>/dev/null; sleep 1; rm -f "$pid"; fi' % pid
    return {"start": ["sh", "-c", "%s; rsync --daemon --config=%s" % (stop, config)],
            "stop": ["sh", "-c", "%s; rm -f %s" % (stop, secrets)]}


def log_reads(containers, is_head):
    """How a node's logs are read, their last lines (logs.yml appends ``count`` and the number): Docker's log of each
    container a rank runs in (``containers``: the Ray container and the mp backend's vLLM, whichever the node has), and
    on the head vLLM's own log inside its Ray container, where vLLM runs as a process of it. Read through Docker, never
    by root through a folder a container writes."""
    found = []
    for role in ("ray", "vllm"):
        found.append({"what": "docker logs " + containers[role], "container": containers[role],
                      "argv": ["docker", "logs", "--timestamps", containers[role]], "count": "--tail"})
        if role == "ray" and is_head:
            found.append({"what": "vLLM's log: docker exec %s tail %s" % (containers[role], VLLM_LOG), "container": containers[role],
                          "argv": ["docker", "exec", containers[role], "tail", VLLM_LOG], "count": "-n"})
    return found


def image_stream(settings, name, fabric_ip, ssh_user):
    """How the head streams the image to worker ``name`` over the fast link (fact 14): ``docker save`` into ``docker
    load`` over SSH to the worker's fabric address, ``dd`` counting the bytes into a file on the head the wait reads.
    That file is in the SSH user's home (``~``, which the modules reading and removing it expand): the stream runs as
    that user, with its key, and the state folder is root's."""
    counted = ".dgx-spark-image-stream-to-%s.progress" % name
    progress = "~/" + counted
    target = "%s@%s" % (ssh_user, fabric_ip) if ssh_user else fabric_ip
    # The check asks what the stream needs of the worker, with the stream's own ssh options, before any change: the
    # head's key authorized there, its host key known on the head, and Docker answering the worker's user.
    return {"progress_file": progress, "target": target, "check": ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", target, "docker", "version"],
            "cmd": "set -o pipefail && docker save %s | dd bs=4M status=progress 2>%s | ssh -o BatchMode=yes %s docker load"
                   % (shlex.quote(settings["image"] or ""), "~/" + shlex.quote(counted), shlex.quote(target))}
