# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a vLLM image offers: its vLLM and Ray versions, the option strings ``vllm serve`` accepts
(with their choices), and the reasoning and tool-call parsers it registers.

The script below runs inside the image (``docker run --rm --entrypoint python3 IMAGE -c SCRIPT``).
It builds vLLM's own argument parser instead of parsing ``--help`` text, which changes between
releases; the parser moved from ``vllm.entrypoints.openai.cli_args`` to
``vllm.entrypoints.launchers.cli_args``, so both are tried.
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import nccl_lib

PROBE_SCRIPT = r"""
import importlib, json, os, sys
result = {"version": None, "ray_version": None, "options": None, "reasoning_parsers": None, "tool_parsers": None, "nccl": None,
          "errors": []}
try:
    import vllm
    result["version"] = getattr(vllm, "__version__", None)
except Exception as exc:
    result["errors"].append("import vllm: %s: %s" % (type(exc).__name__, exc))
try:
    import ray
    result["ray_version"] = ray.__version__
except Exception:
    pass
if result["version"]:
    parser = None
    for module in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            make = importlib.import_module(module).make_arg_parser
        except Exception:
            continue
        for where in ("vllm.utils.argparse_utils", "vllm.utils"):
            try:
                flexible = importlib.import_module(where).FlexibleArgumentParser
                parser = make(flexible())
                break
            except Exception:
                continue
        if parser is not None:
            break
    if parser is None:
        result["errors"].append("could not build vLLM's serve argument parser")
    else:
        options = {}
        for action in parser._actions:
            choices = [str(c) for c in action.choices] if action.choices else None
            for option in action.option_strings:
                options[option] = choices
        result["options"] = options
    for module, cls, key in (("vllm.reasoning", "ReasoningParserManager", "reasoning_parsers"),
                             ("vllm.tool_parsers", "ToolParserManager", "tool_parsers"),
                             ("vllm.entrypoints.openai.tool_parsers", "ToolParserManager", "tool_parsers")):
        if result[key] is not None:
            continue
        try:
            manager = getattr(importlib.import_module(module), cls)
        except Exception:
            continue
        names = set()
        for attr in ("reasoning_parsers", "tool_parsers", "lazy_parsers"):
            names.update(getattr(manager, attr, {}) or {})
        result[key] = sorted(names)
try:
    result["nccl"] = image_nccl()
except Exception as exc:
    result["errors"].append("NCCL: %s: %s" % (type(exc).__name__, exc))
sys.stdout.write("\n" + json.dumps(result) + "\n")
sys.stdout.flush()
os._exit(0)
"""
# The NCCL the image's torch loads (nccl_lib): its reader and the lookup, defined before the script's end runs them.
PROBE_SCRIPT = PROBE_SCRIPT.replace("\ntry:\n    result[\"nccl\"]", nccl_lib.SOURCE + nccl_lib.IMAGE_READ + "\ntry:\n    result[\"nccl\"]", 1)
# An image's read is cached by its ID and this script: a collection that reads more reads every image again.
SCRIPT_DIGEST = hashlib.sha256(PROBE_SCRIPT.encode()).hexdigest()[:12]


class ImageInfoError(Exception):
    """The image could not be read; the message names the image and says why."""


def parse_probe_output(rc, stdout, stderr, image):
    """The probe's JSON (last line of stdout); raise ImageInfoError with the reason otherwise."""
    lines = [line for line in (stdout or "").splitlines() if line.strip().startswith("{")]
    if rc != 0 or not lines:
        detail = (stderr or stdout or "").strip().splitlines()[-3:]
        if "No such image" in (stderr or "") or "Unable to find image" in (stderr or ""):
            raise ImageInfoError("image %s is not on this node; build or load it first (the image role does)" % image)
        raise ImageInfoError("could not read vLLM from image %s (rc=%d): %s" % (image, rc, " | ".join(detail)))
    data = json.loads(lines[-1])
    if not data.get("version"):
        raise ImageInfoError("image %s has no importable vLLM: %s" % (image, "; ".join(data.get("errors") or [])))
    return data
