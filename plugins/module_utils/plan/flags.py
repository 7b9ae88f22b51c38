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

# Options a policy of the plan reads by name (the pinned revision for the model's own code, the parsers' plugins): an
# abbreviation of one is refused even where the image's option list is not read.
CHECKED = ("--trust-remote-code", "--reasoning-parser-plugin", "--tool-parser-plugin", "--logits-processors", "--middleware",
           "--worker-extension-cls", "--reasoning-parser", "--tool-call-parser", "--enable-auto-tool-choice",
           # the secret-name check reads whole names: an abbreviation of one (--api-k) would carry the secret past it
           "--api-key", "--hf-token")


# Set by the plan itself, each from one setting. Given again as a flag it would come after the plan's in vLLM's argv and
# win (the parser keeps the last), and the endpoint, the firewall, the memory plan and the checks would describe
# another server than the one running. Each names where the value is set instead.
OWNED = {
    "--host": "vllm_bind_address",
    "--port": "vllm_port",
    "--model": "the profile's model.id",
    "--served-model-name": "the profile's model.served_name",
    "--revision": "vllm_model_revision (or the profile's model.revision)",
    "--tensor-parallel-size": "vllm_tensor_parallel_size (or the profile's parallel.tensor)",
    "--pipeline-parallel-size": "the profile's parallel.pipeline",
    "--data-parallel-size": "the profile's parallel.data",
    "--gpu-memory-utilization": "vllm_gpu_memory_utilization (or the profile's vllm.gpu_memory_utilization)",
    "--max-model-len": "vllm_max_model_len (or the profile's vllm.max_model_len)",
    "--distributed-executor-backend": "vllm_backend",
    "--nnodes": "the inventory's nodes",
    "--node-rank": "the inventory's nodes",
    "--master-addr": "the head's fabric address",
    "--master-port": "the plan's master port",
    "--headless": "the plan (every rank but the first)",
    # Options read from a file the policy does not read: every value in it would pass every check unseen.
    "--config": "vllm.flags, one flag each",
}
# Of those, the ones never given as a flag: set per rank, or read from a file.
PER_RANK = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless", "--config")


# vLLM's short spellings of options the plan sets: the same option to its parser.
ALIASES = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size"}


def normalise(flag):
    """'--max_model_len' and '--max-model-len' are the same option to vLLM; so are '-tp' and '--tensor-parallel-size'."""
    if flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return ALIASES.get(flag, flag)


def given(value):
    """Whether a flag's value puts the flag on vLLM's command line (to_argv): anything but None and False."""
    return value is not None and value is not False


def canonical(flags):
    """``flags`` as vLLM's parser reads them, before any policy looks at them: each name spelt with dashes
    (``--trust_remote_code`` is ``--trust-remote-code``, ``-tp`` is ``--tensor-parallel-size``) and ``--name=value``
    split into the name and its value. Returns (flags, problems): two spellings of one option with different values
    are a problem (the last would win); the problem names the option, never a value."""
    result, problems = {}, []
    for flag, value in (flags or {}).items():
        name = str(flag)
        if name.startswith("--") and "=" in name:
            name, text = name.split("=", 1)
            value = text if value in (True, None) else value
        name = normalise(name)
        if name in result and result[name] != value:
            problems.append("%s is given twice, spelt two ways, with different values; give it once" % name)
        result[name] = value
    return result, problems


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def same_value(value, planned):
    """A flag's value as the plan's argv text says it (0.90 is 0.9)."""
    text = "" if value is True else str(value)
    if text == planned:
        return True
    return number(text) is not None and number(text) == number(planned)


def bad_values(flag, value):
    """A value vLLM's parser would not read as this flag's value: one that starts with '-' and is no number (it would be
    read as another option: ``--enforce-eager: --trust-remote-code``), or an empty list or text (a bare flag)."""
    values = value if isinstance(value, (list, tuple)) else [value]
    if isinstance(value, (list, tuple)) and not value or value == "":
        return "%s has an empty value, which puts it on the command line bare; give a value or leave it out" % flag
    dashed = [str(v) for v in values if isinstance(v, str) and v.strip().startswith("-") and number(v) is None]
    if dashed:
        return ("%s's value %s starts with '-', so vLLM would read it as another option; options are keys of their own"
                % (flag, ", ".join(dashed)))
    return None


def refused(flags, planned=None):
    """What the plan must refuse in ``flags`` (already canonical). A value that is not a value (bad_values). An option
    the plan sets itself (OWNED), unless it says what the plan says (``planned``: {flag: value as argv text}; a profile
    may repeat its write-up's ``--pipeline-parallel-size 1``); an option set per rank or read from a file, always. An
    abbreviation, which vLLM's parser reads as the option it begins (``--trust-remote`` is ``--trust-remote-code``), so
    a check of the whole name would not see it. Without ``planned`` (before the probes), only what needs no plan.
    [(flag, why)]"""
    names = set(OWNED) | set(CHECKED)
    found = []
    for flag, value in (flags or {}).items():
        if not given(value):
            continue
        why = bad_values(flag, value)
        if why:
            found.append((flag, why))
            continue
        if flag in OWNED:
            if planned is None and flag not in PER_RANK:
                continue
            if flag not in PER_RANK and planned.get(flag) is not None and same_value(value, planned[flag]):
                continue
            said = " to %s" % planned[flag] if planned and planned.get(flag) else ""
            found.append((flag, "the plan sets %s%s itself; set %s instead" % (flag, said, OWNED[flag])))
            continue
        longer = sorted(n for n in names if n.startswith(flag) and len(flag) > 2)
        if longer and flag.startswith("--") and flag not in names:
            found.append((flag, "vLLM reads %s as %s (an abbreviation); write the option whole" % (flag, " or ".join(longer))))
    return found


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
