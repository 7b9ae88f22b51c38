# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM's compile cache, kept on each node so that a recreated container starts warm.

Seed 001: "Startup takes approximately 4 minutes on a warm compile cache (first run ~25 minutes for torch.compile)".
vLLM keeps its compiled graphs under ``VLLM_CACHE_ROOT`` (``torch_compile_cache/<vLLM's own hash>``, with inductor's and
triton's caches beside them), by default in the container's own filesystem: every config change, GID-drift repair,
upgrade and rollback recreated the containers and compiled cold again. Here each node keeps the caches in
``<state>/container/cache``, one folder per image and compile-relevant configuration (``<image ID, 12>-<digest, 12>``);
a rank's container mounts its own folder alone, read-write at ``/dgx-spark/cache``, which ``VLLM_CACHE_ROOT`` and
``TORCHINDUCTOR_CACHE_DIR`` name. What goes into the digest: the model and its revision, the parallel sizes, the flags that change
what is compiled (dtype, quantization, KV cache dtype, compilation, eager, backends, speculative decoding) and the
``VLLM_*`` variables (kernel choices such as ``VLLM_NVFP4_GEMM_BACKEND``). vLLM hashes the rest itself inside the
folder, so ``--max-model-len`` or ``--gpu-memory-utilization`` share it and recreate nothing; a change of what is
compiled recreates the containers with the folder of the new configuration.

The folder is the containers' to write, as their logs are: root never runs or loads anything from it, and removes
it only by a walk that follows no link (node/kept_image.py: caches go with their image when the kept images are let
go of).
"""

from __future__ import annotations

import re

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import digest, STATE_MOUNT
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.records import short_id

MOUNT = STATE_MOUNT + "/cache"
# The flags that change what vLLM compiles (or whether it does); the rest it hashes itself inside the folder.
COMPILE_FLAGS = ("--dtype", "--quantization", "--kv-cache-dtype", "--enforce-eager", "--compilation-config", "-O", "-cc",
                 "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--enable-expert-parallel",
                 "--moe-backend", "--attention-backend", "--mamba-ssm-cache-dtype", "--max-cudagraph-capture-size",
                 "--cuda-graph-sizes", "--async-scheduling", "--speculative-config", "--trust-remote-code", "--hf-overrides")
# VLLM_* variables that change nothing compiled: each node's own, the cache's, the NCCL library's, logging, timeouts.
NOT_COMPILED = re.compile(r"^VLLM_(HOST_IP|CACHE_ROOT|NCCL_SO_PATH|LOGGING_.*|LOG_.*|.*TIMEOUT.*|CONFIGURE_LOGGING|NO_USAGE_STATS|DO_NOT_TRACK)$")


def folder(image_id, model, revision, argv, env):
    """The cache folder's name for this deployment on this image: ``<image ID, 12>-<digest of what is compiled, 12>``;
    None while the image's ID is unknown (an image the head builds first): the caches stay in the containers then, as
    a folder named without it could be neither kept nor let go of with its image."""
    if not image_id:
        return None
    flags = {}
    for index, arg in enumerate(argv):
        name = arg.split("=", 1)[0]
        if name in COMPILE_FLAGS:
            value = arg.split("=", 1)[1] if "=" in arg else (
                argv[index + 1] if index + 1 < len(argv) and not argv[index + 1].startswith("-") else True)
            flags[name] = value
    variables = {k: v for k, v in (env or {}).items() if k.startswith("VLLM_") and not NOT_COMPILED.match(k)}
    return "%s-%s" % (short_id(image_id), digest({"model": model, "revision": revision, "flags": flags, "env": variables}, 12))


def environment(name):
    """What names the folder in every rank's container (vLLM puts inductor's and triton's caches beside its own; the CPU
    build's inductor reads TORCHINDUCTOR_CACHE_DIR); nothing without a folder."""
    if not name:
        return {}
    return {"VLLM_CACHE_ROOT": MOUNT, "TORCHINDUCTOR_CACHE_DIR": MOUNT + "/inductor"}


def volumes(paths, name):
    """The one cache folder a rank's container mounts, read-write: its own image's and configuration's, never the
    others' (a rank running the model's own code could otherwise plant what another configuration or a later image
    loads). Docker makes it, root's, when the container is created; nothing without a folder."""
    return ["%s/%s:%s" % (paths["compile_cache_dir"], name, MOUNT)] if name else []


def kept_images(record):
    """The 12-character IDs of the images a last-known-good record keeps: each kept tag ends in one
    (records.kept_tag), and the image it serves."""
    parts = [t.rsplit("-", 1)[-1] for t in record.get("kept_images") or []] + [short_id(record.get("image_id"))]
    return [p for p in parts if len(p) == 12]


def stale(names, record):
    """The cache folders to remove: those of an image the record keeps no longer. Nothing while the record names no
    image (no ID known); a name not of this form is not ours to judge and stays."""
    keep = set(kept_images(record))
    if not keep:
        return []
    return sorted(n for n in names if len(n) == 25 and n[12] == "-" and n[:12] not in keep)
