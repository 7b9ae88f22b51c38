# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""upgrade.yml's report: what an upgrade changes from the last-known-good deployment (module_utils/plan/records.py
keeps it), each failure in a line, and the outcome with the seconds each step took. Pure.
"""

from __future__ import annotations


def change(recorded, plan):
    """What an upgrade changes, as lines ``what: before -> after`` (none: the plan is the recorded deployment)."""
    cluster = plan["cluster"]
    rows = (("image", recorded.get("image"), cluster.get("image")),
            ("image ID", short(recorded.get("image_id")), short(cluster.get("image_id"))),
            ("vLLM", recorded.get("vllm_version"), cluster.get("vllm_version")),
            ("profile", recorded.get("profile"), plan.get("profile")),
            ("backend", recorded.get("backend"), plan.get("backend")),
            ("overrides", recorded.get("overrides") or {}, plan.get("overrides") or {}),
            ("extra flags", recorded.get("extra_flags") or {}, plan.get("extra_flags") or {}),
            ("model revision", (recorded.get("model") or {}).get("revision"), plan["model"].get("revision")),
            ("vLLM config hash", recorded.get("serve_config_hash"), cluster.get("serve_config_hash")))
    return ["%s: %s -> %s" % (name, before, after) for name, before, after in rows if before != after]


def short(image_id):
    return image_id.split(":")[-1][:12] if image_id else image_id


def failure_line(failure):
    """One failure of a run (upgrade.yml's rescue): ``host: task: message``. A message given as lines (an assert's
    list: what failed, then the end of a log) keeps its first and its last line."""
    message = failure.get("message") or "failed"
    if isinstance(message, list):
        message = " ... ".join(str(line) for line in (message[:1] + message[-1:] if len(message) > 1 else message))
    return "%s: %s: %s" % (failure.get("host"), failure.get("task") or "a task", message)


def upgrade_report(recorded, planned, changed, failed, rollback_failed, began, ended, rolled_back=None, check=False):
    """upgrade.yml's report: its ``outcome`` (upgraded, unchanged, rolled_back, rollback_failed; in check mode checked
    or would_fail), a ``message`` that names what failed and where the cluster stands, both deployments and the
    seconds each step took."""
    def named(deployment):
        return "%s (%s, %s)" % (deployment.get("image"), short(deployment.get("image_id")), deployment.get("profile"))

    report = {"from": recorded, "to": planned, "change": list(changed or []), "failures": list(failed or []),
              "rollback_failures": None if rollback_failed is None else list(rollback_failed),
              "seconds": {"upgrade": round(ended - began, 1),
                          "rollback": None if rolled_back is None else round(rolled_back - ended, 1)}}
    if check:
        if failed:
            return dict(report, outcome="would_fail", message="Check mode: the upgrade to %s would fail: %s. Nothing was changed"
                        % (named(planned), "; ".join(failure_line(f) for f in failed)))
        return dict(report, outcome="checked", message="Check mode: the upgrade to %s would change %s. Nothing was changed"
                    % (named(planned), "; ".join(changed) if changed else "nothing"))
    if not failed:
        if not changed:
            return dict(report, outcome="unchanged", message="Nothing to upgrade: the plan is the last-known-good deployment %s, "
                        "and it answered" % named(recorded))
        return dict(report, outcome="upgraded", message="Upgraded to %s in %.0f s (%s); the endpoint, the smoke tests and the "
                    "canary passed. It is now the last-known-good deployment; last-known-good.json lists the images kept on every "
                    "node for a way back (vllm_images_kept)" % (named(planned), ended - began, "; ".join(changed)))
    why = "; ".join(failure_line(f) for f in failed)
    if rollback_failed is None:
        return dict(report, outcome="rollback_failed", message="The upgrade to %s failed (%s), and no rollback ran" % (named(planned), why))
    if not rollback_failed:
        return dict(report, outcome="rolled_back", message="The upgrade to %s failed: %s. Rolled back to %s in %.0f s: it serves "
                    "again, verified (the endpoint, the smoke tests and the canary). Nothing of the new deployment was kept; "
                    "fix what failed, then run upgrade.yml again" % (named(planned), why, named(recorded), rolled_back - ended))
    return dict(report, outcome="rollback_failed", message="The upgrade to %s failed: %s. The rollback to %s failed too: %s. The "
                "cluster may not serve: run playbooks/status.yml to see what runs, then playbooks/recover.yml"
                % (named(planned), why, named(recorded), "; ".join(failure_line(f) for f in rollback_failed)))
