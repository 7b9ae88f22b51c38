# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model profiles: one YAML file per deployment, data only.

A profile is found by name in the user's profile folders first, then in the collection's
``profiles/`` folder, or given as a file. Its shape is checked here so that a typo fails with the
file and the key named, before anything is planned.
"""

from __future__ import annotations

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
    "vllm": dict,
    "env": dict,
    "container": dict,
    "memory": dict,
    "smoke_tests": list,
    "notes": list,
}
REQUIRED = ("name", "model", "parallel", "vllm")
MODEL_KEYS = {"id": str, "served_name": str, "dtype": str, "weights_bytes": int, "config": dict, "config_source": str,
              "revision": str}
PARALLEL_KEYS = {"nodes": int, "tensor": int, "pipeline": int, "data": int, "expert": bool, "allow_uneven_heads": bool,
                 "uneven_heads_reason": str}
VLLM_KEYS = {"gpu_memory_utilization": float, "max_model_len": int, "kv_cache_dtype": str, "flags": dict,
             "optional_flags": list, "eager_reason": str}
MEMORY_KEYS = {"overhead_bytes": int, "kv_cache_bytes": int, "block_size": int}
CONTAINER_KEYS = {"shm_size": str, "extra_volumes": list}


class ProfileError(Exception):
    """A profile cannot be found or is malformed; the message names the file and key."""


def _check(mapping, keys, where):
    errors = []
    for key, value in mapping.items():
        if key not in keys:
            errors.append("%s: unknown key %r (known: %s)" % (where, key, ", ".join(sorted(keys))))
            continue
        want = keys[key]
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if want is int and isinstance(value, bool):
            errors.append("%s.%s must be an integer, got %r" % (where, key, value))
        elif not isinstance(value, want):
            errors.append("%s.%s must be %s, got %r" % (where, key, want.__name__, value))
    return errors


def validate(profile, path):
    """Return the list of problems in a loaded profile (empty when it is well formed)."""
    if not isinstance(profile, dict):
        return ["%s: a profile is a mapping, got %s" % (path, type(profile).__name__)]
    errors = _check(profile, SCHEMA, path)
    errors += ["%s: missing required key %r" % (path, key) for key in REQUIRED if key not in profile]
    for section, keys in (("model", MODEL_KEYS), ("parallel", PARALLEL_KEYS), ("vllm", VLLM_KEYS),
                          ("memory", MEMORY_KEYS), ("container", CONTAINER_KEYS)):
        if isinstance(profile.get(section), dict):
            errors += _check(profile[section], keys, "%s: %s" % (path, section))
    model = profile.get("model") or {}
    if isinstance(model, dict) and not model.get("id"):
        errors.append("%s: model.id is required (a Hugging Face repository or a path inside the container)" % path)
    for key, value in (profile.get("env") or {}).items():
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            errors.append("%s: env.%s must be a string or number, got %r" % (path, key, value))
    parallel = profile.get("parallel") or {}
    for key in ("tensor", "pipeline", "data", "nodes"):
        if isinstance(parallel, dict) and key in parallel and (not isinstance(parallel[key], int) or parallel[key] < 1):
            errors.append("%s: parallel.%s must be at least 1, got %r" % (path, key, parallel[key]))
    if profile.get("backend") not in (None, "ray", "mp"):
        errors.append("%s: backend must be ray or mp, got %r" % (path, profile.get("backend")))
    for index, test in enumerate(profile.get("smoke_tests") or []):
        if not isinstance(test, dict) or "name" not in test or "kind" not in test:
            errors.append("%s: smoke_tests[%d] needs a name and a kind" % (path, index))
    return errors


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
        raise ProfileError("cannot read profile %s: %s" % (path, exc.strerror or exc))
    except yaml.YAMLError as exc:
        raise ProfileError("profile %s is not valid YAML: %s" % (path, exc))
    errors = validate(profile, path)
    if errors:
        raise ProfileError("; ".join(errors))
    profile["path"] = path
    return profile
