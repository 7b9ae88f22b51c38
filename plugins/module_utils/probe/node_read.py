# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One call reads a node for every deployment placed on it (the spark_node_info module is its adapter).

A task is a round trip to the node, and a run on a healthy cluster should take seconds: so a node is read once, for
every deployment on it, and every command the read will run whatever it finds (Docker's listings, ``ss``, ``ip``,
``nvidia-smi``, each image's ID, each deployment's containers and vLLM's state) is started together and collected
once (node/command.py Batch), so the read pays its slowest command, not their sum. What differs per deployment (its
image, containers, state files, records, supervisor, model, Ray) is read for each from those answers; what is the
node's (memory, RoCE, Docker, ports, interfaces) once. Each deployment's facts are the node's and its own, whole.
"""

from __future__ import annotations

import fnmatch

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import firewall_state, process_group as pg, supervisor_state
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import Batch, collect, start
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import nccl_lib, node_probe
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.unified_memory import APPS_QUERY, cuda_mem_info_bounded

# What a deployment's read takes (the module's options of the same names); the rest is the node's.
PER_DEPLOYMENT = ("gpu_memory_utilization", "memory_need", "image", "read_image", "image_cache_dir", "gpus", "containers", "serve_container",
                  "serve_state_file", "serve_state_file_host", "models_dir", "model", "revision", "ray_container", "paths", "records", "supervisor",
                  "kept_reference", "devices", "resolve", "disk", "firewall", "door_image")


def docker_ps_argv(docker):
    return [docker, "ps", "--all", "--no-trunc", "--format", "{{json .}}"]


def kept_argv(docker, references):
    """Every deployment's kept tags in one listing (Docker ORs the filters); kept() tells them apart."""
    return [docker, "image", "ls"] + [a for r in references for a in ("--filter", "reference=" + r)] + ["--format", "{{.Repository}}:{{.Tag}}"]


def kept(listed, reference):
    """The tags of ``listed`` that ``reference`` names (Docker's match of a reference filter, on names without a '/')."""
    return [tag for tag in listed if fnmatch.fnmatchcase(tag, reference)]


def kept_references(specs):
    """Each deployment's kept-tag reference, in order: what the one listing asks for."""
    return [spec["kept_reference"] for spec in specs.values() if spec.get("kept_reference")]


def all_of(specs, key):
    """Each deployment's ``key`` list, joined in order, once each: what one command asks for all of them."""
    return list(dict.fromkeys(n for spec in specs.values() for n in (spec.get(key) or [])))


def image_id_argv(docker, image):
    return [docker, "image", "inspect", "--format", "{{.Id}}", image]


def env_argv(docker, names):
    return [docker, "container", "inspect", "--format", "{{json .Name}} {{json .Config.Env}}"] + list(names)


SERVE_STATE_FILE = "/dgx-spark/run/vllm.json"   # vLLM's state file inside its container (module_utils/plan/commands.py)
LISTENING = ["ss", "-H", "-t", "-l", "-n"]
INTERFACES = ["ip", "-j", "-4", "addr", "show"]


def up_front(specs, docker, smi):
    """Every command the read runs whatever it finds, for every deployment: what the batch starts together."""
    argvs = [[docker, "info", "--format", "{{json .}}"], docker_ps_argv(docker), LISTENING, INTERFACES]
    if smi:
        argvs += [[smi] + node_probe.GPU_QUERY, [smi] + APPS_QUERY]
    references, containers = kept_references(specs), all_of(specs, "containers")
    if references:
        argvs.append(kept_argv(docker, references))
    if containers:
        argvs.append(env_argv(docker, containers))
    for spec in specs.values():
        for image in (spec.get("image"), spec.get("door_image")):
            if image:
                argvs.append(image_id_argv(docker, image))
        if spec.get("serve_container") and not spec.get("serve_state_file_host"):
            argvs.append(pg.read_argv(docker, spec["serve_container"], spec.get("serve_state_file") or SERVE_STATE_FILE))
        elif spec.get("serve_container"):
            argvs += node_probe.serving_argvs(spec["serve_container"], docker, spec["serve_state_file_host"])
        if spec.get("firewall"):
            argvs.append(firewall_state.list_argv(spec["firewall"]["table"]))
    return argvs


def read(specs, node, run, warn, check_mode=False, ssh_connection=None, cuda_read=cuda_mem_info_bounded):
    """Each deployment's facts of this node: {name: facts}. ``specs``: each deployment's options (PER_DEPLOYMENT);
    ``node``: the node's (proc_root, sysfs_root, nvidia_smi and its path, docker); ``run(argv)`` runs a command; ``warn``
    says what is missing. Raises ProbeError (a probe input missing)."""
    docker = node["docker"]
    rays = {name: start(node_probe.ray_argv(spec["ray_container"], docker)) for name, spec in specs.items() if spec.get("ray_container")}
    batch = Batch(run, up_front(specs, docker, node["smi_path"]))
    found = node_probe.interfaces(batch)
    common = dict(roce=node_probe.roce(node["sysfs_root"], warn), docker=node_probe.docker_info(batch, docker),
                  listening=node_probe.lines(batch, LISTENING), interfaces=found, addresses=node_probe.addresses(found),
                  connection_interface=node_probe.connection_interface(found, ssh_connection),
                  connection_port=node_probe.connection_port(ssh_connection),
                  system_nccl=nccl_lib.system(warn=warn))
    docker_ps = node_probe.lines(batch, docker_ps_argv(docker)) if common["docker"] is not None else []
    # One listing of the kept tags and one inspect of the containers for every deployment, each taking its own.
    present = [n for n in all_of(specs, "containers") if any('"Names":"%s"' % n in line for line in docker_ps)]
    envs = node_probe.container_env(batch, present, docker) if present else {}
    references = kept_references(specs)
    listed = node_probe.lines(batch, kept_argv(docker, references)) if references and common["docker"] is not None else []
    answers, cuda = {}, {}
    for name, spec in specs.items():
        facts = dict(common, docker_ps=docker_ps, image_id=None, image=None, container_env={}, vllm=None,
                     model_config=None, weights_bytes=None, model_copy=None, kept_images=None, door_image_id=None)
        facts["memory"] = node_probe.memory(batch, warn, node["proc_root"], node["smi_path"], node["nvidia_smi"],
                                            spec.get("gpu_memory_utilization"), spec.get("memory_need"))
        if facts["memory"].get("gpu") and not facts["memory"].get("gpu_processes"):
            # Nothing holds the GPU, so a launch may follow: CUDA's own free beside /proc/meminfo finds memory a killed
            # container left pinned that neither it nor nvidia-smi shows (plan/memory_fit.pinned). Read once a node.
            if "answer" not in cuda:
                cuda["answer"] = cuda_read()
            facts["memory"]["cuda"] = cuda["answer"]
        facts.update(state=node_probe.state(spec.get("paths") or []), records=node_probe.records(spec.get("records") or []),
                     devices=node_probe.devices(spec.get("devices") or []),
                     resolved=node_probe.resolve(spec["resolve"]) if spec.get("resolve") else None)
        # The live table against the record of the one serve.yml loaded: loaded, changed, missing or unrecorded.
        facts["firewall"] = (firewall_state.state(batch, spec["firewall"]["table"], spec["firewall"]["record"])
                             if spec.get("firewall") else None)
        supervisor = spec.get("supervisor")
        facts["supervisor_running"] = (supervisor_state.supervisor_running(supervisor["paths"], supervisor["unit_name"], batch)
                                       if supervisor else None)
        facts["disk"] = node_probe.free_space(list(spec.get("disk") or []) + [d for d in [(common["docker"] or {}).get("root_dir")] if d])
        if common["docker"] is not None:
            named = [n for n in spec.get("containers") or [] if n in present]
            facts["container_env"] = {n: envs[n] for n in named if n in envs}
            if spec.get("kept_reference"):
                facts["kept_images"] = kept(listed, spec["kept_reference"])
            if spec.get("image"):
                facts["image_id"] = node_probe.image_id(batch, spec["image"], docker)
            if spec.get("door_image"):  # the front door's image: the apply builds it only where the head lacks it
                facts["door_image_id"] = node_probe.image_id(batch, spec["door_image"], docker)
            if spec.get("read_image") and facts["image_id"]:
                facts["image"] = node_probe.image(batch, spec["image"], facts["image_id"], docker, spec.get("gpus"),
                                                  spec.get("image_cache_dir"), write_cache=not check_mode)
            if spec.get("serve_container") and spec["serve_container"] in named:
                facts["vllm"] = node_probe.serving(batch, spec["serve_container"], spec.get("serve_state_file") or SERVE_STATE_FILE,
                                                   docker, spec.get("serve_state_file_host"))
        if spec.get("models_dir") and spec.get("model"):
            facts["model_config"], facts["weights_bytes"] = node_probe.model(spec["models_dir"], spec["model"], spec.get("revision"))
            facts["model_copy"] = node_probe.model_copy(spec["models_dir"], spec["model"], spec.get("revision"))
        if name in rays:
            facts["ray"] = node_probe.ray(*collect(rays[name]), container=spec["ray_container"])
        answers[name] = facts
    return answers
