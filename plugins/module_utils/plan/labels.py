# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The labels that mark what this collection made, and the one answer to "is this container ours?".

Every container the collection starts (Ray, the mp ranks, Prometheus, the gateway) carries ``managed=true``, its
cluster (a deployment's own name), its node and its role, and the config hash its plan gave it: a container is
recreated only when that hash changed. Only a container labelled ``managed=true`` is ever replaced or removed; one
that merely has our name, or our cluster's label, is someone else's and is named, never touched (fact 15). The
planner, the teardown and the probe's readers all ask here. Pure.
"""

from __future__ import annotations

LABEL = "dgx_spark.vllm"
MANAGED = LABEL + ".managed"
CLUSTER = LABEL + ".cluster"
NODE = LABEL + ".node"
ROLE = LABEL + ".role"
CONFIG_HASH = LABEL + ".config_hash"


def labels(cluster, node, role):
    """The labels of a container the collection makes for ``cluster`` on ``node``, in ``role``."""
    return {MANAGED: "true", CLUSTER: cluster, NODE: node, ROLE: role}


def ours(found):
    """Whether a container (its labels, or a probed container with ``labels``) was made by this collection."""
    found = found or {}
    given = found.get("labels") if isinstance(found.get("labels"), dict) else found
    return (given or {}).get(MANAGED) == "true"


def config_hash(found):
    """The config hash a container (its labels, or a probed container with ``labels``) carries, or None."""
    found = found or {}
    given = found.get("labels") if isinstance(found.get("labels"), dict) else found
    return (given or {}).get(CONFIG_HASH)


def of(found, cluster, node=None):
    """Whether a probed container belongs to ``cluster`` (and ``node``, when given) by its labels."""
    given = (found or {}).get("labels") or {}
    return given.get(CLUSTER) == cluster and (node is None or given.get(NODE) == node)


def filters(cluster, node=None):
    """``docker ps --filter`` values that list the containers the collection made for ``cluster`` (on ``node``)."""
    return ["label=%s=true" % MANAGED, "label=%s=%s" % (CLUSTER, cluster)] + (["label=%s=%s" % (NODE, node)] if node else [])
