# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The last-known-good deployment: what a verified serve.yml ran, kept on the head and on the controller.

"Broken again after the upgrade" needs a way back, and a way back needs a record of what last worked: the image by
its ID (a tag moves), the profile and backend, the inputs the plan was made with (overrides, extra flags and env),
the hashes that say whether a later plan is the same deployment, and the model's revision. serve.yml writes it once
the endpoint is verified, on the controller beside plan.json (``last-known-good.json``) and on the head
(``<state>/config/last-known-good.json``) with a copy on the next node (``keepers``), so any survives the others' loss. recover.yml restores that
deployment, not whatever the last plan.json tried; upgrade.yml falls back to it when the new one fails.

A tag moves (a rebuilt ``vllm:latest``, a ``docker load`` of a newer image under the same name), so the way back
needs the image itself: every verified image is tagged on every node as ``KEPT_REPOSITORY:<cluster>-<id>``, and
the newest ``images_kept`` of them stay (the one serving and the one before it, by default). A rollback plans its
image by that tag. Only this repository's tags of this cluster are ever removed; an image that still has another
tag (the user's) keeps it, and Docker deletes the image only when no tag and no container is left.
"""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import boot

KEPT_REPOSITORY = "dgx-spark-vllm-kept"
# The records the cluster keeps (each node's paths name them): the plan's field for each, and its path's key.
RECORDS = (("recorded", "last_known_good_file"), ("canary_recorded", "canary_file"), ("bench_recorded", "bench_record_file"))


def keepers(order):
    """The nodes that keep the records: the head, and a copy on the next node where there is one, so that a head whose
    state folder is lost (a reinstall, a replaced disk) does not take the way back with it."""
    return list(order[:2])


def own(plan, facts, name, key="last_known_good_file"):
    """What node ``name``'s probe read of one record (None: absent, unreadable, or the node was not asked)."""
    return ((facts.get(name) or {}).get("records") or {}).get(plan["nodes"][name]["paths"][key])


def kept(plan, facts):
    """Each record as the cluster keeps it: the head's, else the copy on the next node (``cluster.records_on``)."""
    found = {}
    for field, key in RECORDS:
        found[field] = next((r for r in (own(plan, facts, n, key) for n in plan["cluster"]["records_on"]) if r), None)
    found["bench_recorded"] = found["bench_recorded"] or {}  # {profile: its last run}
    return found


def short_id(image_id):
    """An image's ID as its kept tag and its compile caches name it: 12 hex digits, "" when unknown."""
    return (image_id or "").split(":")[-1][:12]


def kept_tag(cluster_name, image_id):
    """The tag that keeps a verified image on every node, or None before the image is known."""
    if not image_id:
        return None
    return "%s:%s-%s" % (KEPT_REPOSITORY, cluster_name, short_id(image_id))


def kept_reference(cluster_name):
    """The reference filter (``docker image ls --filter reference=...``) of this cluster's kept tags."""
    return "%s:%s-*" % (KEPT_REPOSITORY, cluster_name)


def kept_list_argv(cluster_name):
    """What lists this cluster's kept image tags on a node, one ``repository:tag`` a line."""
    return ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "reference=" + kept_reference(cluster_name)]


def record(plan, previous=None, verified_at=None):
    """The record of a verified deployment, from its plan, and the previous record (its kept images).

    ``kept_images`` lists the tags to keep, oldest first: the previous record's, then this deployment's, the newest
    ``images_kept`` of them."""
    cluster = plan["cluster"]
    kept = [t for t in ((previous or {}).get("kept_images") or []) if t != cluster.get("kept_image")]
    kept = (kept + [cluster["kept_image"]] if cluster.get("kept_image") else kept)[-int(cluster.get("images_kept") or 1):]
    return {"image": cluster["image"], "image_id": cluster.get("image_id"), "vllm_version": cluster.get("vllm_version"),
            "kept_image": cluster.get("kept_image"), "kept_images": kept,
            "profile": plan["profile"], "profile_file": plan.get("profile_file"), "backend": plan["backend"],
            "overrides": dict(plan.get("overrides") or {}), "extra_flags": dict(plan.get("extra_flags") or {}),
            "extra_env": dict(plan.get("extra_env") or {}),
            "serve_config_hash": cluster.get("serve_config_hash"), "cluster_hash": cluster.get("hash"),
            "model": {"id": plan["model"]["id"], "revision": plan["model"].get("revision")},
            "nodes": list(plan["nodes_order"]), "verified_at": verified_at}


def same(recorded, plan):
    """Whether ``plan`` is the deployment ``recorded`` (the same image ID and the same vLLM configuration)."""
    if not recorded:
        return False
    cluster = plan["cluster"]
    return (recorded.get("image_id") == cluster.get("image_id")
            and recorded.get("serve_config_hash") == cluster.get("serve_config_hash")
            and recorded.get("cluster_hash") == cluster.get("hash"))


def commit_changes(plan, facts):
    """What serve.yml's commit step (playbooks/tasks/commit.yml) would change, one reason each; empty when the nodes
    hold it all already, and the step is skipped: a run that changes nothing writes nothing.

    The step makes the verified deployment the one the nodes bring back (each node's supervisor, module_utils/plan/boot.py)
    and the one an upgrade falls back to (the head's record, its image kept on every node). ``plan["cluster"]
    ["recorded"]`` is the head's record as the probe read it; ``facts`` maps each node to its probe's facts (``state``:
    the supervisor's files hashed, ``supervisor_running``, ``kept_images``). The head's record counts only when every
    field is what this plan records (a record that differs in anything, its flags, env or profile, is written again
    from the plan), and anything the apply step changes is committed again once verified."""
    cluster = plan["cluster"]
    reasons = ["the apply step changes the cluster"] if cluster.get("apply_needed") else []
    head = plan["nodes_order"][0]
    recorded = own(plan, facts, head) if "records" in (facts.get(head) or {}) else cluster.get("recorded")
    held = isinstance(recorded, dict) and bool(recorded)
    if not held:
        reasons.append("the head has no last-known-good record")
    elif not same(recorded, plan):
        reasons.append("the head's last-known-good record names another deployment")
    elif dict(record(plan, recorded), verified_at=None) != dict(recorded, verified_at=None):  # kept_images over images_kept too
        reasons.append("the head's last-known-good record differs from this deployment's")
    for name in [n for n in cluster.get("records_on") or [] if "records" in (facts.get(n) or {})]:  # where the probe read them
        copy = own(plan, facts, name)
        if name != head and held and copy != recorded:  # the copy; where the head has none, the copy is the record
            reasons.append("%s: its copy of the last-known-good record %s" % (name, "differs" if copy else "is missing"))
        if cluster.get("canary_recorded") and not own(plan, facts, name, "canary_file"):  # kept on one node, not the other
            reasons.append("%s lacks the canary's references" % name)
    for name in plan["nodes_order"]:
        found = facts.get(name) or {}
        changes = boot.install_changes(plan["nodes"][name]["boot"], found.get("state"), found.get("supervisor_running"))
        if changes:
            reasons.append("%s: the supervisor's %s" % (name, ", ".join(c.rsplit("/", 1)[-1] for c in changes)))
        if cluster.get("kept_image") and "state" in found and cluster["kept_image"] not in (found.get("kept_images") or []):
            reasons.append("%s lacks the kept image %s" % (name, cluster["kept_image"]))
    return {"needed": bool(reasons), "reasons": reasons}


def restore(recorded):
    """What the preflight role plans instead of the inventory's choices (its ``preflight_restore``), so that the
    recorded deployment is planned again whatever ``-e`` says: upgrade.yml's rollback runs with the new image given
    as an extra variable, which no later variable can outrank. The image is the kept tag (the recorded ID, even where
    the recorded name now names another image); overrides, extra flags and env are the recorded ones, nothing more."""
    return {"image": recorded.get("kept_image") or recorded["image"],
            "profile": "" if recorded.get("profile_file") else recorded["profile"],
            "profile_file": recorded.get("profile_file") or "", "backend": recorded["backend"],
            "overrides": dict(recorded.get("overrides") or {}), "extra_flags": dict(recorded.get("extra_flags") or {}),
            "extra_env": dict(recorded.get("extra_env") or {})}


def kept_to_remove(tags, recorded, cluster_name):
    """This cluster's kept tags on a node (``tags``: what ``docker image ls`` lists) that the record no longer keeps."""
    prefix = "%s:%s-" % (KEPT_REPOSITORY, cluster_name)
    keep = set(recorded.get("kept_images") or [])
    return sorted(t for t in tags if t.startswith(prefix) and t not in keep)
