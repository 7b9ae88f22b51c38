# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A benchmark's results: one row per point of the sweep (module_utils/plan/bench.py plans it) from the result file
``vllm bench serve --save-result`` wrote, the CSV, the regressions against the previous run of the same profile and
the Markdown summary with the decode bound and the write-up's published figures beside the measured ones. Pure; the
bench_report action writes the files.
"""

from __future__ import annotations

import csv
import io
import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.bench import PERCENTILES

COLUMNS = ("concurrency", "input_len", "output_len", "prompts", "completed", "errors", "duration_s", "request_throughput",
           "output_tokens_per_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms",
           "image_id", "profile", "config_hash")
# (column, better when higher): what a regression is measured on.
COMPARED = (("output_tokens_per_s", True), ("request_throughput", True), ("ttft_p50_ms", False), ("itl_p50_ms", False))


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


def rows(points_run, runs, deployment):
    """One row per point: from the result file its command printed (``runs``: each point's command result), else a
    failed row saying why."""
    made = []
    for point, run in zip(points_run, runs):
        try:
            made.append(row(json.loads(run["stdout"]), point, deployment))
        except (AttributeError, KeyError, TypeError, ValueError):
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


def compare_with(recorded, kept):
    """The run a new one is compared with: the head's record of the profile's last run (the cluster's own, which an AWX
    job's fresh copy of the project lacks) before the controller's newest kept run. Where both exist and differ, the
    head's wins and the difference is said. Returns (that run's bench.json or None, a sentence or None)."""
    taken = [((run or {}).get("meta") or {}).get("taken_at") for run in (recorded, kept)]
    if recorded and kept and taken[0] != taken[1]:
        return recorded, ("The controller's newest run of this profile (%s) is not the one the head recorded (%s); compared "
                          "with the head's." % (taken[1], taken[0]))
    return recorded or kept or None, None


def last_runs(recorded):
    """status.yml's lines for the head's record of bench's last run of each profile ({profile: its bench.json})."""
    lines = []
    for profile, run in sorted((recorded or {}).items()):
        measured = [r for r in run.get("rows") or [] if r.get("output_tokens_per_s") is not None]
        best = max(measured, key=lambda r: r["output_tokens_per_s"]) if measured else None
        lines.append("Bench, last run of %s: %s, %d point(s)%s" % (
            profile, (run.get("meta") or {}).get("taken_at"), len(run.get("rows") or []),
            ", best %s output tokens/s at concurrency %s" % (best["output_tokens_per_s"], best["concurrency"]) if best else ", no result"))
    return lines


def against_published(rows, published):
    """Each published figure beside the measured point at its concurrency (and its input and output lengths, where the
    write-up gives them): [{published, measured (a row or None), ratio, says}]. A figure with no such point says what
    this sweep measured instead, so a differing setup is never read as a regression or a win."""
    compared = []
    for figure in published or []:
        lengths = {k: figure[k] for k in ("input_len", "output_len") if figure.get(k) is not None}
        same = [r for r in rows if r.get("concurrency") == figure["concurrency"] and r.get("output_tokens_per_s") is not None
                and all(r.get(k) == v for k, v in lengths.items())]
        at = "c%s%s" % (figure["concurrency"], "".join(", %s %s" % (k.split("_")[0], v) for k, v in sorted(lengths.items())))
        head = "%s: published %s output tokens/s (%s)" % (at, figure["output_tokens_per_s"], figure.get("source", ""))
        if not same:
            swept = sorted({(r.get("concurrency"), r.get("input_len"), r.get("output_len")) for r in rows}, key=str)
            compared.append({"published": figure, "measured": None, "ratio": None, "says": head + "; not measured: this sweep "
                             "ran %s (concurrency, in, out), so the two differ in setup and are not compared" % (
                                 ", ".join("%s/%s/%s" % point for point in swept) or "no point")})
            continue
        best = max(same, key=lambda r: r["output_tokens_per_s"])
        ratio = best["output_tokens_per_s"] / float(figure["output_tokens_per_s"]) if figure["output_tokens_per_s"] else None
        compared.append({"published": figure, "measured": best, "ratio": ratio, "says": head + "; measured %s at %s in / %s out: %s" % (
            best["output_tokens_per_s"], best.get("input_len"), best.get("output_len"),
            "%.0f%% of it" % (100 * ratio) if ratio is not None else "no ratio")})
    return compared


def summary(rows, previous, meta, bound, published, share):
    """The Markdown summary: the deployment, the table, the bound, the published figures and the comparison with
    ``previous`` (the previous run's bench.json: its meta and rows)."""
    lines = ["# Benchmark of %s" % meta["profile"], "",
             "- image: %s (%s), vLLM %s" % (meta.get("image"), (meta.get("image_id") or "")[:19], meta.get("vllm_version")),
             "- config hash: %s; nodes: %s; taken %s" % (meta.get("config_hash"), ", ".join(meta.get("nodes") or []), meta.get("taken_at")),
             "- load generated from %s" % ("%s, outside the cluster, through %s" % (meta["measured_from"], meta.get("url"))
                                           if meta.get("measured_from") else "the head, in a container of its own"),
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
        lines += ["", "Against the profile's write-up, point by point (its figure at the same concurrency, and lengths where it gives "
                  "them):", ""]
        lines += ["- " + c["says"] for c in against_published(rows, published)]
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
