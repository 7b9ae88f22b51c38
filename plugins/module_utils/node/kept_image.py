# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node keeps of a verified deployment besides its supervisor (module_utils/plan/records.py says why): the
verified image under this cluster's kept tag, this cluster's older kept tags let go of, and on the head and the next
node (``cluster.records_on``) the record itself and the canary's references as the controller keeps them
(module_utils/verify/canary.py: the supervisor asks them after a boot). The vllm_boot module does it with the
supervisor's release, in one call: serve.yml's commit.

Only this cluster's kept tags are touched. An image that still has another tag keeps it, and Docker deletes an image
only when nothing else names or uses it; a stopped container of someone else's may still use an old image, whose tag
then stays until a later commit. ``run(argv)`` returns (rc, stdout, stderr)."""

from __future__ import annotations

import os
import shutil

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import supervisor
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import json_text, read_text
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import compile_cache, records


def _listed(folder):
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _remove(path):
    """Remove what a container wrote, following no link: a link is unlinked, a folder walked (shutil.rmtree neither
    follows a link inside it nor accepts one as its top, and is safe from a link swapped in during the walk where the
    platform allows, ``rmtree.avoids_symlink_attacks``: Linux)."""
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
    else:
        shutil.rmtree(path)


def keep(record, image, cluster, run, check=False, record_files=None, cache_dir=None):
    """Tag ``image`` as ``record["kept_image"]`` when the node lacks that tag, remove this cluster's kept tags the
    record no longer lists, and write each of ``record_files`` ({path: data}: the record and the references, on the head
    and the next node) where it differs. Returns (what changed, one line each; an error message or None)."""
    rc, out, err = run(records.kept_list_argv(cluster))
    if rc != 0:
        return [], "cannot list the kept images: %s" % (err or out).strip()
    tags = out.split()
    done = []
    tag = record.get("kept_image")
    if tag and tag not in tags:
        done.append("kept %s as %s" % (image, tag))
        rc, out, err = (0, "", "") if check else run(["docker", "tag", image, tag])
        if rc != 0:
            return done, "cannot tag %s as %s: %s" % (image, tag, (err or out).strip())
    for old in records.kept_to_remove(tags, record, cluster):
        rc, out, err = (0, "", "") if check else run(["docker", "image", "rm", old])
        if rc == 0:
            done.append("let go of " + old)
        elif "conflict" not in (err + out):
            return done, "cannot remove %s: %s" % (old, (err or out).strip())
    for path, data in sorted((record_files or {}).items()):
        text = json_text(data)
        if read_text(path) != text:
            done.append("wrote " + path)
            if not check:
                supervisor.write_text(path, text, 0o600)  # root's: a record may name extra_env values
    # Last, once the record is written: what the containers wrote may resist (a folder still written to), and is said,
    # never a failure of the commit.
    for name in compile_cache.stale(_listed(cache_dir), record) if cache_dir else []:
        try:
            if not check:
                _remove(os.path.join(cache_dir, name))
            done.append("removed the compile cache " + name)
        except OSError as exc:
            done.append("could not remove the compile cache %s: %s" % (name, exc.strerror or exc))
    return done, None
