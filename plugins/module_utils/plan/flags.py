# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM command-line flags: ordered mappings to argv, and gating by what an image's vLLM accepts.

Flags move between vLLM releases (``--swap-space`` removed, ``--async-scheduling`` and ``--nnodes``
added, ``--mamba-ssm-cache-dtype`` choices changed). The image's own argument parser says which
option strings exist and their choices; a flag the image lacks is dropped with a warning when the
profile marks it optional, and refused otherwise, naming it.
"""

from __future__ import annotations


def normalise(flag):
    """'--max_model_len' and '--max-model-len' are the same option to vLLM."""
    if flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return flag


def to_argv(flags):
    """An ordered mapping {flag: value} to argv. True: bare flag; False/None: omitted; list: one value each."""
    argv = []
    for flag, value in (flags or {}).items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv.append(flag)
            argv.extend(str(v) for v in value)
        else:
            argv.extend([flag, str(value)])
    return argv


def gate(flags, accepted, optional=(), image="the image", version=None):
    """Split ``flags`` by what the image accepts.

    ``accepted`` maps option strings to their choices (a list) or None. Returns
    (kept_flags, dropped_warnings, errors).
    """
    kept, dropped, errors = {}, [], []
    optional = {normalise(f) for f in optional or ()}
    known = {normalise(k): v for k, v in (accepted or {}).items()}
    where = "%s (vLLM %s)" % (image, version) if version else image
    for flag, value in (flags or {}).items():
        name = normalise(flag)
        bare = name[5:] if name.startswith("--no-") else None
        if name not in known and not (bare and "--" + bare in known):
            if name in optional:
                dropped.append("%s does not accept %s; dropped (optional for this profile)" % (where, flag))
            else:
                errors.append("%s does not accept %s; use an image whose vLLM has it, or remove it from the profile"
                              % (where, flag))
            continue
        choices = known.get(name)
        if choices and value not in (None, True, False):
            values = value if isinstance(value, (list, tuple)) else [value]
            bad = [str(v) for v in values if str(v) not in [str(c) for c in choices]]
            if bad:
                errors.append("%s: %s %s is not one of %s" % (where, flag, ", ".join(bad), ", ".join(str(c) for c in choices)))
                continue
        kept[flag] = value
    return kept, dropped, errors
