# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the nodes get the image (``image_source``): ``stream``, the head's image sent to each worker that lacks it
(``docker save | ssh <worker fabric address> docker load``, roles/image), or ``pull``, each node fetching the plan's
image from its registry (module_utils/node/registry.py).

With ``pull``, every node lacking its image is asked, before anything changes, whether it can pull it (its CA, its
login, the name), and pulls it once all can; then the probe reads it, so the plan judges the image itself (its vLLM,
its flags, its NCCL), as it judges a streamed one on the head. The pulls come from the inventory's plan (``for_hosts``),
so they happen before the probe."""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.registry import reference

SOURCES = ("stream", "pull")


def check(settings, findings):
    """image_source is stream or pull, and pull is not asked with a build on the head (which the head then streams)."""
    source = settings.get("image_source")
    if source not in SOURCES:
        findings.error("all", source, "image_source must be stream (the head streams its image to every worker that lacks it) or "
                       "pull (each node pulls vllm_image from its registry), got %r" % (source,))
    elif source == "pull" and settings.get("image_build"):
        findings.error("all", "image_build", "image_build builds the image on the head, which then streams it to the workers; with "
                       "image_source: pull each node pulls vllm_image from its registry instead. Choose one: image_source: stream "
                       "with image_build, or push the built image to your registry and pull it")


def for_hosts(plans, settings_of, login_for=None):
    """host -> the images it pulls when it lacks them (deployments with image_source: pull, each image once), each
    with its registry and whether the login goes with it: only to the registry it is for (``login_for``:
    image_registry, else the registry of the inventory's vllm_image), as docker login keeps one per registry."""
    found = {}
    for name, plan in plans.items():
        settings = settings_of.get(name) or {}
        if settings.get("image_source") != "pull" or not settings.get("image"):
            continue
        registry = reference(settings["image"])["registry"]
        entry = {"image": settings["image"], "registry": registry, "login": registry == login_for}
        for host in (plan or {}).get("nodes_order") or []:
            if entry not in found.setdefault(host, []):
                found[host].append(entry)
    return found


def login_registry(settings):
    """The registry image_registry_username's login is for: image_registry, else the one vllm_image names."""
    return settings.get("image_registry") or (reference(settings["image"])["registry"] if settings.get("image") else None)


def other_ids(order, nodes, wanted, findings):
    """With pull, a node holding another image under the name is not sent the head's: the plan says so, with the fix."""
    for name in order[1:]:
        held = nodes[name].get("image_id")
        if wanted and held and held != wanted:
            findings.error(name, held, "%s holds another image under the plan's name than the head %s (%s, the head's %s), and "
                           "image_source: pull fetches only what a node lacks. Pull it again on each node (docker pull), or remove "
                           "it where it is older (docker image rm), then run again" % (name, order[0], held[:19], wanted[:19]))
