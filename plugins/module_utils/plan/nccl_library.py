# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which NCCL library the ranks load: the image's (its pip wheel's) or each node's system NCCL.

The trap (vllm-project/vllm #41725, #42354): two Sparks serving TP=2 hung after 20-26 minutes of concurrent load, a
rank spinning in ``ncclAllReduce``. The pip wheel's ``nvidia-nccl-cu13`` and DGX OS's ``libnccl2`` carried the same
version number and were different builds; replacing the image's library with the system's fixed it. So the plan
shows both (probe/nccl_lib.py reads path, version and build ID), warns when they are two builds of one version, and
``vllm_nccl_library: system`` does what the field fix did: each node's system library is mounted read-only over the
file the image's torch loads, and ``VLLM_NCCL_SO_PATH`` names that same file, so vLLM's own NCCL wrapper (pynccl)
and torch.distributed load one library. Setting only ``VLLM_NCCL_SO_PATH`` or ``LD_LIBRARY_PATH`` retargets pynccl
while torch keeps the wheel's: two NCCLs in one process ("split brain").
"""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.nccl_lib import short

MODES = ("image", "system")
SO_PATH_ENV = "VLLM_NCCL_SO_PATH"   # vllm/envs.py: the library vLLM's pynccl opens


def _version(identity):
    return (identity or {}).get("version")


def plan(settings, image_nccl, systems, order, findings):
    """The ``cluster.nccl_library`` section: the mode, the image's library, each node's system library, and for
    ``system`` the mount (per node) and the variable every rank gets. ``systems``: node -> probe/nccl_lib.system()."""
    mode = settings.get("nccl_library") or "image"
    section = {"mode": mode, "image": image_nccl, "system": {n: systems.get(n) for n in order}, "volumes": {}, "env": {}, "builds": {},
               "lines": ["the image's: %s%s" % (short(image_nccl), "" if not image_nccl else " (%s)" % image_nccl["path"])]
               + ["%s's system: %s" % (n, short(systems.get(n))) for n in order]}
    if mode not in MODES:  # refused with the inventory (plan/inventory.py)
        return section
    twins = [n for n in order if systems.get(n) and image_nccl and _version(systems[n]) == _version(image_nccl)
             and systems[n].get("build_id") != image_nccl.get("build_id")]
    if mode == "image" and twins:
        findings.warn("the image's NCCL %s and the system NCCL of %s are the same version in different builds (%s against %s). On "
                      "two Sparks a TP=2 rank hung in ncclAllReduce after 20-26 minutes of concurrent load until the image's "
                      "library was replaced with the system's (vllm-project/vllm#41725): vllm_nccl_library: system does that"
                      % (_version(image_nccl), ", ".join(twins), short(image_nccl), short(systems[twins[0]])))
    if mode == "image":
        return section
    if settings.get("offline"):  # nothing was read: the mount is planned when the nodes and the image are
        section["lines"].append("not read (offline plan)")
        return section
    missing = [n for n in order if not systems.get(n)]
    for name in missing:
        findings.error(name, None, "vllm_nccl_library is system, and %s has no system NCCL (looked for libnccl.so.2 in "
                       "/usr/lib/<arch>-linux-gnu, /usr/lib64, /usr/local/cuda/lib64): install DGX OS's libnccl2 there, or set "
                       "vllm_nccl_library: image" % name)
    if not image_nccl:
        findings.error("all", settings.get("image"), "vllm_nccl_library is system, and the image carries no NCCL of its own for "
                       "the system's to replace (no libnccl.so.2 loaded by its torch, no nvidia-nccl wheel), or was not read "
                       "(an image the head builds first: run serve.yml once with vllm_nccl_library: image, then switch): set "
                       "vllm_nccl_library: image")
    if missing or not image_nccl:
        return section
    unknown = [n for n in order if not _version(systems[n])]
    if unknown or not _version(image_nccl):
        findings.error(unknown[0] if unknown else "all", (systems[unknown[0]] if unknown else image_nccl)["file"],
                       "vllm_nccl_library is system, and the NCCL version of this library cannot be read (no version in its "
                       "name, no NCCL banner in it): it may be no NCCL at all. Check the file, or set vllm_nccl_library: image")
        return section
    versions = sorted({_version(systems[n]) for n in order}, key=str)
    if len(versions) > 1:
        findings.error("all", versions, "vllm_nccl_library is system, and the nodes' system NCCL differ (%s): every rank must "
                       "load one NCCL version; install the same libnccl2 on every node" % "; ".join(
                           "%s %s" % (n, short(systems[n])) for n in order))
        return section
    if versions[0] != _version(image_nccl):
        findings.warn("vllm_nccl_library is system: the ranks load the system's NCCL %s in place of the image's %s, which its "
                      "torch was built with; NCCL keeps its API across a major version, but run the bench before you rely "
                      "on it" % (versions[0], _version(image_nccl)))
    builds = sorted({systems[n].get("build_id") for n in order}, key=str)
    if len(builds) > 1:  # the very trap this choice is for, between nodes
        findings.warn("vllm_nccl_library is system, and the nodes' system NCCL %s are different builds (%s): install the same "
                      "libnccl2 package on every node" % (versions[0], "; ".join("%s %s" % (n, short(systems[n])) for n in order)))
    target = image_nccl["file"]
    # The link the package keeps (libnccl.so.2), which Docker resolves at each container start: an upgraded package's
    # new file is mounted, and its build ID (in the node's hash, plan_node) recreates the containers to load it.
    section["volumes"] = {n: "%s:%s:ro" % (systems[n]["path"], target) for n in order}
    section["builds"] = {n: systems[n].get("build_id") for n in order}
    section["env"] = {SO_PATH_ENV: target}
    return section


def volumes(section, name):
    """The node's mount of its system NCCL, as a container's volume list; empty unless the mode is system."""
    return [section["volumes"][name]] if section and name in (section.get("volumes") or {}) else []
