# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgx_spark.vllm.bench_report: writes a benchmark run's files on the controller.

In ``folder``: ``bench.csv`` and ``bench.json`` (one row per point), ``throughput.png`` and ``latency.png`` (made with
matplotlib, headless), and ``summary.md``, which compares the figures with the previous run of the same profile found
under ``runs_dir`` and flags a regression beyond ``share``. The rows and the comparison are module_utils/plan/bench.py's.
"""

from __future__ import annotations

import glob
import json
import os

from ansible.errors import AnsibleActionFail

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import bench
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import bench as bench_results
from ansible_collections.dgx_spark.vllm.plugins.plugin_utils.controller import ControllerAction

ARGUMENT_SPEC = dict(
    folder=dict(type="path", required=True),
    runs_dir=dict(type="path", required=True),
    rows=dict(type="list", elements="dict", required=True),
    meta=dict(type="dict", required=True),
    bound=dict(type="float"),
    published=dict(type="list", elements="dict", default=[]),
    share=dict(type="float", default=bench.DEFAULTS["regression_share"]),
    recorded=dict(type="dict"),
)


def previous_run(runs_dir, folder, profile):
    """The newest earlier run of ``profile`` under ``runs_dir`` (its bench.json), or None."""
    found = []
    for path in glob.glob(os.path.join(runs_dir, "*", "bench.json")):
        if os.path.dirname(os.path.abspath(path)) == os.path.abspath(folder):
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            continue
        if (data.get("meta") or {}).get("profile") == profile:
            found.append(((data.get("meta") or {}).get("taken_at") or "", data))
    return max(found, key=lambda item: item[0])[1] if found else None


def plot(folder, rows, bound, published):
    """throughput.png and latency.png against concurrency, one line per input/output length."""
    import matplotlib  # pylint: disable=import-outside-toplevel  # the controller's; imported only to draw
    matplotlib.use("Agg")
    from matplotlib import pyplot, ticker  # pylint: disable=import-outside-toplevel

    plain = ticker.FuncFormatter(lambda value, dummy: "%g" % value)  # 60, not 6 x 10^1, on the log axes

    shapes = sorted({(r["input_len"], r["output_len"]) for r in rows})
    figure, axis = pyplot.subplots(figsize=(8, 5))
    for input_len, output_len in shapes:
        points = sorted((r["concurrency"], r["output_tokens_per_s"]) for r in rows
                        if (r["input_len"], r["output_len"]) == (input_len, output_len) and r["output_tokens_per_s"] is not None)
        if points:
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label="measured, in %d / out %d" % (input_len, output_len))
    concurrency = sorted({r["concurrency"] for r in rows})
    if bound:
        axis.plot(concurrency, [c * bound for c in concurrency], linestyle="--", color="grey",
                  label="decode bound: c x %.1f tok/s (273 GB/s per node)" % bound)
    for entry in published:
        axis.scatter([entry["concurrency"]], [entry["output_tokens_per_s"]], marker="*", s=120, zorder=3,
                     label="published: %s" % entry.get("source", ""))
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")  # the bound is often an order of magnitude above what a deployment reaches
    axis.set_xticks(concurrency)
    axis.set_xticklabels([str(c) for c in concurrency])
    axis.set_xlabel("concurrent requests")
    axis.set_ylabel("output tokens/s, all requests (log)")
    axis.yaxis.set_major_formatter(plain)
    axis.set_title("Throughput against concurrency")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(os.path.join(folder, "throughput.png"), dpi=110)
    pyplot.close(figure)

    figure, axis = pyplot.subplots(figsize=(8, 5))
    for input_len, output_len in shapes:
        same = sorted((r for r in rows if (r["input_len"], r["output_len"]) == (input_len, output_len)), key=lambda r: r["concurrency"])
        for column, color, style in (("ttft_p50_ms", "tab:blue", "-"), ("ttft_p99_ms", "tab:blue", ":"),
                                     ("itl_p50_ms", "tab:orange", "-"), ("itl_p99_ms", "tab:orange", ":")):
            points = [(r["concurrency"], r[column]) for r in same if r[column] is not None]
            if points:
                axis.plot([p[0] for p in points], [p[1] for p in points], linestyle=style, marker="o", color=color,
                          label="%s, in %d / out %d" % (column.replace("_ms", "").replace("_", " ").upper(), input_len, output_len))
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xticks(concurrency)
    axis.set_xticklabels([str(c) for c in concurrency])
    axis.set_xlabel("concurrent requests")
    axis.set_ylabel("milliseconds (log)")
    axis.yaxis.set_major_formatter(plain)
    axis.yaxis.set_minor_formatter(plain)
    axis.set_title("Latency against concurrency: time to first token, inter-token latency")
    axis.grid(True, alpha=0.3, which="both")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(os.path.join(folder, "latency.png"), dpi=110)
    pyplot.close(figure)


class ActionModule(ControllerAction):
    """Write a benchmark run's CSV, JSON, plots and summary."""

    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, result, args, task_vars):
        folder, rows, meta = args["folder"], args["rows"], args["meta"]
        before, differ = bench_results.compare_with(args["recorded"], previous_run(args["runs_dir"], folder, meta.get("profile")))
        text = bench_results.summary(rows, before, meta, args["bound"], args["published"], args["share"]) + (differ + "\n" if differ else "")
        run = {"meta": meta, "rows": rows, "decode_bound": args["bound"], "published": args["published"],
               "against_published": [{k: c[k] for k in ("published", "ratio", "says")} for c in bench_results.against_published(rows, args["published"])]}
        result.update(changed=False, folder=folder, summary=text, run=run,
                      regressions=bench_results.regressions(rows, (before or {}).get("rows"), args["share"]) if before else [],
                      previous=(before or {}).get("meta", {}).get("taken_at"))
        if self._task.check_mode:
            return result
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "bench.csv"), "w", encoding="utf-8") as handle:
                handle.write(bench_results.csv_text(rows))
            with open(os.path.join(folder, "bench.json"), "w", encoding="utf-8") as handle:
                json.dump(run, handle, indent=2, sort_keys=True)
                handle.write("\n")
            with open(os.path.join(folder, "summary.md"), "w", encoding="utf-8") as handle:
                handle.write(text)
            plot(folder, rows, args["bound"], args["published"])
        except (OSError, ImportError) as exc:
            raise AnsibleActionFail("could not write the benchmark's files in %s: %s" % (folder, exc))
        result["files"] = sorted(os.listdir(folder))
        return result
