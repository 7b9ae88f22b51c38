# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How far a wait is: the line the progress callback prints per poll, and the progress the waits read. Pure.

Every wait of the collection is a loop of short looks (``until`` with ``retries`` and ``delay``), each look returning
``progress``: one line saying what it waits for now. The figures come from what the node shows: vLLM's own log while
it loads (its shard count, its graph capture), Ray's count of joined nodes, the bytes a copy moved so far.
"""

from __future__ import annotations

import re

GIB = 1024 ** 3
MIB = 1024 ** 2

# vLLM's log lines while it loads, in the order they come, and what each says of the load (vLLM 0.1x-0.3x; a line
# that does not match leaves the previous figure). The shard line is tqdm's, rewritten in place with \r.
_SHARDS = re.compile(r"Loading (?:safetensors|pt) checkpoint shards:\s+(\d+)% Completed \| (\d+)/(\d+)")
_STAGES = (
    (re.compile(r"Starting vLLM API server|vLLM API server version"), "vLLM's API server starting"),
    (re.compile(r"Initializing a V1 LLM engine|Initializing an LLM engine"), "engine starting"),
    (re.compile(r"Connecting to existing Ray cluster|Started a local Ray instance"), "ranks starting"),
    (re.compile(r"Starting to load model"), "loading the weights"),
    (re.compile(r"Model loading took ([0-9.]+) ?GiB"), "weights loaded ({0} GiB per rank)"),
    (re.compile(r"Memory profiling takes|Available KV cache memory|KV cache size|GiB for KV cache"), "sizing the KV cache"),
    (re.compile(r"Capturing CUDA graphs?|Capturing cudagraphs"), "capturing CUDA graphs"),
    (re.compile(r"torch.compile takes|Compiling a graph"), "compiling"),
    (re.compile(r"Starting vLLM server on|Application startup complete"), "serving, answering /health next"),
)


def load_progress(lines):
    """What vLLM's log says of its load: the last stage reached, with the shard count while shards load; None when
    the log says nothing yet."""
    said = None
    for line in lines:
        for part in line.split("\r"):
            shards = _SHARDS.search(part)
            if shards:
                said = "loading the weights: %s of %s shards (%s%%)" % (shards.group(2), shards.group(3), shards.group(1))
                continue
            for pattern, text in _STAGES:
                found = pattern.search(part)
                if found and not (said or "").startswith(text + ":"):  # the ranks' lines interleave: a count stays
                    said = text.format(*found.groups())
    return said


def size(count):
    return "%.1f GiB" % (count / GIB) if count >= GIB else "%.0f MiB" % (count / MIB)


def copied(done, total):
    """``1.2 GiB of 4.7 GiB (26%)`` (without a total: ``1.2 GiB``)."""
    if not total:
        return size(done) + " copied"
    return "%s of %s (%d%%)" % (size(done), size(total), min(100, int(100 * done / total)))


def dd_bytes(text):
    """The last byte count ``dd status=progress`` wrote (lines rewritten with \\r): ``123 bytes (...) copied``."""
    found = re.findall(r"(\d+) bytes(?: \([^)]*\))? copied", text or "")
    return int(found[-1]) if found else 0


def joined(alive, expected, gpus, expected_gpus):
    return "%d of %d nodes joined Ray, %g of %d GPUs" % (alive, expected, gpus, expected_gpus)


def waiting_line(task, host, answer):
    """The callback's line for one poll of ``task`` on ``host``: what the look's ``progress`` says, and the time."""
    attempts, retries = answer.get("attempts") or 0, answer.get("retries") or 0
    # A failed look's message says why (Ray's "not ready: 1 of 2 nodes alive"); a look that answered but did not meet the
    # condition says nothing more than its module's "OK".
    said = answer.get("progress") or (answer.get("msg") if answer.get("failed") else None) or "not yet"
    return "... waiting [%s] %s - %s (look %d of at most %d)" % (host, task, " ".join(str(said).split()), attempts, retries)
