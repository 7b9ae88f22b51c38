# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated GB10's side of a vLLM rank (runtime image of the simulated cluster only).

On a DGX Spark a rank claims ``utilization x 119.67 GiB`` of the node's unified memory for its pool, and the node's
MemAvailable drops by as much; nvidia-smi lists the rank with that memory. vLLM's CPU build claims nothing of the
kind, so patch 3 of patch_vllm_cpu.py calls ``hold()`` when a rank starts. It writes an entry in the node's shared
memory (``/dev/shm``, which ``--ipc host`` shares with the node) and keeps it locked for the rank's life; the node's
memory stand-in (gb10_memory.py) counts it while the lock is held and decides what happens when the rank is gone.
Reading the weights also leaves them in the node's page cache (a ``cache`` entry, until caches are dropped).
"""

import fcntl
import json
import math
import os
import uuid

LEDGER = "/dev/shm/dgx-spark-sim-gb10"
GB10_CUDA_TOTAL_BYTES = int(119.67 * 1024 ** 3)  # what CUDA reports on a GB10 (seed 001, seed 003)
_HELD = []  # the locked entry's descriptor, open for the rank's life


def _write(name, entry, lock=False):
    os.makedirs(LEDGER, mode=0o1777, exist_ok=True)
    temporary = os.path.join(LEDGER, ".%s.tmp" % name)
    fd = os.open(temporary, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    if lock:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _HELD.append(fd)
    os.write(fd, json.dumps(entry).encode())
    os.rename(temporary, os.path.join(LEDGER, name))
    if not lock:
        os.close(fd)


def weights_bytes(model):
    if not os.path.isdir(model):
        return 0
    return sum(os.path.getsize(os.path.join(model, name)) for name in os.listdir(model)
               if name.endswith((".safetensors", ".bin", ".pt")))


def hold(vllm_config):
    """Claim this rank's pool on the simulated node; never fails the rank."""
    try:
        utilization = float(vllm_config.cache_config.gpu_memory_utilization)
        model = str(vllm_config.model_config.model)
        pool = int(math.ceil(GB10_CUDA_TOTAL_BYTES * utilization))
        _write("rank-%s" % uuid.uuid4().hex, {"kind": "rank", "bytes": pool, "utilization": utilization, "model": model}, lock=True)
        cached = weights_bytes(model)
        if cached:
            _write("cache-%s" % uuid.uuid5(uuid.NAMESPACE_URL, model).hex, {"kind": "cache", "bytes": cached, "model": model})
    except (OSError, AttributeError, TypeError, ValueError) as exc:
        print("dgx_spark_sim_gb10: the simulated GB10 did not record this rank: %s" % exc)
