# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Taking a node back, as the node_teardown module does it: argv builders and the memory verdict, nothing run here.

Only what the collection made is touched: containers carrying the ``managed`` label and this cluster's and this
node's labels (plan/labels.py). vLLM is stopped by process group first (fact 3), then every container with one
``docker stop`` (Ray stops on SIGTERM in a second or two, its drain off: plan/commands.py RAY_STOP_ENV; ``ray stop``
first would leave it draining a node that is gone for its full 30 s), their logs are kept (fact 16), then they are
removed. The memory each node had before the launch (the plan's baseline file) is compared with what it has after
(fact 3: memory pinned by a killed process is freed only by a reboot).
"""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import labels

GIB = 1 << 30


def find_argv(docker, cluster, node):
    """This cluster's containers on this node, made by the collection: one ``name<TAB>state`` per line."""
    return ([docker, "ps", "--all", "--no-trunc"] + [a for f in labels.filters(cluster, node) for a in ("--filter", f)]
            + ["--format", "{{.Names}}\t{{.State}}"])


def parse_found(text):
    """``[(name, state)]`` from :func:`find_argv`'s output, sorted by name."""
    found = []
    for line in (text or "").splitlines():
        name, dummy, state = line.strip().partition("\t")
        if name:
            found.append((name, state or "unknown"))
    return sorted(found)


def labelled_argv(docker, cluster):
    """Every container carrying this cluster's label, with its managed label: ``name<TAB>managed`` per line."""
    return [docker, "ps", "--all", "--no-trunc", "--filter", "label=%s=%s" % (labels.CLUSTER, cluster),
            "--format", "{{.Names}}\t{{.Label \"%s\"}}" % labels.MANAGED]


def not_ours(text):
    """The containers of :func:`labelled_argv`'s output that the collection did not make (no managed=true label)."""
    found = []
    for line in (text or "").splitlines():
        name, dummy, managed = line.strip().partition("\t")
        if name and not labels.ours({labels.MANAGED: managed.strip()}):
            found.append(name)
    return sorted(found)


def nft_delete_argv(nft, table):
    """Only the collection's own table; no other is touched."""
    return [nft, "delete", "table", "inet", table]


def stop_argv(docker, names, timeout):
    return [docker, "stop", "--time", str(int(timeout))] + list(names)


def logs_argv(docker, name):
    return [docker, "logs", "--timestamps", name]


def remove_argv(docker, names):
    return [docker, "rm", "--force"] + list(names)


def memory_verdict(host, before, after, tolerance_gib):
    """Whether ``host`` got its memory back: MemAvailable after teardown against the baseline before launch.
    ``before`` is None without a baseline (nothing was launched by this collection): nothing to judge.

    GPU processes still running that hold more than at the baseline explain that much: another deployment on the
    same node (vllm_deployments), launched after this one's baseline, keeps serving. Memory pinned by a killed
    process belongs to no process (fact 3), so it is never explained away."""
    if before is None:
        return {"judged": False, "ok": True, "missing_gib": None, "message": "%s: no memory baseline (nothing launched)" % host}
    others = max(0, int(after.get("gpu_process_bytes") or 0) - int(before.get("gpu_process_bytes") or 0))
    missing = round((int(before["mem_available_bytes"]) - int(after["mem_available_bytes"]) - others) / GIB, 1)
    if missing <= tolerance_gib:
        return {"judged": True, "ok": True, "missing_gib": missing,
                "message": "%s: memory back to its baseline (within %g GiB%s)" % (
                    host, tolerance_gib, "; %.1f GiB held by GPU processes still running" % (others / GIB) if others else "")}
    unaccounted = round(int(after.get("unaccounted_bytes") or 0) / GIB, 1)
    return {"judged": True, "ok": False, "missing_gib": missing,
            "message": "%s did not get its memory back: %s GiB less available than before launch (%s GiB unaccounted). On a "
                       "GB10 memory pinned by a killed process is freed only by a reboot: reboot %s." % (host, missing, unaccounted, host)}
