# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Environment parity: what runs, read back from every container and rank, against the plan (fact 7).

Kernel-selecting variables must be identical on every rank, and per-node values (interfaces, HCAs,
GID index, VLLM_HOST_IP) must be each node's own. vLLM's older Ray executor copies the driver's
NCCL_*/VLLM_* over the workers' values; the newer one only fills in missing ones, so a stale value
baked into a worker's image silently wins. Both show up here as a mismatch.
"""

from __future__ import annotations

WATCHED_PREFIXES = ("VLLM_", "NCCL_", "UCX_", "GLOO_", "TP_SOCKET", "PYTORCH_CUDA")
# Set by vLLM itself per process (vllm/v1/executor/ray_utils.py WORKER_SPECIFIC_ENV_VARS, the CPU worker).
PER_PROCESS = ("VLLM_HOST_PORT", "VLLM_DIST_IDENT", "VLLM_WORKER_MULTIPROC_METHOD")


def parse_env_list(items):
    """Docker's Config.Env list ("K=V") to a dict."""
    env = {}
    for item in items or []:
        key, sep, value = str(item).partition("=")
        if sep:
            env[key] = value
    return env


# The line after which a read of the ranks' environments carries the head's vLLM log (roles/vllm_serve/tasks/ranks.yml:
# one docker exec on the head reads both).
LOG_MARKER = "=== vLLM log of the head ==="


def split_read(text):
    """A read of the ranks' environments: (their environments, the vLLM log after the LOG_MARKER line, or None when the
    read carries none). The marker may end the text: Ansible's command module drops the newlines an empty log leaves."""
    lines = (text or "").split("\n")
    if LOG_MARKER not in lines:
        return text or "", None
    at = lines.index(LOG_MARKER)
    return "\n".join(lines[:at]), "\n".join(lines[at + 1:])


def parse_environ_dump(text):
    """Output of ``tr '\\0' '\\n' < /proc/PID/environ`` for several processes, separated by '---' lines (what
    follows LOG_MARKER is not an environment)."""
    blocks, current = [], {}
    for line in split_read(text)[0].splitlines():
        if line.strip() == "---":
            if current:
                blocks.append(current)
            current = {}
            continue
        key, sep, value = line.partition("=")
        if sep and key:
            current[key] = value
    if current:
        blocks.append(current)
    return blocks


def check(planned, actual, what="container"):
    """Compare planned environments with the ones read back.

    ``planned``: {node: {"env_common": {...}, "env_node": {...}}}; ``actual``: {node: [env dict, ...]} (one
    per container or rank process; an empty list means nothing was found running). Returns a list of
    mismatch messages, each naming the node, the variable, both values and the remedy.
    """
    problems = []
    actual = {node: ([envs] if isinstance(envs, dict) else list(envs or [])) for node, envs in (actual or {}).items()}
    for node in sorted(planned):
        envs = actual.get(node)
        if not envs:
            problems.append("%s: no running %s to read the environment from" % (node, what))
            continue
        want = dict(planned[node].get("env_common") or {})
        want.update(planned[node].get("env_node") or {})
        for index, env in enumerate(envs):
            label = what if len(envs) == 1 else "%s %d" % (what, index)
            for key in sorted(want):
                if env.get(key) != want[key]:
                    scope = "per-node" if key in (planned[node].get("env_node") or {}) else "common"
                    problems.append("%s: %s is %s in the %s, planned %r (%s value). Recreate the containers with "
                                    "playbooks/serve.yml; if it persists, the value comes from the image or from the "
                                    "driver's environment" % (node, key, repr(env[key]) if key in env else "missing",
                                                              label, want[key], scope))
    # Unplanned kernel-affecting variables (from an image, say) must at least agree across nodes.
    seen = {}
    for node in sorted(actual):
        planned_keys = set((planned.get(node) or {}).get("env_common") or {}) | set((planned.get(node) or {}).get("env_node") or {})
        for env in actual[node] or []:
            for key, value in env.items():
                if key.startswith(WATCHED_PREFIXES) and key not in planned_keys and key not in PER_PROCESS:
                    seen.setdefault(key, {})[node] = value
    readable = {node for node, envs in actual.items() if envs}
    for key, values in sorted(seen.items()):
        if len(set(values.values())) > 1 or set(values) != readable:
            found = ", ".join("%s=%r" % (n, v) for n, v in sorted(values.items()))
            problems.append("%s differs across nodes and is not in the plan (%s): a value baked into an image or a "
                            "container wins silently; set it in the profile's env or remove it" % (key, found))
    return problems
