# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unified memory facts of one node: /proc/meminfo, processes and nvidia-smi.

On a GB10 the GPU has no memory of its own: CUDA allocations come out of the same pool as
the page cache and are invisible in a process's RSS. vLLM on an integrated GPU checks
MemAvailable against total x gpu_memory_utilization at start-up. A container killed hard can
leave memory pinned that no live process, GPU context or kernel structure explains; this
module calls that ``unaccounted_bytes``.

Pure functions over text and a proc tree, and one read of CUDA's own figures through the node's driver
(:func:`cuda_mem_info`, its library injectable); no Ansible imports, so the units test them directly.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import time

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import memory_fit
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.errors import ProbeError

KIB = 1024
MIB = 1024 * 1024
CUDA_READ_SECONDS = 10  # what a driver that answers needs many times over (a context is made and destroyed)

# nvidia-smi's words for "this GPU does not report memory of its own" (GB10: "[N/A]").
_NO_MEMORY = ("[n/a]", "n/a", "[not supported]", "not supported", "")


def parse_meminfo(text, path="/proc/meminfo"):
    """Return the fields of a meminfo text in bytes (counts such as HugePages_Total stay counts)."""
    values = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or not fields:
            continue
        try:
            number = int(fields[0])
        except ValueError:
            continue
        unit = fields[1] if len(fields) > 1 else ""
        values[key.strip()] = number * KIB if unit == "kB" else number
    if "MemTotal" not in values:
        raise ProbeError("%s has no MemTotal line; is proc_root a proc filesystem?" % path)
    return values


def parse_status(text):
    """Return name, ppid and memory (bytes) of one /proc/<pid>/status text."""
    fields = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if sep:
            fields[key] = rest.strip()

    def kib(name):
        value = fields.get(name, "0 kB").split()
        try:
            return int(value[0]) * KIB
        except (IndexError, ValueError):
            return 0

    try:
        ppid = int(fields.get("PPid", "0"))
    except ValueError:
        ppid = 0
    return {
        "name": fields.get("Name", ""),
        "ppid": ppid,
        "rss_bytes": kib("VmRSS"),
        "rss_anon_bytes": kib("RssAnon"),
        "rss_shmem_bytes": kib("RssShmem"),
    }


def read_processes(proc_root):
    """Read every <proc_root>/<pid>/status; processes that vanish while reading are skipped."""
    processes = []
    try:
        entries = os.listdir(proc_root)
    except OSError as exc:
        raise ProbeError("cannot list %s: %s" % (proc_root, exc.strerror or exc))
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, entry, "status"), encoding="utf-8", errors="replace") as handle:
                status = parse_status(handle.read())
        except OSError:
            continue
        status["pid"] = int(entry)
        processes.append(status)
    return sorted(processes, key=lambda p: p["pid"])


def vllm_processes(processes):
    """vLLM engine and worker processes; orphaned ones (parent gone or init) outlive their server.

    A killed API server leaves ``VLLM::EngineCore`` and ``VLLM::Worker_*`` alive, holding weights.
    """
    pids = {p["pid"] for p in processes}
    found = []
    for proc in processes:
        if not proc["name"].startswith("VLLM::"):
            continue
        orphan = proc["ppid"] in (0, 1) or proc["ppid"] not in pids
        found.append({
            "pid": proc["pid"],
            "ppid": proc["ppid"],
            "name": proc["name"],
            "rss_bytes": proc["rss_bytes"],
            "orphan": orphan,
        })
    return found


def _csv_rows(text):
    for line in text.splitlines():
        line = line.strip()
        if line:
            yield [cell.strip() for cell in line.split(",")]


def parse_gpu_query(text):
    """Parse ``nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader,nounits``.

    Returns one dict per GPU. ``memory_total_bytes`` is None when the GPU reports no memory of its
    own (GB10 answers ``[N/A]``), which is what ``unified`` means.
    """
    gpus = []
    for row in _csv_rows(text):
        if len(row) < 4:
            raise ProbeError("unexpected nvidia-smi --query-gpu line: %r" % ",".join(row))
        name, driver, capability, memory = row[:4]
        memory_bytes = None
        if memory.lower() not in _NO_MEMORY:
            try:
                memory_bytes = int(float(memory) * MIB)
            except ValueError:
                memory_bytes = None
        gpus.append({
            "name": name,
            "driver": driver,
            "compute_capability": capability,
            "memory_total_bytes": memory_bytes,
            "unified": memory_bytes is None,
        })
    return gpus


# nvidia-smi's arguments whose output parse_compute_apps reads (the probe and the supervisor's node figures ask it).
APPS_QUERY = ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"]


def parse_compute_apps(text):
    """Parse ``nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits``.

    Per-process GPU memory works on GB10 even though the totals are [N/A]. Values in MiB.
    """
    apps = []
    for row in _csv_rows(text):
        if len(row) < 3 or row[0].lower().startswith("no running"):
            continue
        try:
            pid = int(row[0])
        except ValueError:
            continue
        try:
            used = int(float(row[2]) * MIB)
        except ValueError:
            used = None
        apps.append({"pid": pid, "process_name": row[1], "used_bytes": used})
    return apps


def summarize(meminfo, gpus=None, compute_apps=None, processes=None, gpu_memory_utilization=None, need=None):
    """Combine the parsed inputs into the ``unified_memory`` fact.

    used        = MemTotal - MemAvailable
    explained   = AnonPages (all user anonymous memory, host-wide, no double counting)
                + cache MemAvailable does not count as available (Shmem and the kernel's reserve)
                + kernel structures (SUnreclaim, KernelStack, PageTables, SecPageTables, Percpu, huge pages)
                + GPU memory of live compute processes (nvidia-smi; invisible to RSS on GB10)
    unaccounted = used - explained, never below zero
    """
    total = meminfo["MemTotal"]
    free = meminfo.get("MemFree", 0)
    available = meminfo.get("MemAvailable")
    estimated_available = available is None
    buffers = meminfo.get("Buffers", 0)
    cached = meminfo.get("Cached", 0)
    shmem = meminfo.get("Shmem", 0)
    reclaimable_slab = meminfo.get("SReclaimable", 0)
    if available is None:  # kernels before 3.14
        available = free + buffers + cached - shmem + reclaimable_slab
    page_cache = max(0, buffers + cached - shmem)

    kernel = sum(meminfo.get(key, 0) for key in ("SUnreclaim", "KernelStack", "PageTables", "SecPageTables", "Percpu"))
    kernel += meminfo.get("HugePages_Total", 0) * meminfo.get("Hugepagesize", 0)
    cache_held = max(0, buffers + cached + reclaimable_slab - max(0, available - free))
    apps = compute_apps or []
    gpu_process_bytes = sum(app["used_bytes"] or 0 for app in apps)
    used = max(0, total - available)
    explained = meminfo.get("AnonPages", 0) + cache_held + kernel + gpu_process_bytes
    unaccounted = max(0, used - explained)

    gpu = gpus[0] if gpus else None
    fact = {
        "mem_total_bytes": total,
        "mem_available_bytes": available,
        "mem_available_estimated": estimated_available,
        "mem_free_bytes": free,
        "mem_used_bytes": used,
        "page_cache_bytes": page_cache,
        "shmem_bytes": shmem,
        "anon_bytes": meminfo.get("AnonPages", 0),
        "kernel_bytes": kernel,
        "unified": gpu["unified"] if gpu else None,
        "gpu": gpu,
        "gpu_count": len(gpus or []),
        "gpu_processes": apps,
        "gpu_process_bytes": gpu_process_bytes,
        "explained_bytes": explained,
        "unaccounted_bytes": unaccounted,
        "vllm_processes": vllm_processes(processes or []),
    }
    if gpu_memory_utilization is not None:
        fact.update(fit(memory_fit.cuda_total(fact), available, free + page_cache + reclaimable_slab, gpu_memory_utilization, need))
    return fact


def fit(cuda_total, available, available_after_drop, utilization, need=None):
    """What vLLM requests at start-up on an integrated GPU, and whether MemAvailable covers it with what the plan keeps
    beside it (``need``: the memory plan's ``runtime_bytes`` and ``floor_bytes``, plan/memory.need).

    vLLM: requested = ceil(CUDA's total x utilization); it refuses when free (MemAvailable on UMA) < requested. The
    plan refuses, too, when what is left beside the pool and its processes is under the floor. The verdict is the
    plan's own (plan/memory_fit.verdict, which asks memory_fit.admits as the plan does), and so is ``drop_caches``,
    the preflight's decision: a node the plan would refuse that dropping page caches would cure gets them dropped.
    """
    validate_utilization(utilization)
    return memory_fit.verdict(cuda_total, available, available_after_drop, utilization, need)


def cuda_mem_info(library="libcuda.so.1", loader=None):
    """CUDA's own free and total bytes on device 0, {"free_bytes", "total_bytes"}, read through the node's driver
    (cuMemGetInfo, the call under the cudaMemGetInfo vLLM's MemorySnapshot and torch.cuda.mem_get_info make: one driver
    answers the host and every container alike); None where the node has no CUDA driver (the simulated nodes) or it
    answers with an error (one that gives no answer at all is bounded by :func:`cuda_mem_info_bounded`). On a GB10 the
    free figure is about MemFree; memory a killed container left pinned is missing from it while /proc/meminfo and
    nvidia-smi see nothing (seed 002, lines 11-13). A context is made and destroyed here:
    read it where nothing of ours runs (node_read), not beside a serving vLLM."""
    try:
        cuda = (loader or ctypes.CDLL)(library)
    except OSError:
        return None
    device, context = ctypes.c_int(), ctypes.c_void_p()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    try:
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), 0) != 0:
            return None
        if cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device) != 0:
            return None
        try:
            answered = cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
        finally:
            cuda.cuCtxDestroy_v2(context)
    except AttributeError:  # a library of that name without the driver's calls (a stub)
        return None
    if not answered or not 0 <= free.value <= total.value or total.value == 0:
        return None
    return {"free_bytes": int(free.value), "total_bytes": int(total.value)}


# The children of earlier reads not reaped yet (one stuck in the driver): a caller that lives on (the supervisor, a look
# every few seconds) reads again only once the last one has gone, so a wedged driver costs it one process, not one a look.
UNREAPED = set()


def reap():
    """Reap the children of earlier reads that have gone; True while one is still there."""
    for pid in list(UNREAPED):
        try:
            if not os.waitpid(pid, os.WNOHANG)[0]:
                continue
        except ChildProcessError:
            pass
        UNREAPED.discard(pid)
    return bool(UNREAPED)


def cuda_mem_info_bounded(seconds=CUDA_READ_SECONDS, read=cuda_mem_info):
    """:func:`cuda_mem_info` in a child process given ``seconds``: a driver that does not answer (a GPU fault can leave
    cuInit waiting) costs the probe or the supervisor those seconds, never a run that waits for ever, and reads as
    ``{"unanswered_seconds": seconds}``, not as no driver (None): vLLM would wait on that driver too, so the plan and
    the supervisor refuse a launch with it (plan/memory_fit.pinned).
    The child holds nothing of its parent's but the pipe it answers through (not the module's output, which would keep
    an SSH session open, nor the supervisor's listening socket); it is killed at the deadline and reaped when it goes
    (one stuck in the driver goes when the driver lets it, and no other read starts meanwhile: no answer, ``earlier``)."""
    if reap():
        return {"unanswered_seconds": seconds, "earlier": True}
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its parent's files closed, read, answer through the pipe, and leave at once
        code = 1
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, writable)
            os.closerange(writable + 1, os.sysconf("SC_OPEN_MAX"))
            os.write(writable, json.dumps(read()).encode("ascii"))
            code = 0
        finally:
            os._exit(code)  # pylint: disable=protected-access
    UNREAPED.add(pid)
    os.close(writable)
    answer, answered = b"", False
    try:
        if select.select([readable], [], [], seconds)[0]:  # an answer, or the pipe closed by a child that failed
            answered = True
            answer = os.read(readable, 4096)
    finally:
        os.close(readable)
        if not answer:
            os.kill(pid, signal.SIGKILL)
    for dummy in range(20):  # it answered and leaves, or was killed: gone within a moment, unless stuck in the driver
        reap()
        if pid not in UNREAPED:
            break
        time.sleep(0.05)
    if not answered:
        return {"unanswered_seconds": seconds}
    try:
        return json.loads(answer.decode("ascii")) if answer else None
    except ValueError:
        return None


def validate_utilization(utilization):
    if not isinstance(utilization, (int, float)) or isinstance(utilization, bool) or not 0 < utilization <= 1:
        raise ProbeError("gpu_memory_utilization must be in (0, 1], got %r" % (utilization,))
