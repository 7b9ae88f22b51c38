# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmarks of the serving endpoint: a bounded sweep of ``vllm bench serve``, one row per point, and the hardware's
limit beside the figures.

The write-ups measure by hand and each differently (seed 004 sweeps ``--max-concurrency`` 1 to 32 with ``vllm bench
serve`` and wants "a bench.sh that runs the same sweep at every image bump and writes a CSV"; seed 001 publishes
llama-benchy's pp2048/tg128 at c1/c4/c8). Here the sweep is data: concurrencies times input and output lengths,
bounded in points, prompts and seconds, each point run with the running image's own ``vllm bench serve`` on the head
(the endpoint's own machine: no laptop loop in the figures, no client library to install), in a container of its own
that holds the client key (the serving containers, where the model's code runs, never do), its result file read
back, and a row made of it with the image ID, the profile and the config hash it measured.

The decode bound is the memory-bandwidth roofline of one decode step: every active parameter is read once per step,
so a stream cannot decode faster than the nodes' bandwidth (273 GB/s per GB10) over the bytes read per token (the
profile's active parameters times their bytes). A batch of c streams reads the weights once per step for all of
them, so the aggregate bound is c times that, until compute or the KV cache bind first. Published figures of the
profile's write-up are drawn beside it. Pure. This file plans the sweep and its bound; module_utils/report/bench.py makes its rows and summary.
"""

from __future__ import annotations

import ipaddress
import urllib.parse

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import MODELS_MOUNT
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import model_files as mf

GB10_BANDWIDTH_BYTES_S = 273e9  # LPDDR5x bandwidth of one DGX Spark (NVIDIA's GB10 specification)
DEFAULTS = {
    "concurrency": [1, 2, 4, 8, 16, 32],
    "input_lens": [1024],
    "output_lens": [128],
    "prompts_per_stream": 4,     # each point sends concurrency x this many prompts ...
    "min_prompts": 8,            # ... at least this many ...
    "max_prompts": 128,          # ... and at most this many
    "max_points": 36,
    "point_timeout": 900,        # seconds one point may take before it is stopped and counted as failed
    "regression_share": 0.10,    # a figure this much worse than the previous run of the profile is flagged
}
PERCENTILES = (50, 90, 99)


TOKENIZER_MOUNT = "/run/dgx-spark-bench/tokenizer"  # outside the cluster: the model's tokenizer files, staged from the head
CA_MOUNT = "/run/dgx-spark-bench/ca.pem"  # outside the cluster, with TLS: the certificate the front door is trusted by
# The files of a model's folder a load generator elsewhere needs to tokenize, by name: nothing else of the folder (no
# weights, no code, nothing a path model's folder may hold beside them) leaves the cluster.
TOKENIZER_NAMES = mf.TOKENIZER_FILES + ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "merges.txt",
                                        "vocab.txt", "spiece.model", "config.json", "generation_config.json",
                                        "chat_template.json", "chat_template.jinja")
RESULT_DIR = "/tmp/dgx-spark-bench"  # inside the container that runs the sweep; each point's result is read from its output
KEY_MOUNT = "/run/dgx-spark-bench/key"  # the client key, as that container sees it (read-only)
# Runs ``vllm bench serve`` (argv[3:]) with the key read from the file argv[1] into this process's environment (the
# client reads it there: OPENAI_API_KEY), never into an argv or the environment the process was started with
# (/proc/<pid>/environ); vLLM's own output goes to stderr, the result file argv[2] to stdout.
RUN_POINT = """import os, sys
key, result = sys.argv[1:3]
with open(key, encoding="utf-8") as handle:
    os.environ["OPENAI_API_KEY"] = handle.read().strip()
os.makedirs(os.path.dirname(result), exist_ok=True)
out = os.dup(1)
os.dup2(2, 1)
sys.argv = ["vllm"] + sys.argv[3:]
from vllm.entrypoints.cli.main import main
try:
    main()
except SystemExit as exc:
    if exc.code not in (None, 0):
        raise
sys.stdout.flush()  # what vLLM printed goes to stderr, where fd 1 points until here
os.dup2(out, 1)
with open(result, encoding="utf-8") as handle:
    sys.stdout.write(handle.read())
"""


def target(cluster, head_entry, profile, max_model_len, key_file, model_copy=None):
    """What bench.yml needs of the plan: the container each point runs in (one of its own on the head, from the image
    vLLM runs, so its ``vllm bench serve`` is the running vLLM's, with the Hugging Face cache read-only for the
    tokenizer and the client key ``key_file``, the head's 0600 copy, as one read-only file), the endpoint as the head
    reaches it, the model and its served name, where results go inside the container (its own /tmp: nothing of the
    head's is written by it and read by root), the deployment's max_model_len, the decode bound and the profile's
    published figures; for a load generator outside the cluster (:func:`outside`), the image's ID and the tokenizer's
    files in the head's copy of the model (``model_copy``, its probe's)."""
    spec = profile.get("bench") or {}
    serving = head_entry["containers"][0]
    hf = sorted((k, v) for k, v in (serving.get("env") or {}).items() if k.startswith("HF_") or k.startswith("TRANSFORMERS_"))
    return {"run": ["docker", "run", "--rm", "--network", "host", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                    "-v", "%s:%s:ro" % (head_entry["paths"]["models_dir"], MODELS_MOUNT), "-v", "%s:%s:ro" % (key_file, KEY_MOUNT)]
            + [a for k, v in hf for a in ("-e", "%s=%s" % (k, v))] + ["--entrypoint", "python3", serving["image"], "-c", RUN_POINT],
            "base_url": cluster["endpoint"]["local_health_url"].rsplit("/", 1)[0],
            "model": cluster["model"]["id"], "served_name": cluster["endpoint"]["served_model_name"], "key_file": KEY_MOUNT,
            "result_dir": RESULT_DIR, "image_id": cluster.get("image_id") or serving["image"],
            "tokenizer_files": tokenizer_files(model_copy),
            "max_model_len": max_model_len, "decode_bound": decode_bound(spec, len(cluster["expected_ips"])),
            "published": list(spec.get("published") or [])}


def tokenizer_files(copy):
    """The files of the head's copy of the model (its probe's ``model_copy``) that a load generator outside the cluster
    needs to tokenize, named in TOKENIZER_NAMES (config, tokenizer, chat template) at the snapshot's top level."""
    if not copy or not copy.get("snapshot"):
        return []
    return sorted("%s/%s" % (copy["snapshot"], name) for name in copy.get("present") or {}
                  if name in TOKENIZER_NAMES or name.endswith(".tiktoken"))


def staged(stage):
    """Where bench.yml puts, in the private folder ``stage`` on vllm_bench_from's host, the key, the certificate and
    the tokenizer's files (a folder)."""
    return {"key": stage + "/key", "ca": stage + "/ca.pem", "tokenizer": stage + "/tokenizer"}


def outside(bench_target, client, stage, user):
    """``vllm bench serve`` run from a host outside the cluster (``vllm_bench_from``; seed 004 measured from a third
    machine, so the load generator took no CPU from a rank): the deployment's own image by its ID, the endpoint as a
    client reaches it (``client``: the plan's endpoint.client, its front door or the gateway in front of it), and what
    bench.yml staged in the private folder ``stage`` on that host: the client key, the tokenizer files and, with TLS,
    the certificate to trust. Each is mounted read-only; the key is read as on the head (RUN_POINT). The container runs
    as ``user`` (uid:gid), who owns the staged files: it holds no capability to read another's."""
    files = staged(stage)
    run = ["docker", "run", "--rm", "--network", "host", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
           "--user", user, "-e", "HOME=/tmp", "-v", "%s:%s:ro" % (files["tokenizer"], TOKENIZER_MOUNT),
           "-v", "%s:%s:ro" % (files["key"], KEY_MOUNT), "-e", "HF_HUB_OFFLINE=1"]
    if client.get("ca_file"):
        run += ["-v", "%s:%s:ro" % (files["ca"], CA_MOUNT), "-e", "SSL_CERT_FILE=" + CA_MOUNT]
    return dict(bench_target, run=run + ["--entrypoint", "python3", bench_target["image_id"], "-c", RUN_POINT],
                base_url=client["url"], tokenizer=TOKENIZER_MOUNT)


def loopback(host):
    """Whether ``host`` (a URL's host name) is this machine's loopback: localhost, 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def same_address(one, other):
    """Whether two hosts' addresses (an IP literal in any spelling, or a name in any case) are the same."""
    def normal(text):
        try:
            return ipaddress.ip_address(text.strip("[]")).compressed
        except ValueError:
            return text.lower().rstrip(".")
    return normal(str(one)) == normal(str(other))


# The names Ansible itself takes for the controller (its implicit localhost) where a play delegates to them.
CONTROLLER_NAMES = ("localhost", "127.0.0.1", "::1")


def from_refusals(bench_from, known, cluster, client_url, addresses=None):
    """What refuses ``vllm_bench_from`` before anything runs, each naming the value and the fix: a host this inventory
    does not know (``known``: the controller's own names aside), a node of the cluster (``cluster``: its load generator
    would take CPU from a rank, which a run from outside exists to avoid), another name of a node (``addresses``: each
    host's address, its ansible_host, where two names reach one machine), or an endpoint a host outside cannot reach
    (``client_url``, the plan's endpoint.client: on loopback, it answers the head alone). Nothing for a sweep run on
    the head."""
    if not bench_from:
        return []
    if bench_from not in CONTROLLER_NAMES and bench_from not in known:
        return ["vllm_bench_from=%s is no host of this inventory: name one (a machine outside spark_cluster, as seed 004 "
                "measured from), localhost for this controller, or leave it unset to run the sweep on the head" % bench_from]
    if bench_from in cluster:
        return ["vllm_bench_from=%s is a node of spark_cluster: its load generator would take CPU from a rank, which a run "
                "from outside avoids. Name a machine outside the cluster (or localhost for this controller), or leave it "
                "unset to run the sweep on the head" % bench_from]
    addresses = addresses or {}
    reached = addresses.get(bench_from) or bench_from
    nodes = [n for n in cluster if same_address(addresses.get(n) or n, reached)]
    if bench_from not in CONTROLLER_NAMES and nodes:
        return ["vllm_bench_from=%s reaches %s, the address of %s, a node of spark_cluster: its load generator would take "
                "CPU from a rank, which a run from outside avoids. Name a machine outside the cluster (or localhost for "
                "this controller), or leave it unset to run the sweep on the head" % (bench_from, reached, nodes[0])]
    host = urllib.parse.urlsplit(client_url or "").hostname or ""
    if loopback(host):
        return ["vllm_bench_from=%s: the endpoint answers at %s, on the head's loopback alone, which no host outside the "
                "cluster reaches. Bind it where clients reach it (vllm_bind_address), or leave vllm_bench_from unset to "
                "run the sweep on the head" % (bench_from, client_url)]
    return []


def settings(given, max_model_len=None):
    """The sweep's settings: the defaults overlaid with the given ones (null keeps the default); errors name the fix.
    A length left to its default fits the deployment's ``max_model_len``: the output at most half of it, the input what
    the longest output leaves (the write-ups' 1024 in + 128 out wherever that fits). Lengths given are taken as given,
    and a sweep they make too long is refused (:func:`points`)."""
    config = dict(DEFAULTS)
    chosen = {k: v for k, v in (given or {}).items() if v is not None and v != ""}
    config.update(chosen)
    errors = []
    for key in ("concurrency", "input_lens", "output_lens"):
        values = config[key] if isinstance(config[key], list) else [config[key]]
        try:
            config[key] = [int(v) for v in values]
        except (TypeError, ValueError):
            errors.append("vllm_bench_%s must be a list of whole numbers, got %r" % (key, config[key]))
            continue
        if not config[key] or min(config[key]) < 1:
            errors.append("vllm_bench_%s must list numbers of 1 or more, got %r" % (key, config[key]))
    for key in ("prompts_per_stream", "min_prompts", "max_prompts", "max_points", "point_timeout"):
        try:
            config[key] = int(config[key])
        except (TypeError, ValueError):
            errors.append("vllm_bench_%s must be a whole number, got %r" % (key, config[key]))
    config["regression_share"] = float(config["regression_share"])
    if max_model_len and not errors:  # the lengths are whole numbers of 1 or more here
        if "output_lens" not in chosen:
            config["output_lens"] = [min(DEFAULTS["output_lens"][0], max(1, int(max_model_len) // 2))]
        room = int(max_model_len) - max(config["output_lens"])
        if "input_lens" not in chosen and room >= 1:
            config["input_lens"] = [min(DEFAULTS["input_lens"][0], room)]
    return config, errors


def points(config, max_model_len=None):
    """The sweep's points, in order (lengths, then concurrency), and what refuses it before anything runs."""
    found, errors = [], []
    for input_len in config["input_lens"]:
        for output_len in config["output_lens"]:
            if max_model_len and input_len + output_len > int(max_model_len):
                errors.append("input %d + output %d tokens exceed the deployment's max_model_len %d; lower "
                              "vllm_bench_input_lens or vllm_bench_output_lens" % (input_len, output_len, int(max_model_len)))
                continue
            for concurrency in config["concurrency"]:
                prompts = min(max(concurrency * config["prompts_per_stream"], config["min_prompts"]), config["max_prompts"])
                found.append({"concurrency": concurrency, "input_len": input_len, "output_len": output_len, "prompts": prompts,
                              "name": "c%d-in%d-out%d" % (concurrency, input_len, output_len)})
    if len(found) > config["max_points"]:
        errors.append("the sweep has %d points, more than vllm_bench_max_points %d; list fewer concurrencies or lengths, "
                      "or raise the bound" % (len(found), config["max_points"]))
    return found, errors


def argv(point, target, result_dir):
    """``vllm bench serve`` for one point, after RUN_POINT's key file and result file. ``target``: the endpoint as the
    container reaches it (``base_url``), the model to tokenize with (``model``, or the folder ``tokenizer`` outside the
    cluster), the name it is served as (``served_name``) and the key file inside the container (``key_file``). Its own output goes to stderr, and its
    result file to stdout: the point's row is read from what the command printed."""
    bench = ["bench", "serve", "--backend", "vllm", "--base-url", target["base_url"], "--endpoint", "/v1/completions",
             "--model", target["model"], "--served-model-name", target["served_name"]]
    if target.get("tokenizer"):
        bench += ["--tokenizer", target["tokenizer"]]
    bench += ["--dataset-name", "random", "--random-input-len", str(point["input_len"]),
              "--random-output-len", str(point["output_len"]), "--ignore-eos", "--num-prompts", str(point["prompts"]),
              "--max-concurrency", str(point["concurrency"]), "--seed", "0",
              "--percentile-metrics", "ttft,itl", "--metric-percentiles", ",".join(str(p) for p in PERCENTILES),
              "--save-result", "--result-dir", result_dir, "--result-filename", point["name"] + ".json"]
    return [target["key_file"], "%s/%s.json" % (result_dir, point["name"])] + bench


def sweep(bench_target, given, stamp, reports_dir, client=None, stage=None, user=None):
    """The sweep of a plan's ``cluster.bench`` with the given settings, for the run named ``stamp``: {config, points,
    errors, dirs}; ``dirs``: the run's folder inside the container that runs each point and on the controller. With
    ``stage`` (the folder bench.yml staged on vllm_bench_from's host) each point runs there as ``user``, asking ``client``."""
    if stage:
        bench_target = outside(bench_target, client, stage, user)
    config, errors = settings(given, bench_target.get("max_model_len"))
    found, more = points(config, bench_target.get("max_model_len")) if not errors else ([], [])
    dirs = {"container": "%s/%s" % (bench_target["result_dir"], stamp), "controller": "%s/%s" % (reports_dir, stamp) if reports_dir else None,
            # outside the cluster: where the tokenizer's files fetched from the head wait on the controller (removed after)
            "tokenizer": "%s/%s.tokenizer/" % (reports_dir, stamp) if reports_dir else None}
    for point in found:  # each point's command on the head: it prints its result
        point["argv"] = list(bench_target["run"]) + argv(point, bench_target, dirs["container"])
    return {"config": config, "points": found, "errors": errors + more, "dirs": dirs, "staged": staged(stage) if stage else None}


def decode_bound(profile_bench, nodes):
    """Tokens per second one stream cannot exceed: the nodes' bandwidth over the bytes read per decoded token; None
    when the profile does not say its active parameters."""
    spec = profile_bench or {}
    if not spec.get("active_params") or not spec.get("bytes_per_param"):
        return None
    return round(GB10_BANDWIDTH_BYTES_S * int(nodes) / (float(spec["active_params"]) * float(spec["bytes_per_param"])), 1)
