# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A plan's folders and files made on a node in one call (the node_files module): each folder made where it is missing
and given its mode (and owner) where they differ, each file written whole where its content, mode or owner differ.
One module call instead of one per folder and file: each of those costs a round trip to the node, and a launch waits
for them."""

from __future__ import annotations

import os
import pwd
import stat

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import read_text
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.supervisor import write_text


def uid_of(owner):
    """A user name or number as a uid; None leaves the owner as it is."""
    if owner is None or owner == "":
        return None
    text = str(owner)
    return int(text) if text.isdigit() else pwd.getpwnam(text).pw_uid


def _differs(path, mode, uid):
    found = os.stat(path)
    return stat.S_IMODE(found.st_mode) != mode or (uid is not None and found.st_uid != uid)


def apply(folders, files, check=False):
    """Make ``folders`` ({path, mode, owner?}) and write ``files`` ({path, content, mode, owner?}) where they differ.
    Returns (the folders made or changed, the files written, {path: text before} of the files written)."""
    made, written, before = [], [], {}
    for entry in folders:
        mode, uid = int(str(entry["mode"]), 8), uid_of(entry.get("owner"))
        if os.path.isdir(entry["path"]) and not _differs(entry["path"], mode, uid):
            continue
        made.append(entry["path"])
        if check:
            continue
        os.makedirs(entry["path"], exist_ok=True)
        os.chmod(entry["path"], mode)
        if uid is not None:
            os.chown(entry["path"], uid, -1)
    for entry in files:
        mode, uid = int(str(entry["mode"]), 8), uid_of(entry.get("owner"))
        found = read_text(entry["path"])
        if found == entry["content"] and not _differs(entry["path"], mode, uid):
            continue
        written.append(entry["path"])
        before[entry["path"]] = found or ""
        if check:
            continue
        write_text(entry["path"], entry["content"], mode)
        if uid is not None:
            os.chown(entry["path"], uid, -1)
    return made, written, before


def strays(folders, planned):
    """What each of ``folders`` holds that ``planned`` (paths) does not name: a file a plan no longer wants there (a key
    of a deployment gone). A folder that is not there holds nothing."""
    found = []
    for folder in folders:
        if os.path.isdir(folder) and not os.path.islink(folder):
            found.extend(os.path.join(folder, name) for name in sorted(os.listdir(folder))
                         if os.path.join(folder, name) not in planned)
    return found


def remove(paths, check=False):
    """Remove each of ``paths`` where it is (a file, or a link as the link: never what it names). Returns those
    removed (or that would be). A folder is refused: what this removes is a file the plan no longer wants."""
    removed = []
    for path in paths:
        if not os.path.lexists(path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            raise ValueError("%s is a folder, not a file: remove it by hand if it is not wanted" % path)
        removed.append(path)
        if not check:
            os.unlink(path)
    return removed
