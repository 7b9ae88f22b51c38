# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Python vLLM runs beyond its image's own, each refused unless something pins it.

Several of vLLM's options name Python that every rank imports and runs (CODE_FLAGS). Each value is either a module
name or, for the parsers' plugins, a file: vLLM tries the name as a module first and, when no module has it, loads
the file at that path. The two are pinned differently:

- A module name resolves on the container's Python path alone: the image's site-packages and its console scripts'
  folder, never the working folder and never a mount, as long as no variable widens that path (PATH_ENV, refused).
  The image pins it, by the ID the plan serves. Model repositories' own code is the exception: transformers keeps it
  in the models folder (``transformers_modules``); its pin is the revision --trust-remote-code needs (check_model).
- A file lives on a node, where whoever can write it could change it. It runs only with its sha256 in
  ``vllm_code_pins`` (``{path as the container sees it: sha256}``); the launcher checks every pinned file before each
  start, a supervisor's start after a boot included, and vLLM does not start when one differs.
"""

from __future__ import annotations

import posixpath
import re

# Options that name Python vLLM imports (vLLM 0.32: the parsers' plugins, the logits processors, the API server's
# middleware, the worker's class and extension, the scheduler's class).
CODE_FLAGS = ("--reasoning-parser-plugin", "--tool-parser-plugin", "--logits-processors", "--middleware", "--worker-extension-cls",
              "--worker-cls", "--scheduler-cls")
# Variables that would put a mount on Python's path, or load native code into every process.
PATH_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONSTARTUP", "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH")
# Variables that open a way around the API key or load Python nothing pins (vLLM 0.32: the development routes; the
# SageMaker routes of model_hosting_container_standards), or switch off Ray's token authentication, and why.
OPENING_ENV = {
    "VLLM_SERVER_DEV_MODE": "opens vLLM's development routes without its key (/collective_rpc runs code in every worker, "
                            "/sleep, /reset_prefix_cache, /server_info)",
    "CUSTOM_SCRIPT_FILENAME": "loads a Python file into vLLM's SageMaker routes",
    "CUSTOM_FASTAPI_PING_HANDLER": "loads a Python handler into vLLM's SageMaker routes",
    "CUSTOM_FASTAPI_INVOCATION_HANDLER": "loads a Python handler into vLLM's SageMaker routes",
    "CUSTOM_PRE_PROCESS": "loads a Python hook into vLLM's SageMaker routes",
    "CUSTOM_POST_PROCESS": "loads a Python hook into vLLM's SageMaker routes",
    "SAGEMAKER_MODEL_PATH": "names where vLLM's SageMaker routes load Python handlers from",
    "RAY_AUTH_MODE": "would switch off Ray's token authentication, which the collection turns on",
}
MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_.]*)?$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
# transformers' folder for a repository's own code, under the models folder (HF_HOME/modules).
MODEL_CODE = "transformers_modules"
# The launcher's argument for one pinned file, ahead of vLLM's own (commands.LAUNCHER_SCRIPT reads it).
PIN_ARG = "--dgx-spark-pin=%s:%s"


def values(value):
    if value is None or value is False or value is True:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def check(flags, envs, pins, findings):
    """Refuse the Python ``flags`` (canonical, merged) would load unpinned, and the variables of ``envs`` ([(where,
    mapping)]) that widen Python's path or open a way around the key (OPENING_ENV). Returns the pins the launch checks: [{"path", "sha256"}], sorted by path."""
    pins = pins or {}
    if not isinstance(pins, dict):
        findings.error("all", None, "vllm_code_pins must map each file's path (as the container sees it) to its sha256")
        pins = {}
    used = []
    for flag in CODE_FLAGS:
        for value in values((flags or {}).get(flag)):
            top = value.split(".", 1)[0].split(":", 1)[0]
            if MODULE.match(value) and top != MODEL_CODE:
                continue  # a module of the image (or vLLM's name for a built-in)
            if top == MODEL_CODE:
                findings.error("all", value, "%s %s names a model repository's own code, kept in the models folder: "
                               "give --trust-remote-code with vllm_model_revision pinned to a commit instead" % (flag, value))
                continue
            if not value.startswith("/") or posixpath.normpath(value) != value:
                findings.error("all", value, "%s %s is neither a module of the image nor an absolute, normalized path: vLLM "
                               "would look for it relative to its working folder. Give the file's path as the container "
                               "sees it (under /models) and its sha256 in vllm_code_pins" % (flag, value))
                continue
            digest = str(pins.get(value) or "").strip().lower()
            if not SHA256.match(digest):
                findings.error("all", value, "%s loads %s, a file on the nodes whoever can write it could change, and "
                               "vllm_code_pins gives it no sha256: vLLM would run it on every rank unchecked. Add "
                               "vllm_code_pins: {%s: <sha256sum of the file you reviewed>}; nothing was changed"
                               % (flag, value, value))
                continue
            used.append({"path": value, "sha256": digest})
    for where, env in envs:
        for key in sorted(env or {}) if isinstance(env, dict) else ():
            if key in PATH_ENV and env[key] not in (None, ""):
                findings.error("all", key, "%s sets %s, which would load Python or native code from outside the image "
                               "into every rank, unpinned. Build that code into the image instead; nothing was changed"
                               % (where, key))
            elif str(key).upper() in OPENING_ENV and env[key] not in (None, ""):
                findings.error("all", key, "%s sets %s, which %s: remove it; nothing was changed" % (where, key, OPENING_ENV[str(key).upper()]))
    unused = sorted(set(pins) - set(p["path"] for p in used))
    if unused:
        findings.warn("vllm_code_pins names %s, which no flag loads; the launcher checks only the files vLLM loads"
                      % ", ".join(unused))
    return sorted({p["path"]: p for p in used}.values(), key=lambda p: p["path"])


def launcher_args(pins):
    """The launcher's leading arguments: one per pinned file, checked before vLLM starts."""
    return [PIN_ARG % (pin["sha256"], pin["path"]) for pin in pins or ()]
