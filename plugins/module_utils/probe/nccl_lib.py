# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which NCCL library is which: its path, version and GNU build ID.

The pip wheel's NCCL (``nvidia-nccl-cu13``, what a CUDA torch loads from ``nvidia/nccl/lib``) and DGX OS's system
package (``libnccl2``, ``/usr/lib/aarch64-linux-gnu``) can carry the same version number and be different builds. On
two Sparks a rank spinning in ``ncclAllReduce`` after 20-26 minutes of concurrent load went away only when the
image's library was replaced with the system's (vllm-project/vllm#41725, #42354). The version alone cannot tell them
apart; the linker's build ID can (``readelf -n``: ``.note.gnu.build-id``).

``SOURCE`` is the one reader. It runs on the node (the probe, as root, reads the system library) and inside the
image (image_info.PROBE_SCRIPT carries it, as the image has no copy of this collection), so it is kept as text and
defined here from that text: one definition for both sides. It reads the ELF program headers for the build-ID note,
and the version from the banner NCCL prints at init (``NCCL version 2.28.9+cuda13.0``) or, failing that, from the
file name a package gives it (``libnccl.so.2.28.9``). It loads nothing: a library is never run to be identified.
"""

from __future__ import annotations

import glob

SOURCE = r'''
def nccl_identity(path):
    """{path, file, version, build, build_id} of the NCCL library at path; raises OSError or ValueError when it is
    no regular file or cannot be read. Bounded: every offset is checked against the file, and at most 64 notes read."""
    import mmap, os, re, stat, struct
    real = os.path.realpath(path)
    found = {"path": path, "file": real, "version": None, "build": None, "build_id": None}
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or os.fstat(fd).st_size < 64:
            raise ValueError("%s is no library (not a regular file of an ELF's size)" % real)
        data = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    try:
        size = len(data)
        if data[:4] == b"\x7fELF" and data[4] == 2:  # 64-bit ELF: the program headers' PT_NOTE segments
            end = "<" if data[5] == 1 else ">"
            phoff, = struct.unpack_from(end + "Q", data, 0x20)
            phentsize, phnum = struct.unpack_from(end + "HH", data, 0x36)
            notes = 0
            for index in range(min(phnum, 256)) if phentsize >= 56 else ():
                header = phoff + index * phentsize
                if header + 56 > size:
                    break
                p_type, = struct.unpack_from(end + "I", data, header)
                offset, = struct.unpack_from(end + "Q", data, header + 8)
                length, = struct.unpack_from(end + "Q", data, header + 32)
                align, = struct.unpack_from(end + "Q", data, header + 48)
                pad = 8 if align == 8 else 4
                at, stop = offset, min(offset + length, size)
                while p_type == 4 and at + 12 <= stop and notes < 64:
                    notes += 1
                    namesz, descsz, n_type = struct.unpack_from(end + "III", data, at)
                    desc_at = at + 12 + ((namesz + pad - 1) & ~(pad - 1))
                    if desc_at + descsz > stop:
                        break
                    if n_type == 3 and data[at + 12:at + 12 + namesz].rstrip(b"\0") == b"GNU":
                        found["build_id"] = data[desc_at:desc_at + descsz].hex()
                    at = desc_at + ((descsz + pad - 1) & ~(pad - 1))
        # A package names its file by version (libnccl.so.2.28.9): read no further. The pip wheel's does not: NCCL's
        # banner, once per image (its read is cached by the image's ID).
        named = re.search(r"\.so\.(\d+\.\d+\.\d+)$", real)
        banner = None if named else re.search(rb"NCCL version (\d+\.\d+\.\d+)([\w.+-]*)", data)
        if banner:
            found["version"], found["build"] = banner.group(1).decode(), banner.group(2).decode() or None
        elif named:
            found["version"] = named.group(1)
    except (struct.error, IndexError) as exc:
        raise ValueError("%s: not a readable ELF library (%s)" % (real, exc))
    finally:
        data.close()
    return found
'''

_NAMESPACE = {}
exec(compile(SOURCE, __name__ + ".SOURCE", "exec"), _NAMESPACE)  # pylint: disable=exec-used
nccl_identity = _NAMESPACE["nccl_identity"]

# Where a Debian-family system keeps its NCCL (DGX OS: /usr/lib/aarch64-linux-gnu/libnccl.so.2 from libnccl2), and the
# CUDA toolkit's folder.
SYSTEM_GLOBS = ("/usr/lib/*-linux-gnu/libnccl.so.2", "/usr/lib64/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2")

# Run in the image after vLLM's import: the NCCL its torch loaded (read from the process's maps), else the one a CUDA
# torch would load, the pip wheel's; {"loaded": bool, ...identity} or null.
IMAGE_READ = r'''
def image_nccl():
    import importlib.util, os
    try:
        import torch  # noqa: F401  (a CUDA torch maps libnccl.so.2 on import)
    except Exception:
        pass
    with open("/proc/self/maps") as maps:
        loaded = sorted({line.split()[-1] for line in maps if "/libnccl.so" in line})
    candidates = list(loaded)
    if not candidates:
        try:
            spec = importlib.util.find_spec("nvidia.nccl")
        except Exception:
            spec = None
        for folder in (spec.submodule_search_locations or []) if spec else []:
            candidates.append(os.path.join(folder, "lib", "libnccl.so.2"))
    for path in candidates:
        if os.path.exists(path):
            return dict(nccl_identity(path), loaded=bool(loaded))
    return None
'''


def system(globs=SYSTEM_GLOBS, warn=None):
    """The node's system NCCL (the first library the globs find), or None where it has none."""
    for pattern in globs:
        for path in sorted(glob.glob(pattern)):
            try:
                return nccl_identity(path)
            except (OSError, ValueError) as exc:
                if warn:
                    warn("cannot read %s: %s" % (path, exc))
    return None


def short(identity):
    """'2.28.9+cuda13.0, build 7afb65ac8ed8' for a plan's line; 'none' without a library."""
    if not identity:
        return "none"
    version = (identity.get("version") or "version unknown") + (identity.get("build") or "")
    return "%s, build %s" % (version, (identity.get("build_id") or "unknown")[:12])
