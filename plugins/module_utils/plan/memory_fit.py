# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a node's memory admits vLLM: the one set of figures the memory plan, the probe's page-cache drop and the
supervisor read (issue 34: one memory model everywhere).

- The pool vLLM sizes is CUDA's total, on a GB10 119.67 GiB, not MemTotal's 121.69 GiB (seed 001, line 20:
  "Free memory on device cuda:0 (11.19/119.67 GiB)"; seed 003, line 10: "119.7 GB GPU memory per node").
- vLLM requests ``ceil(CUDA's total x utilization)`` and refuses to start when MemAvailable is below it
  (vllm/v1/worker/utils.py ``request_memory``; on an integrated GPU free memory is MemAvailable).
- The plan keeps, beside that pool, what vLLM's processes use (the profile's ``memory.runtime_bytes``) and a floor
  left to the OS (fact 21: a starved Spark stops answering SSH).

Pure functions; no Ansible imports (the supervisor carries a copy of this file).
"""

from __future__ import annotations

import math

GIB = 1024 ** 3
GB10_CUDA_TOTAL_BYTES = int(119.67 * GIB)


def cuda_total(memory):
    """What CUDA reports as the device's memory: on a GB10 (unified) 119.67 GiB, else MemTotal."""
    total = int(memory.get("mem_total_bytes") or 0)
    gpu = memory.get("gpu") or {}
    if memory.get("unified") and "GB10" in str(gpu.get("name") or ""):
        return min(total, GB10_CUDA_TOTAL_BYTES)
    return total


def needed_bytes(cuda_total_bytes, utilization, runtime_bytes=0, floor_bytes=None):
    """What a node must have available for vLLM to start and the plan to accept it: vLLM's request (``ceil(cuda_total x
    utilization)``) and, with a floor, the runtime beside the pool and the floor."""
    requested = int(math.ceil(cuda_total_bytes * utilization))
    return requested + (runtime_bytes + floor_bytes if floor_bytes is not None else 0)


def admits(cuda_total_bytes, available, utilization, runtime_bytes=0, floor_bytes=None):
    """Whether ``available`` bytes (MemAvailable) admit vLLM at ``utilization`` with the runtime and the floor kept: the
    plan's refusal (memory_model.plan) and the probe's page-cache drop (:func:`verdict`) both ask this."""
    return available >= needed_bytes(cuda_total_bytes, utilization, runtime_bytes, floor_bytes)


def verdict(cuda_total_bytes, available, available_after_drop, utilization, need=None):
    """The probe's memory verdict at ``utilization`` with what the plan keeps beside the pool (``need``: the memory
    plan's ``runtime_bytes`` and ``floor_bytes``, plan/memory.need): whether the node fits now, whether it would after
    dropping page caches, and ``drop_caches``, the preflight's decision: drop them where the plan would refuse the node
    now and accept it after the drop (fact 2)."""
    need = need or {}
    runtime, floor = int(need.get("runtime_bytes") or 0), need.get("floor_bytes")
    needed = needed_bytes(cuda_total_bytes, utilization, runtime, floor)
    fits = admits(cuda_total_bytes, available, utilization, runtime, floor)
    after = admits(cuda_total_bytes, available_after_drop, utilization, runtime, floor)
    return {"gpu_memory_utilization": utilization, "cuda_total_bytes": cuda_total_bytes,
            "vllm_requested_bytes": needed_bytes(cuda_total_bytes, utilization), "needed_bytes": needed,
            "fits": fits, "shortfall_bytes": max(0, needed - available), "fits_after_drop_caches": after,
            "drop_caches": not fits and after}


def utilization_keeping(available, keep, cuda_total_bytes):
    """The largest utilization (two decimals, rounded down) that leaves ``keep`` bytes of ``available``."""
    if not cuda_total_bytes:
        return 0.0
    return max(0.0, math.floor(100.0 * (available - keep) / cuda_total_bytes) / 100.0)


def cuda_hidden_bytes(mem_free_bytes, cuda_free_bytes):
    """Memory CUDA counts as used that /proc/meminfo does not: on unified memory cudaMemGetInfo's free is about
    MemFree (the page cache counts as used on both sides: technical facts 3.2, cudaMemGetInfo 2.77 GiB free while
    MemAvailable said 52 GiB), so what CUDA misses beyond MemFree is held by the driver, unseen by the kernel's
    accounting. Seed 002, lines 11-13: after a container killed hard "nvidia-smi shows 0 MB used. free -g shows plenty
    of RAM", while the next start saw pre_model_load_memory=33.77 (GiB CUDA-free)."""
    return max(0, int(mem_free_bytes) - int(cuda_free_bytes))


def pinned(name, meminfo_unaccounted_bytes, limit_bytes, mem_free_bytes=None, cuda=None):
    """Why ``name`` must be rebooted before a launch, as (the bytes held, the refusal), or None: pinned memory seen by
    either reading. ``meminfo_unaccounted_bytes`` is the probe's ``unaccounted_bytes`` (/proc/meminfo); ``cuda`` is
    cudaMemGetInfo as vLLM sees it, read through the node's driver ({"free_bytes", "total_bytes"}:
    probe/unified_memory.cuda_mem_info; ``{"unanswered_seconds"}`` where the driver gave no answer in time), beside
    /proc/meminfo's MemFree (``mem_free_bytes``)."""
    fix = "memory pinned by a container that was killed hard. Nothing but a reboot frees it; reboot %s before launching" % name
    if cuda and cuda.get("unanswered_seconds") is not None:  # probe/unified_memory.cuda_mem_info_bounded: not no driver
        waited = ("an earlier read of it still waits" if cuda.get("earlier")
                  else "it gave no answer within %g s" % cuda["unanswered_seconds"])
        return ("no answer in %g s" % cuda["unanswered_seconds"],
                "%s: CUDA's driver does not answer (%s: cuInit or cuMemGetInfo waiting, as a GPU fault leaves it), and vLLM "
                "would wait on it for ever. Look again in a minute; if it still does not answer, nothing but a reboot clears "
                "it: reboot %s before launching" % (name, waited, name))
    unaccounted = int(meminfo_unaccounted_bytes or 0)
    if unaccounted >= limit_bytes:
        return unaccounted, ("%s holds %.1f GiB that no process, GPU context or kernel structure explains: %s"
                             % (name, unaccounted / float(GIB), fix))
    hidden = cuda_hidden_bytes(mem_free_bytes, cuda["free_bytes"]) if cuda and mem_free_bytes is not None else 0
    if hidden >= limit_bytes:
        return hidden, ("%s: CUDA sees %.1f GiB free of %.1f GiB (cuMemGetInfo, as vLLM reads it) where /proc/meminfo has "
                        "%.1f GiB free: %.1f GiB held that neither nvidia-smi nor free shows: %s"
                        % (name, cuda["free_bytes"] / float(GIB), cuda["total_bytes"] / float(GIB), mem_free_bytes / float(GIB),
                           hidden / float(GIB), fix))
    return None
