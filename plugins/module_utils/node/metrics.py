# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's figures for the head's Prometheus, served by the node's supervisor (module_utils/node/supervisor.py) on
the node's fabric address: its unified memory as the probe reads it (module_utils/probe/unified_memory.py: the pinned
memory nothing explains, which the node exporter cannot tell apart, fact 3) and the supervisor's own state. Why these
figures and who scrapes them: module_utils/plan/monitoring.py. The same figures may also be written where a node_exporter
already on the node reads them (its textfile collector; the plan's ``textfile``). Runs on the node: stdlib only.
"""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import write_text

PREFIX = "dgx_spark_"


def _sample(name, value, labels, kind, text):
    label = ",".join('%s="%s"' % (k, str(v).replace("\\", "\\\\").replace('"', '\\"')) for k, v in sorted(labels.items()))
    return ["# HELP %s%s %s" % (PREFIX, name, text), "# TYPE %s%s %s" % (PREFIX, name, kind),
            "%s%s{%s} %s" % (PREFIX, name, label, value)]


def node_metrics(fact, supervisor_state, labels):
    """Prometheus's text format of a node's unified memory (the unified_memory fact) and its supervisor's state."""
    lines = []
    for key, name, text in (
            ("mem_total_bytes", "memory_total_bytes", "MemTotal of the node's unified memory"),
            ("mem_available_bytes", "memory_available_bytes", "MemAvailable: what CUDA and the OS can still take"),
            ("page_cache_bytes", "memory_page_cache_bytes", "Page cache (weights read leave it; drop_caches frees it)"),
            ("gpu_process_bytes", "memory_gpu_process_bytes", "Memory of the live GPU processes (nvidia-smi)"),
            ("unaccounted_bytes", "memory_unaccounted_bytes", "Used memory nothing live explains: pinned by a rank killed hard")):
        lines += _sample(name, int(fact.get(key) or 0), labels, "gauge", text)
    lines += _sample("vllm_ranks", len(fact.get("gpu_processes") or []), labels, "gauge", "vLLM ranks holding GPU memory")
    lines += _sample("supervisor_state", 1, dict(labels, state=supervisor_state or "unknown"), "gauge",
                     "The node's supervisor state (held, waiting, refused, starting, serving, failed)")
    return "\n".join(lines) + "\n"


def figures_now(ops, shared, labels):
    """The node's figures now, and the supervisor's last state, labelled ``labels``."""
    try:
        fact = ops.memory()
    except (OSError, ValueError, KeyError):
        fact = {}
    return node_metrics(fact, shared.get("state"), labels)


def metrics_text(config, ops, shared):
    """What the node's /metrics answers."""
    return figures_now(ops, shared, config["metrics"]["labels"])


def textfile_text(config, ops, shared):
    """What the node's supervisor writes for a node_exporter's textfile collector (the plan's ``textfile``): the same
    figures as /metrics, or None when the plan asks for none."""
    wanted = config.get("textfile")
    return figures_now(ops, shared, wanted["labels"]) if wanted else None


def write_textfile(config, ops, shared, memo=None):
    """The node's figures written whole where the plan's node_exporter reads them (textfile_text), in a folder that is
    node_exporter's (never made here, never a link, not writable by its group or others); a failure is returned to be
    said once, and tried again every look. Where the plan moved or dropped the file since this supervisor last wrote it
    (``memo``), the one it wrote goes: node_exporter would export its last figures forever."""
    memo = {} if memo is None else memo
    last, wanted = memo.get("textfile"), (config.get("textfile") or {}).get("path")
    if last and last != wanted:
        try:
            if os.path.lexists(last) and not os.path.isdir(last):
                os.unlink(last)
        except OSError as exc:
            return "cannot remove the node's figures from %s: %s" % (last, exc.strerror or exc)
    memo["textfile"] = wanted
    text = textfile_text(config, ops, shared)
    if text is None:
        return None
    folder = os.path.dirname(wanted)
    if not os.path.isdir(folder):  # node_exporter's own folder: made by its package, never by the supervisor
        return "cannot write the node's figures to %s: the folder is missing (is node_exporter's textfile collector set up?)" % folder
    try:
        write_text(wanted, text, 0o644, strict_folder=True)
    except (OSError, ValueError) as exc:
        return "cannot write the node's figures to %s: %s" % (wanted, getattr(exc, "strerror", None) or exc)
    return None


def serve_metrics(config, ops, shared, server=None):
    """Serve /metrics where the plan says (a thread of the supervisor); moved when the plan moves it, stopped when the
    plan turns monitoring off. Returns the server now running, or None."""
    wanted = config.get("metrics")
    where = (wanted["address"], wanted["port"]) if wanted else None
    if server is not None and server.server_address[:2] == where:
        return server
    if server is not None:
        server.shutdown()
        server.server_close()
    if where is None:
        return None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics_text(config, ops, shared).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # the supervisor's status file is its log
            pass

    try:
        server = ThreadingHTTPServer(where, Handler)
    except OSError as exc:
        shared["metrics_error"] = "cannot serve /metrics on %s:%d: %s" % (where[0], where[1], exc)
        return None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
