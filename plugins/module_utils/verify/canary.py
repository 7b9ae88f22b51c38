# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The correctness canary: the same prompts, greedy, after every change, compared token for token.

A deployment can serve garbage without an error: speculative decoding with CUDA graphs, a broken kernel in a new
image, a weight file damaged on one node (the model check compares sizes unless checksums are on). A smoke test sees an
answer; only a comparison sees a wrong one. So the first verified serve of a cluster stores the answers to a fixed set
of prompts (temperature 0, a fixed seed, one prompt at a time with nothing else in flight: batching can flip a
near-tie between two logits), as token IDs (``return_tokens_as_token_ids``: no detokenizer between us and the model).
Every later launch asks them again. On the reference's own basis they go in one request sent with the launch's first
requests (the stream and the smoke tests: no step of their own), and a prompt whose answer so asked is not the
reference's token for token is asked again alone, with nothing else in flight, and that answer is the one judged;
across a change of the basis each prompt is asked alone:

- the image ID, the model's revision and every numerics-relevant flag unchanged: the tokens must be equal, exactly;
- any of those changed (an upgrade, another quantization, another TP): the answers must agree within the profile's
  tolerance (the agreeing prefix, or the share of equal tokens), and the report names what changed.

Flags that leave the arithmetic alone (``--max-model-len``, ports, the API key) are not part of the basis: a change of
them must give the same tokens. ``garbage`` also judges a real model's text: repeated n-grams, unprintable characters,
leaked control tokens. Pure; the endpoint module asks, the serve role stores and compares.
"""

from __future__ import annotations

DEFAULTS = {
    "prompts": ["The capital of France is", "def fibonacci(n):", "1, 2, 3, 4, 5,", "Water boils at", "Once upon a time"],
    "max_tokens": 16,
    "seed": 1234,
    # Across a change of the basis: pass when the first prefix_tokens agree, or when match_share of the tokens do.
    "tolerance": {"prefix_tokens": 4, "match_share": 0.5},
    # A real model's answers are judged as text too; a tiny random model's are garbage by design (enabled: false).
    "garbage": {"enabled": True, "max_ngram_repeats": 6, "ngram": 3, "max_unprintable_share": 0.05, "control_tokens": []},
}
# The flags and variables that change the arithmetic (and so, legitimately, the tokens).
NUMERIC_FLAGS = ("--dtype", "--quantization", "--kv-cache-dtype", "--attention-backend", "--tensor-parallel-size",
                 "--pipeline-parallel-size", "--data-parallel-size", "--enable-expert-parallel", "--speculative-config",
                 "--calculate-kv-scales", "--enforce-eager", "--compilation-config", "--mamba-ssm-cache-dtype",
                 "--hf-overrides", "--tokenizer", "--revision")
NUMERIC_ENV = ("VLLM_ATTENTION_BACKEND", "VLLM_USE_FLASHINFER_MOE_FP4", "VLLM_USE_FLASHINFER_MOE_FP8", "VLLM_FLASHINFER_MOE_BACKEND",
               "VLLM_MXFP4_USE_MARLIN", "VLLM_USE_DEEP_GEMM")


def settings(profile):
    """The profile's ``canary`` section over the defaults (one level deep for the tolerance and garbage tables)."""
    given = dict(profile.get("canary") or {})
    result = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEFAULTS.items()}
    for key, value in given.items():
        if isinstance(result.get(key), dict) and isinstance(value, dict):
            result[key].update(value)
        else:
            result[key] = value
    return result


def flag_values(argv):
    """{flag: value} of an argv (a flag without a value: True)."""
    values, index = {}, 0
    while index < len(argv):
        arg = argv[index]
        if arg.startswith("--"):
            if "=" in arg:
                name, value = arg.split("=", 1)
                values[name] = value
            elif index + 1 < len(argv) and not argv[index + 1].startswith("--"):
                values[arg] = argv[index + 1]
                index += 1
            else:
                values[arg] = True
        index += 1
    return values


def basis(plan):
    """What the answers depend on: the image ID, the model and its revision, the numerics-relevant flags and env."""
    cluster = plan["cluster"]
    flags = flag_values(cluster.get("vllm_argv") or [])
    env = cluster.get("env_common") or {}
    return {"image_id": cluster.get("image_id"), "model": plan["model"]["id"], "revision": plan["model"].get("revision"),
            "flags": {k: flags[k] for k in NUMERIC_FLAGS if k in flags},
            "env": {k: env[k] for k in NUMERIC_ENV if k in env}}


def differences(before, after):
    """What changed between two bases, one line each (empty: the same basis)."""
    lines = []
    for key in ("image_id", "model", "revision"):
        if before.get(key) != after.get(key):
            lines.append("%s %s -> %s" % (key, before.get(key), after.get(key)))
    for table in ("flags", "env"):
        old, new = before.get(table) or {}, after.get(table) or {}
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                lines.append("%s %s -> %s" % (key, old.get(key, "(unset)"), new.get(key, "(unset)")))
    return lines


def request(model, prompt, config):
    """One greedy completion, its tokens returned as IDs (``prompt`` a list: one answer per prompt, see answers_of)."""
    return {"model": model, "prompt": prompt, "max_tokens": int(config["max_tokens"]), "temperature": 0, "seed": int(config["seed"]),
            "logprobs": 0, "return_tokens_as_token_ids": True}


def tokens_of(response, choice=None):
    """The token IDs of a completion asked with ``request`` (its logprobs' tokens read ``token_id:N``); ``choice``:
    one of the answer's choices (a request of several prompts), else its first."""
    choice = choice if choice is not None else ((response or {}).get("choices") or [{}])[0]
    tokens = ((choice.get("logprobs") or {}).get("tokens")) or []
    ids = []
    for token in tokens:
        text = str(token)
        if not text.startswith("token_id:") or not text[len("token_id:"):].lstrip("-").isdigit():
            raise ValueError("the endpoint did not return token IDs (got %r); its vLLM needs return_tokens_as_token_ids" % text[:40])
        ids.append(int(text[len("token_id:"):]))
    return ids


def answer_of(prompt, response, choice=None):
    """The answer to ``prompt`` as kept and compared: its token IDs and its text (``choice``: as in tokens_of)."""
    choice = choice if choice is not None else ((response or {}).get("choices") or [{}])[0]
    return {"prompt": prompt, "tokens": tokens_of(response, choice), "text": choice.get("text") or ""}


def answers_of(response, prompts):
    """The answers to a request of several prompts (``request`` with the list), in the prompts' order."""
    choices = sorted((response or {}).get("choices") or [], key=lambda c: c.get("index", 0))
    if len(choices) != len(prompts):
        raise ValueError("%d prompts asked together, %d answers" % (len(prompts), len(choices)))
    return [answer_of(prompt, response, choice) for prompt, choice in zip(prompts, choices)]


def asks_together(config):
    """Whether the prompts may first go in one request: only against a reference asked on this very basis (``config``:
    the settings with the model's ``reference`` and the ``basis`` now). Across a change of the basis (another image,
    flags, speculative decoding) the batch-size-one path users take is the one that changed: each prompt goes alone."""
    reference = config.get("reference") or {}
    return bool(reference.get("answers")) and config.get("basis") is not None \
        and not differences(reference.get("basis") or {}, config["basis"])


def ask_alone(reference, answers):
    """The prompts to ask again one at a time: those whose answer, asked together, is not the reference's token for
    token (batching may have flipped a near-tie; the answer asked alone, as the reference was, is the one judged), and
    those without a reference (their answer may be kept as one)."""
    stored = {a["prompt"]: a["tokens"] for a in (reference or {}).get("answers") or []}
    return [a["prompt"] for a in answers if stored.get(a["prompt"]) != a["tokens"]]


def agreement(reference, answer):
    """(agreeing prefix length, share of equal tokens position by position)."""
    prefix = 0
    for old, new in zip(reference, answer):
        if old != new:
            break
        prefix += 1
    longest = max(len(reference), len(answer)) or 1
    equal = sum(1 for old, new in zip(reference, answer) if old == new)
    return prefix, equal / float(longest)


def compare(reference, current_basis, answers, config):
    """The canary's verdict: {"passed", "exact", "changed": [...], "prompts": [{prompt, prefix, share, passed}],
    "message"}. ``reference``: the stored {"basis", "answers": [{"prompt", "tokens"}]}; ``answers`` the same now."""
    changed = differences(reference["basis"], current_basis)
    exact = not changed
    tolerance = config["tolerance"]
    stored = {a["prompt"]: a["tokens"] for a in reference["answers"]}
    rows, failed = [], []
    for answer in answers:
        old = stored.get(answer["prompt"])
        if old is None:
            rows.append({"prompt": answer["prompt"], "prefix": None, "share": None, "passed": True, "new": True})
            continue
        prefix, share = agreement(old, answer["tokens"])
        if exact:
            passed = old == answer["tokens"]
        else:
            passed = prefix >= min(int(tolerance["prefix_tokens"]), len(old)) or share >= float(tolerance["match_share"])
        rows.append({"prompt": answer["prompt"], "prefix": prefix, "share": round(share, 3), "passed": passed})
        if not passed:
            failed.append("%r: %d of %d tokens agree from the start (%.0f%% in place)%s"
                          % (answer["prompt"], prefix, len(old), 100 * share,
                             "" if exact else "; the tolerance is %d tokens or %.0f%%" % (int(tolerance["prefix_tokens"]),
                                                                                          100 * float(tolerance["match_share"]))))
    if config["garbage"].get("enabled", True):
        for answer in answers:
            for reason in garbage(answer.get("text") or "", config["garbage"]):
                failed.append("%r: the answer looks like garbage: %s" % (answer["prompt"], reason))
    how = "token for token (image, model revision and numerics unchanged)" if exact else \
        "within the tolerance, across: " + "; ".join(changed)
    if failed:
        message = ("canary FAILED: the answers differ from the reference recorded %s, where they must agree %s. %s. "
                   "Look for garbled output (a broken image or kernel, a damaged weight file on one node, speculative "
                   "decoding with CUDA graphs); if the change is meant, record new answers with -e vllm_canary_accept=true"
                   % (reference.get("recorded_at") or "earlier", how, "; ".join(failed)))
    else:
        message = "canary passed: %d prompts agree with the reference recorded %s %s" % (len(rows), reference.get("recorded_at") or "earlier", how)
    return {"passed": not failed, "exact": exact, "changed": changed, "prompts": rows, "message": message}


def reference(answers, basis_now, recorded_at):
    """What is kept: the answers' tokens (and text, for a reader) with the basis they were asked on."""
    return {"basis": basis_now, "recorded_at": recorded_at,
            "answers": [{"prompt": a["prompt"], "tokens": a["tokens"], "text": a.get("text")} for a in answers]}


def stored_for(stored, model):
    """The reference of ``model`` in the kept file (one per model: serving another model starts its own; another
    revision or other weights of the same model are compared with it, and reported)."""
    return ((stored or {}).get("models") or {}).get(model)


def keep(stored, model, kept):
    """The kept file with ``kept`` as the reference of ``model``, the others left as they are."""
    models = dict((stored or {}).get("models") or {})
    models[model] = kept
    return {"models": models}


def garbage(text, thresholds):
    """Why ``text`` looks like garbage from a real model (empty: it does not)."""
    reasons = []
    words = text.split()
    size = int(thresholds.get("ngram", 3))
    counts = {}
    for index in range(len(words) - size + 1):
        gram = tuple(words[index:index + size])
        counts[gram] = counts.get(gram, 0) + 1
    if counts and max(counts.values()) > int(thresholds.get("max_ngram_repeats", 6)):
        gram, count = max(counts.items(), key=lambda item: item[1])
        reasons.append("the %d-gram %r repeats %d times" % (size, " ".join(gram), count))
    unprintable = sum(1 for c in text if not c.isprintable() and c not in "\n\t")
    if text and unprintable / float(len(text)) > float(thresholds.get("max_unprintable_share", 0.05)):
        reasons.append("%d of %d characters are unprintable" % (unprintable, len(text)))
    leaked = [t for t in thresholds.get("control_tokens") or [] if t in text]
    if leaked:
        reasons.append("control tokens leaked: %s" % ", ".join(leaked))
    return reasons
