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
    """{path, file, version, build, build_id} of the NCCL library at path; raises OSError when it cannot be read."""
    import mmap, os, re, struct
    real = os.path.realpath(path)
    found = {"path": path, "file": real, "version": None, "build": None, "build_id": None}
    with open(real, "rb") as handle:
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        if data[:4] == b"\x7fELF" and data[4] == 2:  # 64-bit ELF: the program headers' PT_NOTE segments
            end = "<" if data[5] == 1 else ">"
            phoff, = struct.unpack_from(end + "Q", data, 0x20)
            phentsize, phnum = struct.unpack_from(end + "HH", data, 0x36)
            for index in range(phnum):
                p_type, = struct.unpack_from(end + "I", data, phoff + index * phentsize)
                if p_type != 4:
                    continue
                offset, = struct.unpack_from(end + "Q", data, phoff + index * phentsize + 8)
                size, = struct.unpack_from(end + "Q", data, phoff + index * phentsize + 32)
                at = offset
                while at + 12 <= offset + size:
                    namesz, descsz, n_type = struct.unpack_from(end + "III", data, at)
                    name = data[at + 12:at + 12 + namesz]
                    desc_at = at + 12 + ((namesz + 3) & ~3)
                    if n_type == 3 and name.rstrip(b"\0") == b"GNU":
                        found["build_id"] = data[desc_at:desc_at + descsz].hex()
                    at = desc_at + ((descsz + 3) & ~3)
        banner = re.search(rb"NCCL version (\d+\.\d+\.\d+)([\w.+-]*)", data)
        named = re.search(r"\.so\.(\d+\.\d+\.\d+)$", real)
        if banner:
            found["version"], found["build"] = banner.group(1).decode(), banner.group(2).decode() or None
        elif named:
            found["version"] = named.group(1)
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
