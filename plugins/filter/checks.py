# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the verify steps: environment parity, the NCCL transport, status, byte counts; pure functions."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import bench, gateway, records, recover, ring
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import model_files
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import bench as bench_results, status, upgrade
from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import canary, nccl_log, parity, perftest


def env_parity(planned, actual, what="container"):
    return parity.check(planned, actual, what)


def environ_dump(text):
    return parity.parse_environ_dump(text)


def started_env(host_vars, names):
    """The environments of the containers a node started in this run, from its registered results of
    dgx_spark.vllm.container (``names``); a container the plan kept (change none) returns no inspect data."""
    envs = []
    for name in names:
        container = (host_vars.get(name) or {}).get("container") or {}
        if container.get("Config"):
            envs.append(parity.parse_env_list(container["Config"].get("Env")))
    return envs


def nccl_transport(text, expect_ib=True, strict=False):
    return nccl_log.verdict(text, expect_ib=expect_ib, strict=strict)


def status_report(states, gateway=None):
    return status.report(states, gateway)


def recover_decision(state, backend="ray"):
    """recover.yml's decision from state.yml's ``cluster_state``."""
    return recover.decide(state["nodes"], state["head"], state.get("ray"), state.get("vllm"), state.get("endpoint"), backend)


def last_known_good(plan, previous=None, verified_at=None):
    """The record of the verified deployment ``plan``, keeping the ``previous`` record's images
    (module_utils/plan/records.py)."""
    return records.record(plan, previous, verified_at)


def deployment_vars(recorded):
    """The variables that plan a recorded deployment again."""
    return records.extra_vars(recorded)


def deployment_restore(recorded):
    """The preflight role's ``preflight_restore`` that plans a recorded deployment again, whatever -e says."""
    return records.restore(recorded)


def deployment_change(recorded, plan):
    """What a plan changes from the recorded deployment, one ``what: before -> after`` line each."""
    return upgrade.change(recorded or {}, plan)


def upgrade_failure_line(failure):
    """One failure of upgrade.yml, as ``host: task: message``."""
    return upgrade.failure_line(failure)


def upgrade_report(recorded, planned, changed, failed, rollback_failed, began, ended, rolled_back=None, check=False):
    """upgrade.yml's report: outcome, message, both deployments and their seconds."""
    return upgrade.upgrade_report(recorded, planned, changed, failed, rollback_failed, began, ended, rolled_back, check)


def bench_sweep(bench_target, given, stamp, reports_dir):
    """bench.yml's sweep: {config, points, errors, dirs} (module_utils/plan/bench.py)."""
    return bench.sweep(bench_target, given, stamp, reports_dir)


def bench_argv(point, bench_target, result_dir):
    """vllm bench serve for one point, run inside the head's container; the key is read there."""
    return bench.argv(point, bench_target, result_dir)


def bench_rows(points_run, results, runs, deployment):
    """One row per point from its slurped result file, or a failed row saying why."""
    return bench_results.rows(points_run, results, runs, deployment)


def kept_images_to_remove(image_ls_lines, recorded, cluster_name):
    """This cluster's kept image tags on a node that the record no longer keeps."""
    return records.kept_to_remove([l.strip() for l in image_ls_lines if l.strip()], recorded, cluster_name)


def canary_keep(stored, answers, basis_now, recorded_at):
    """The reference file with these answers kept as the reference of their model."""
    return canary.keep(stored, basis_now["model"], canary.reference(answers, basis_now, recorded_at))


def canary_verdict(stored, basis_now, answers, settings):
    """The comparison with the model's reference, or None when the model has none yet."""
    kept = canary.stored_for(stored, basis_now["model"])
    return canary.compare(kept, basis_now, answers, settings) if kept else None


def recover_refusal(nodes, plan_nodes, waited):
    return recover.refusal(nodes, plan_nodes, int(waited))


def status_node(pair):
    return status.node(pair)


def human_bytes(size):
    return model_files.human(None if size is None else int(size))


def rsync_summary(results):
    return model_files.copy_summary(results)


def ring_failures(report):
    return ring.failures(report)


def perftest_argv(ends, side):
    """ib_write_bw's argv on a ring node: the server on its end b, the client on its end a, writing to that link's b."""
    for end in ends:
        if side == "client" and end["side"] == "a":
            return perftest.client_argv(end["rdma"], end["gid_index"], end["peer_address"])
        if side == "server" and end["side"] == "b":
            return perftest.server_argv(end["rdma"], end["gid_index"])
    raise AnsibleFilterError("no ring end for the %s side of ib_write_bw in %s" % (side, ends))


def perftest_verdict(output, ends):
    """The client's result on this node's end a, judged: a warning line, or the figure beside the published one."""
    link = next((e["link"] for e in ends if e["side"] == "a"), "?")
    result = perftest.parse(output)
    return perftest.judge(result, True, link) or "link %s: %.1f Gb/s (published: at least %.0f Gb/s in a ring)" % (
        link, result["average_gbps"], perftest.PUBLISHED_GBPS["ring"])


def ring_table(nodes):
    return ring.table(nodes)


def ring_ends(given, hosts):
    """{host: [[port, IPv4], ...]}: the addresses the planner gives each ring port (the simulated cluster's GID tables)."""
    return {host: [[end["interface"], end["address"].split("/")[0]] for end in ends]
            for host, ends in ring.plan(given, list(hosts))["ends"].items()}


def gateway_config(routes, keys, client_key, interval):
    """The gateway's configuration file (its keys in it: only a no_log task may use this)."""
    missing = sorted(r["deployment"] for r in routes if not (keys.get(r["deployment"]) or "").strip())
    if missing or not (client_key or "").strip():
        raise AnsibleFilterError("the gateway needs every key: the key file of %s is empty"
                                 % (", ".join("deployment " + m for m in missing) or "the cluster (vllm_api_key)"))
    return gateway.config_text(routes, {k: v.strip() for k, v in keys.items()}, client_key.strip(), interval)


class FilterModule:
    """dgx_spark.vllm verification filters."""

    def filters(self):
        return {
            "env_parity": env_parity,
            "environ_dump": environ_dump,
            "started_env": started_env,
            "nccl_transport": nccl_transport,
            "status_node": status_node,
            "status_report": status_report,
            "recover_decision": recover_decision,
            "recover_refusal": recover_refusal,
            "canary_keep": canary_keep,
            "canary_verdict": canary_verdict,
            "last_known_good": last_known_good,
            "deployment_vars": deployment_vars,
            "deployment_restore": deployment_restore,
            "deployment_change": deployment_change,
            "kept_images_to_remove": kept_images_to_remove,
            "upgrade_failure_line": upgrade_failure_line,
            "upgrade_report": upgrade_report,
            "bench_sweep": bench_sweep,
            "bench_argv": bench_argv,
            "bench_rows": bench_rows,
            "human_bytes": human_bytes,
            "rsync_summary": rsync_summary,
            "ring_failures": ring_failures,
            "ring_ends": ring_ends,
            "ring_table": ring_table,
            "perftest_argv": perftest_argv,
            "perftest_verdict": perftest_verdict,
            "gateway_config": gateway_config,
        }
