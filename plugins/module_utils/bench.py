# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmarks of the serving endpoint: a bounded sweep of ``vllm bench serve``, one row per point, and the hardware's
limit beside the figures.

The write-ups measure by hand and each differently (seed 004 sweeps ``--max-concurrency`` 1 to 32 with ``vllm bench
serve`` and wants "a bench.sh that runs the same sweep at every image bump and writes a CSV"; seed 001 publishes
llama-benchy's pp2048/tg128 at c1/c4/c8). Here the sweep is data: concurrencies times input and output lengths,
bounded in points, prompts and seconds, each point run with the running image's own ``vllm bench serve`` from inside
the head's container (the endpoint's own machine: no laptop loop in the figures, no client library to install), its
result file read back, and a row made of it with the image ID, the profile and the config hash it measured.

The decode bound is the memory-bandwidth roofline of one decode step: every active parameter is read once per step,
so a stream cannot decode faster than the nodes' bandwidth (273 GB/s per GB10) over the bytes read per token (the
profile's active parameters times their bytes). A batch of c streams reads the weights once per step for all of
them, so the aggregate bound is c times that, until compute or the KV cache bind first. Published figures of the
profile's write-up are drawn beside it. Pure; the bench role runs the points and the report action writes the files.
"""

from __future__ import annotations

import base64
import csv
import io
import json

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
COLUMNS = ("concurrency", "input_len", "output_len", "prompts", "completed", "errors", "duration_s", "request_throughput",
           "output_tokens_per_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms",
           "image_id", "profile", "config_hash")
# (column, better when higher): what a regression is measured on.
COMPARED = (("output_tokens_per_s", True), ("request_throughput", True), ("ttft_p50_ms", False), ("itl_p50_ms", False))


def target(cluster, head_entry, profile, max_model_len, state_mount, key_file):
    """What bench.yml needs of the plan: the container it runs in (the head's vLLM runs there, so its image's ``vllm
    bench serve`` does), the endpoint as that container reaches it, the model and its served name, the key file inside
    the container, where results go (inside and on the head), the deployment's max_model_len, the decode bound and the
    profile's published figures."""
    spec = profile.get("bench") or {}
    return {"container": head_entry["serve"]["container"],
            "base_url": cluster["endpoint"]["local_health_url"].rsplit("/", 1)[0],
            "model": cluster["model"]["id"], "served_name": cluster["endpoint"]["served_model_name"], "key_file": key_file,
            "result_dir": state_mount + "/bench", "result_dir_host": head_entry["paths"]["state_dir"] + "/bench",
            "max_model_len": max_model_len, "decode_bound": decode_bound(spec, len(cluster["expected_ips"])),
            "published": list(spec.get("published") or [])}


def settings(given):
    """The sweep's settings: the defaults overlaid with the given ones (null keeps the default); errors name the fix."""
    config = dict(DEFAULTS)
    config.update({k: v for k, v in (given or {}).items() if v is not None and v != ""})
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
    """``vllm bench serve`` for one point, run inside the head's container. ``target``: the endpoint as the container
    reaches it (``base_url``), the model to tokenize with (``model``), the name it is served as (``served_name``) and
    the key file inside the container (``key_file``). The key is read there, by the shell: never in an argv."""
    bench = ["vllm", "bench", "serve", "--backend", "vllm", "--base-url", target["base_url"], "--endpoint", "/v1/completions",
             "--model", target["model"], "--served-model-name", target["served_name"],
             "--dataset-name", "random", "--random-input-len", str(point["input_len"]),
             "--random-output-len", str(point["output_len"]), "--ignore-eos", "--num-prompts", str(point["prompts"]),
             "--max-concurrency", str(point["concurrency"]), "--seed", "0",
             "--percentile-metrics", "ttft,itl", "--metric-percentiles", ",".join(str(p) for p in PERCENTILES),
             "--save-result", "--result-dir", result_dir, "--result-filename", point["name"] + ".json"]
    return ["sh", "-c", 'OPENAI_API_KEY="$(cat "$0")" exec "$@"', target["key_file"]] + bench


def row(result, point, deployment):
    """One CSV row from the result file ``vllm bench serve --save-result`` wrote for ``point``."""
    def figure(key):
        value = result.get(key)
        return None if value is None else round(float(value), 3)

    completed = int(result.get("completed") or 0)
    failed = result.get("failed")
    entry = {"concurrency": point["concurrency"], "input_len": point["input_len"], "output_len": point["output_len"],
             "prompts": point["prompts"], "completed": completed,
             "errors": int(failed) if failed is not None else max(point["prompts"] - completed, 0),
             "duration_s": figure("duration"), "request_throughput": figure("request_throughput"),
             "output_tokens_per_s": figure("output_throughput")}
    for metric in ("ttft", "itl"):
        for pct in PERCENTILES:
            entry["%s_p%d_ms" % (metric, pct)] = figure("p%d_%s_ms" % (pct, metric))
    entry.update(image_id=deployment.get("image_id"), profile=deployment.get("profile"), config_hash=deployment.get("config_hash"))
    return entry


def failed_row(point, deployment, reason):
    """The row of a point that gave no result (it timed out, or the client failed): every figure empty, all errors."""
    entry = {c: None for c in COLUMNS}
    entry.update(concurrency=point["concurrency"], input_len=point["input_len"], output_len=point["output_len"],
                 prompts=point["prompts"], completed=0, errors=point["prompts"], image_id=deployment.get("image_id"),
                 profile=deployment.get("profile"), config_hash=deployment.get("config_hash"), failure=reason)
    return entry


def sweep(bench_target, given, stamp, reports_dir):
    """The sweep of a plan's ``cluster.bench`` with the given settings, for the run named ``stamp``: {config, points,
    errors, dirs}; ``dirs``: the run's folder inside the head's container, on the head, and on the controller."""
    config, errors = settings(given)
    found, more = points(config, bench_target.get("max_model_len")) if not errors else ([], [])
    return {"config": config, "points": found, "errors": errors + more,
            "dirs": {"container": "%s/%s" % (bench_target["result_dir"], stamp), "head": "%s/%s" % (bench_target["result_dir_host"], stamp),
                     "controller": "%s/%s" % (reports_dir, stamp) if reports_dir else None}}


def rows(points_run, results, runs, deployment):
    """One row per point: from its result file (``results``: each a {"content": base64} as slurp returns it, or a
    failure), else a failed row saying why (``runs``: each point's command result)."""
    made = []
    for point, result, run in zip(points_run, results, runs):
        try:
            made.append(row(json.loads(base64.b64decode(result["content"]).decode("utf-8")), point, deployment))
        except (KeyError, TypeError, ValueError):
            why = (run.get("msg") if run.get("rc") is None else "vllm bench serve exited %s: %s" % (
                run.get("rc"), ((run.get("stderr") or "").strip().splitlines() or [""])[-1]))
            made.append(failed_row(point, deployment, why or "no result file"))
    return made


def csv_text(rows):
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(COLUMNS), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for entry in rows:
        writer.writerow({k: ("" if entry.get(k) is None else entry.get(k)) for k in COLUMNS})
    return out.getvalue()


def decode_bound(profile_bench, nodes):
    """Tokens per second one stream cannot exceed: the nodes' bandwidth over the bytes read per decoded token; None
    when the profile does not say its active parameters."""
    spec = profile_bench or {}
    if not spec.get("active_params") or not spec.get("bytes_per_param"):
        return None
    return round(GB10_BANDWIDTH_BYTES_S * int(nodes) / (float(spec["active_params"]) * float(spec["bytes_per_param"])), 1)


def regressions(rows, previous, share):
    """The figures worse than the previous run's at the same point by more than ``share``, each as a sentence."""
    before = {(r["concurrency"], r["input_len"], r["output_len"]): r for r in previous or []}
    found = []
    for entry in rows:
        old = before.get((entry["concurrency"], entry["input_len"], entry["output_len"]))
        for column, higher_better in COMPARED if old else ():
            new_value, old_value = entry.get(column), old.get(column)
            if new_value is None or not old_value:
                continue
            change = (float(new_value) - float(old_value)) / float(old_value)
            if (-change if higher_better else change) > share:
                found.append("c%d in%d out%d: %s %s -> %s (%+.0f%%)" % (entry["concurrency"], entry["input_len"], entry["output_len"],
                                                                        column, old_value, new_value, 100 * change))
    return found


def summary(rows, previous, meta, bound, published, share):
    """The Markdown summary: the deployment, the table, the bound, the published figures and the comparison with
    ``previous`` (the previous run's bench.json: its meta and rows)."""
    lines = ["# Benchmark of %s" % meta["profile"], "",
             "- image: %s (%s), vLLM %s" % (meta.get("image"), (meta.get("image_id") or "")[:19], meta.get("vllm_version")),
             "- config hash: %s; nodes: %s; taken %s" % (meta.get("config_hash"), ", ".join(meta.get("nodes") or []), meta.get("taken_at")),
             "- decode bound (one stream): %s" % ("%.1f tokens/s (%d x 273 GB/s over the bytes read per token)"
                                                  % (bound, len(meta.get("nodes") or [])) if bound else "unknown (the profile "
                                                  "does not give its active parameters)"),
             "", "| concurrency | in | out | req/s | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | errors |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for entry in rows:
        lines.append("| %s |" % " | ".join("" if entry.get(k) is None else str(entry.get(k)) for k in (
            "concurrency", "input_len", "output_len", "request_throughput", "output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms",
            "itl_p50_ms", "itl_p99_ms", "errors")))
    if published:
        lines += ["", "Published figures of the profile's write-up:", ""]
        lines += ["- c%s: %s output tokens/s (%s)" % (p["concurrency"], p["output_tokens_per_s"], p.get("source", "")) for p in published]
    lines.append("")
    if previous is None:
        lines.append("No previous run of this profile to compare with.")
    else:
        found = regressions(rows, previous["rows"], share)
        lines.append("Compared with the previous run of this profile (%s): %s" % (
            (previous.get("meta") or {}).get("taken_at"), "no figure is worse by more than %.0f%%." % (100 * share) if not found else
            "REGRESSION beyond %.0f%%:" % (100 * share)))
        lines += ["- " + f for f in found]
    return "\n".join(lines) + "\n"
