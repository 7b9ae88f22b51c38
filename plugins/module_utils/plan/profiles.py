# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model profiles: one YAML file per deployment, data only.

A profile is found by name in the user's profile folders first, then in the collection's
``profiles/`` folder, or given as a file. Its shape is checked here so that a typo fails with the
file and the key named, before anything is planned.
"""

from __future__ import annotations

import difflib
import os

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML comes with ansible-core
    yaml = None

SCHEMA = {
    "name": str,
    "description": str,
    "source": str,
    "model": dict,
    "parallel": dict,
    "backend": str,
    "ray": dict,
    "vllm": dict,
    "env": dict,
    "container": dict,
    "memory": dict,
    "deviations": list,
    "smoke_tests": list,
    "canary": dict,
    "bench": dict,
    "notes": list,
    "env_unchecked": list,
}
REQUIRED = ("name", "model", "parallel", "vllm")
MODEL_KEYS = {"id": str, "served_name": str, "dtype": str, "weights_bytes": int, "config": dict, "config_source": str,
              "revision": str}
PARALLEL_KEYS = {"nodes": int, "tensor": int, "pipeline": int, "data": int, "expert": bool, "allow_uneven_heads": bool,
                 "uneven_heads_reason": str}
RAY_KEYS = {"object_store_memory": int}
VLLM_KEYS = {"gpu_memory_utilization": float, "max_model_len": int, "kv_cache_dtype": str, "flags": dict,
             "optional_flags": list, "eager_reason": str}
MEMORY_KEYS = {"overhead_bytes": int, "kv_cache_bytes": int, "block_size": int, "runtime_bytes": int, "runtime_source": str,
               "headroom_floor_bytes": int, "edge_rank_weight_factor": float, "proven_utilization": float,
               "proven_utilization_source": str}
CONTAINER_KEYS = {"shm_size": str, "extra_volumes": list}
# The correctness canary (module_utils/verify/canary.py): its prompts, and how far answers may move across a change.
CANARY_KEYS = {"prompts": list, "max_tokens": int, "seed": int, "tolerance": dict, "garbage": dict}
# bench.yml's reference lines (module_utils/plan/bench.py): the decode bound from the active parameters and their bytes,
# and the figures the write-up published, each at its concurrency.
BENCH_KEYS = {"active_params": float, "bytes_per_param": float, "bytes_source": str, "published": list}
DEVIATION_KEYS = {"what": str, "writeup": str, "profile": str, "reason": str, "restore": dict}
SMOKE_KINDS = ("chat", "no_control_tokens", "tool_call", "reasoning")
# Inventory variables a deviation may name to restore the write-up's value, and the planner input each one sets
# (the preflight role passes them in exactly these places; tests/static checks that it does).
RESTORE_VARIABLES = {
    "vllm_nccl_transport": ("settings", "nccl_transport"),
    "vllm_nccl_library": ("settings", "nccl_library"),
    "vllm_memory_headroom_floor_gib": ("settings", "memory_headroom_floor_gib"),
    "vllm_gpu_memory_utilization": ("overrides", "gpu_memory_utilization"),
    "vllm_max_model_len": ("overrides", "max_model_len"),
    "vllm_extra_flags": ("extra_flags", None),
    "vllm_extra_env": ("extra_env", None),
}
# Environment variables the Sparks' stack reads (NCCL's, vLLM's, Ray's, the hub's, PyTorch's) that a profile is likely to
# set. A profile's env name one letter away from one of them is a typo that would be ignored in silence (vLLM and NCCL
# read only the names they know); a name close to none of them is left alone. env_unchecked accepts a name as it is.
KNOWN_ENV = frozenset("""
NCCL_ALGO NCCL_BUFFSIZE NCCL_CROSS_NIC NCCL_CUMEM_ENABLE NCCL_DEBUG NCCL_DEBUG_FILE NCCL_DEBUG_SUBSYS NCCL_IB_DISABLE
NCCL_IB_GID_INDEX NCCL_IB_HCA NCCL_IB_QPS_PER_CONNECTION NCCL_IB_RETRY_CNT NCCL_IB_ROCE_VERSION_NUM NCCL_IB_SL
NCCL_IB_SUBNET_AWARE_ROUTING NCCL_IB_SUBNET_PREFIX_LEN NCCL_IB_TC NCCL_IB_TIMEOUT NCCL_IGNORE_CPU_AFFINITY
NCCL_MAX_NCHANNELS NCCL_MIN_NCHANNELS NCCL_MAX_CTAS NCCL_MIN_CTAS NCCL_NET NCCL_NET_GDR_LEVEL NCCL_NSOCKS_PERTHREAD
NCCL_NVLS_ENABLE NCCL_P2P_DISABLE NCCL_PROTO NCCL_SOCKET_IFNAME NCCL_SOCKET_NTHREADS
VLLM_ALL2ALL_BACKEND VLLM_ALLOW_LONG_MAX_MODEL_LEN VLLM_ATTENTION_BACKEND VLLM_CPU_KVCACHE_SPACE
VLLM_ENGINE_ITERATION_TIMEOUT_S VLLM_FLASHINFER_ALLREDUCE_BACKEND VLLM_FLASHINFER_MOE_BACKEND VLLM_HOST_IP
VLLM_LOGGING_LEVEL VLLM_MARLIN_USE_ATOMIC_ADD VLLM_MLA_DISABLE VLLM_NVFP4_GEMM_BACKEND VLLM_PORT VLLM_RPC_TIMEOUT
VLLM_SLEEP_WHEN_IDLE VLLM_TEST_FORCE_FP8_MARLIN VLLM_USE_DEEP_GEMM VLLM_USE_FLASHINFER_MOE_FP4
VLLM_USE_FLASHINFER_MOE_FP8 VLLM_USE_FLASHINFER_SAMPLER VLLM_USE_RAY_COMPILED_DAG VLLM_USE_RAY_SPMD_WORKER VLLM_USE_V1
VLLM_WORKER_MULTIPROC_METHOD
RAY_DEDUP_LOGS RAY_USAGE_STATS_ENABLED GLOO_SOCKET_IFNAME UCX_NET_DEVICES OMP_NUM_THREADS TOKENIZERS_PARALLELISM
PYTORCH_CUDA_ALLOC_CONF CUDA_DEVICE_MAX_CONNECTIONS CUDA_VISIBLE_DEVICES TORCH_CUDA_ARCH_LIST
TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_NCCL_BLOCKING_WAIT
HF_ENDPOINT HF_HOME HF_HUB_DISABLE_TELEMETRY HF_HUB_ENABLE_HF_TRANSFER HF_HUB_OFFLINE
""".split())
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a mapping",
               list: "a list"}


class ProfileError(Exception):
    """A profile cannot be found or is malformed; the message names the file and key."""


def _check(mapping, keys, where):
    errors = []
    for key, value in mapping.items():
        if key not in keys:
            errors.append("%s: unknown key %r (value %r); fix the spelling or remove it. Known keys: %s"
                          % (where, key, value, ", ".join(sorted(keys))))
            continue
        want = keys[key]
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if (want is int and isinstance(value, bool)) or not isinstance(value, want):
            errors.append("%s.%s is %r; it must be %s" % (where, key, value, _TYPE_NAMES[want]))
    return errors


def validate(profile, path):
    """Return the list of problems in a loaded profile (empty when it is well formed)."""
    if not isinstance(profile, dict):
        return ["%s: a profile is a mapping of keys (name, model, parallel, vllm, ...), got %s; see docs/profiles.md"
                % (path, type(profile).__name__)]
    errors = _check(profile, SCHEMA, path)
    errors += ["%s: the required key %r is missing; add it (see docs/profiles.md)" % (path, key)
               for key in REQUIRED if key not in profile]
    for section, keys in (("model", MODEL_KEYS), ("parallel", PARALLEL_KEYS), ("vllm", VLLM_KEYS), ("ray", RAY_KEYS),
                          ("memory", MEMORY_KEYS), ("container", CONTAINER_KEYS), ("canary", CANARY_KEYS), ("bench", BENCH_KEYS)):
        if isinstance(profile.get(section), dict):
            errors += _check(profile[section], keys, "%s: %s" % (path, section))
    for index, figure in enumerate(((profile.get("bench") or {}).get("published") or []) if isinstance(profile.get("bench"), dict) else []):
        wrong = [k for k in ("concurrency", "output_tokens_per_s") if not isinstance((figure or {}).get(k) if isinstance(figure, dict) else None, (int, float))]
        wrong += [k for k in ("input_len", "output_len") if isinstance(figure, dict) and figure.get(k) is not None and not isinstance(figure[k], int)]
        if wrong:
            errors.append("%s: bench.published[%d] needs a number for %s ({concurrency, output_tokens_per_s, source}, and "
                          "input_len and output_len where the write-up gives them)" % (path, index, ", ".join(wrong)))
    model = profile.get("model") or {}
    if isinstance(model, dict) and not model.get("id"):
        errors.append("%s: model.id is missing; set it to a Hugging Face repository (org/name) or a path under /models" % path)
    for key, value in (profile.get("env") or {}).items() if isinstance(profile.get("env"), dict) else ():
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            errors.append("%s: env.%s is %r; quote it as a string (\"%s\")" % (path, key, value, value))
    unchecked = profile.get("env_unchecked") if isinstance(profile.get("env_unchecked"), list) else []
    for key in (profile.get("env") or {}) if isinstance(profile.get("env"), dict) else ():
        close = difflib.get_close_matches(str(key), KNOWN_ENV, n=1, cutoff=0.9)
        if key not in KNOWN_ENV and key not in unchecked and close:
            errors.append("%s: env.%s is not a variable the stack reads; did you mean %s? A misspelt name is ignored in "
                          "silence. Fix it, or list %s in env_unchecked if it is right" % (path, key, close[0], key))
    vllm = profile.get("vllm") if isinstance(profile.get("vllm"), dict) else {}
    for flag, value in (vllm.get("flags") or {}).items() if isinstance(vllm.get("flags"), dict) else ():
        if not str(flag).startswith("-"):
            errors.append("%s: vllm.flags key %r is not a flag; write it as vLLM does (--%s)" % (path, flag, flag))
        if isinstance(value, dict):
            errors.append("%s: vllm.flags.%s is a mapping; give JSON options as one quoted string" % (path, flag))
    utilization = vllm.get("gpu_memory_utilization")
    if isinstance(utilization, (int, float)) and not isinstance(utilization, bool) and not 0 < utilization <= 1:
        errors.append("%s: vllm.gpu_memory_utilization is %r; it must be above 0 and at most 1" % (path, utilization))
    parallel = profile.get("parallel") or {}
    for key in ("tensor", "pipeline", "data", "nodes"):
        if isinstance(parallel, dict) and isinstance(parallel.get(key), int) and parallel[key] < 1:
            errors.append("%s: parallel.%s must be at least 1, got %r" % (path, key, parallel[key]))
    if profile.get("backend") not in (None, "ray", "mp"):
        errors.append("%s: backend is %r; it must be ray or mp" % (path, profile.get("backend")))
    for index, test in enumerate(profile.get("smoke_tests") or [] if isinstance(profile.get("smoke_tests"), list) else []):
        if not isinstance(test, dict) or "name" not in test or "kind" not in test:
            errors.append("%s: smoke_tests[%d] needs a name and a kind (%s)" % (path, index, ", ".join(SMOKE_KINDS)))
        elif test["kind"] not in SMOKE_KINDS:
            errors.append("%s: smoke_tests[%d].kind is %r; it must be one of %s" % (path, index, test["kind"], ", ".join(SMOKE_KINDS)))
    for index, entry in enumerate(profile.get("deviations") or [] if isinstance(profile.get("deviations"), list) else []):
        where = "%s: deviations[%d]" % (path, index)
        if not isinstance(entry, dict):
            errors.append("%s is %r; each deviation is a mapping of what, writeup, profile, reason, restore" % (where, entry))
            continue
        errors += _check(entry, DEVIATION_KEYS, where)
        errors += ["%s: %r is missing; a deviation says what differs, why, and which inventory variable restores it"
                   % (where, key) for key in DEVIATION_KEYS if key not in entry]
        for variable in (entry.get("restore") or {}) if isinstance(entry.get("restore"), dict) else ():
            if variable not in RESTORE_VARIABLES:
                errors.append("%s.restore names %r, which is not an inventory variable the planner reads; use one of %s"
                              % (where, variable, ", ".join(sorted(RESTORE_VARIABLES))))
    return errors


def apply_variables(inputs, variables):
    """Planner ``inputs`` with inventory ``variables`` (names of RESTORE_VARIABLES) applied, as the preflight role
    passes them: a deviation's ``restore`` gives back the write-up's value."""
    result = dict(inputs)
    for variable, value in (variables or {}).items():
        section, key = RESTORE_VARIABLES[variable]
        if key is None:
            result[section] = dict(result.get(section) or {}, **value)
        else:
            result[section] = dict(result.get(section) or {}, **{key: value})
    return result


def available(dirs):
    names = set()
    for folder in dirs:
        try:
            names.update(os.path.splitext(f)[0] for f in os.listdir(folder) if f.endswith((".yml", ".yaml")))
        except OSError:
            continue
    return sorted(names)


def find(name, dirs):
    """Path of profile ``name`` in the first folder of ``dirs`` that has it."""
    if not name or "/" in name or name.startswith("."):
        raise ProfileError("profile name %r is not a plain name; give a file with vllm_profile_file" % (name,))
    for folder in dirs:
        for extension in (".yml", ".yaml"):
            path = os.path.join(folder, name + extension)
            if os.path.isfile(path):
                return path
    raise ProfileError("unknown profile %r; available: %s (or give your own file with vllm_profile_file)"
                       % (name, ", ".join(available(dirs)) or "none"))


def load(path):
    """Load and validate one profile file."""
    if yaml is None:
        raise ProfileError("PyYAML is needed to read profiles")
    try:
        with open(path, encoding="utf-8") as handle:
            profile = yaml.safe_load(handle)
    except OSError as exc:
        raise ProfileError("cannot read profile %s: %s; check the path given in vllm_profile_file (relative paths are "
                           "taken from where ansible-playbook runs)" % (path, exc.strerror or exc))
    except yaml.YAMLError as exc:
        raise ProfileError("profile %s is not valid YAML; fix the line it names: %s" % (path, exc))
    errors = validate(profile, path)
    if errors:
        raise ProfileError("profile %s has %d problem(s):\n- %s" % (path, len(errors), "\n- ".join(errors)))
    profile["path"] = path
    return profile
