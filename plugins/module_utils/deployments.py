# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The last-known-good deployment: what a verified serve.yml ran, kept on the head and on the controller.

"Broken again after the upgrade" needs a way back, and a way back needs a record of what last worked: the image by
its ID (a tag moves), the profile and backend, the overrides the plan was made with, the hashes that say whether a
later plan is the same deployment, and the model's revision. serve.yml writes it once the endpoint is verified, on the
controller beside plan.json (``last-known-good.json``) and on the head (``<state>/config/last-known-good.json``), so
either survives the other's loss. recover.yml restores that deployment, not whatever the last plan.json tried.
"""

from __future__ import annotations


def record(plan, verified_at=None):
    """The record of a verified deployment, from its plan (its ``overrides``: the inputs that are not the profile's,
    e.g. vllm_max_model_len, so that the same deployment can be planned again)."""
    cluster = plan["cluster"]
    return {"image": cluster["image"], "image_id": cluster.get("image_id"), "vllm_version": cluster.get("vllm_version"),
            "profile": plan["profile"], "backend": plan["backend"],
            "overrides": dict(plan.get("overrides") or {}),
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


def extra_vars(recorded):
    """The variables that plan the recorded deployment again (recover.yml sets them)."""
    result = {"vllm_profile": recorded["profile"], "vllm_backend": recorded["backend"]}
    result.update({"vllm_" + k: v for k, v in (recorded.get("overrides") or {}).items()})
    return result
