# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is a model complete on this node? Where it lives, and what a complete copy holds.

A model is a Hugging Face repository id, kept in the hub cache layout under ``<models_dir>/huggingface/hub``
(``models--<org>--<name>/{blobs,snapshots/<commit>,refs/<revision>}``: what the containers see as
``HF_HOME=/models/huggingface``), or a path ``/models/<folder>`` (``<models_dir>/<folder>`` on the node).

The manifest the fetch records on the head (``<models_dir>/.dgx-spark/manifests/<key>.json``) lists every file
of the revision with its size and, for LFS files, its sha256, as the hub listed them. A copy is complete when it
has ``config.json``, a tokenizer, every shard its safetensors index names, and every file of the manifest at its
size (and, when asked, its sha256). Pure functions over a directory walk; no Ansible.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.command import read_text

HUB_SUBDIR = os.path.join("huggingface", "hub")
MANIFESTS = os.path.join(".dgx-spark", "manifests")
MODELS_MOUNT = "/models/"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model", "tekken.json", "vocab.json")
INDEX = "model.safetensors.index.json"
# What the fetch leaves behind while it runs; never part of a copy.
TRANSIENT = re.compile(r"(\.incomplete|\.lock)$")


class ModelError(Exception):
    """Bad input (a model id or revision that cannot name a folder)."""


def is_path_model(model_id):
    return model_id.startswith(MODELS_MOUNT)


def repo_folder(model_id):
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", model_id or ""):
        raise ModelError("model id %r is neither a Hugging Face repository (org/name) nor a path under /models/" % (model_id,))
    return "models--" + model_id.replace("/", "--")


def manifest_key(model_id, commit=None):
    if is_path_model(model_id):
        return model_id[len(MODELS_MOUNT):].strip("/").replace("/", "--")
    return "%s@%s" % (repo_folder(model_id), commit or "unknown")


def locate(models_dir, model_id, revision=None, read=None):
    """Where the model is (or would be) on a node: {"kind", "root", "snapshot", "commit", "revision"}.

    ``root`` is the folder a copy transfers (the repository's cache folder, or the path model's folder);
    ``snapshot`` the folder vLLM reads (None when the revision is not on the node)."""
    read = read or read_text
    if is_path_model(model_id):
        folder = os.path.join(models_dir, model_id[len(MODELS_MOUNT):].strip("/"))
        return {"kind": "path", "root": folder, "snapshot": folder, "commit": None, "revision": None}
    revision = revision or "main"
    if "/" in revision or revision in (".", ".."):
        raise ModelError("revision %r cannot name a ref" % revision)
    root = os.path.join(models_dir, HUB_SUBDIR, repo_folder(model_id))
    commit = revision if COMMIT.match(revision) else (read(os.path.join(root, "refs", revision)) or "").strip() or None
    snapshot = os.path.join(root, "snapshots", commit) if commit else None
    return {"kind": "hub", "root": root, "snapshot": snapshot, "commit": commit, "revision": revision}


def walk(folder):
    """{relative path: size} of the files under ``folder``, following symlinks (a dangling link has size None)."""
    found = {}
    for base, dirs, names in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            full = os.path.join(base, name)
            rel = os.path.relpath(full, folder)
            if TRANSIENT.search(name):
                continue
            try:
                found[rel] = os.stat(full).st_size
            except OSError:
                found[rel] = None
    return found


def index_shards(index_text):
    """The shard names a safetensors index maps weights to."""
    try:
        weight_map = json.loads(index_text)["weight_map"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelError("%s is not a safetensors index: %s" % (INDEX, exc))
    return sorted(set(weight_map.values()))


def check(present, manifest=None, index_text=None, checksums=None, shards=None):
    """Judge a copy. ``present``: walk() of the snapshot; ``manifest``: {"files": {path: {"size", "sha256"}}} or
    None; ``index_text``: the index file's text when there is one (or ``shards``, the names index_shards read from it);
    ``checksums``: {path: sha256} computed here.

    Returns {"complete", "missing", "wrong_size", "corrupt", "broken", "bytes_expected", "bytes_present"}.
    ``broken`` holds what no copy can fix (the repository itself is inconsistent)."""
    expected = dict((manifest or {}).get("files") or {})
    missing, wrong, corrupt, broken = [], [], [], []
    if "config.json" not in present and "config.json" not in expected:
        missing.append("config.json")
    if not any(name in present or name in expected for name in TOKENIZER_FILES + ("tokenizer_config.json",)):
        missing.append("a tokenizer (%s)" % ", ".join(TOKENIZER_FILES))
    if shards is None and index_text is not None:
        shards = index_shards(index_text)
    if shards is not None:
        for shard in shards:
            if expected and shard not in expected:
                broken.append("%s names %s, which the repository does not have" % (INDEX, shard))
            elif shard not in expected:
                expected[shard] = {"size": None}
    elif not expected and not any(p.endswith(".safetensors") for p in present):
        missing.append("weights (*.safetensors)")
    for name in ("config.json",):
        expected.setdefault(name, {"size": None})
    for path, meta in sorted(expected.items()):
        size = present.get(path, -1)
        if size == -1 or size is None:
            missing.append(path)
        elif meta.get("size") is not None and size != meta["size"]:
            wrong.append({"path": path, "expected": meta["size"], "actual": size})
        elif checksums is not None and meta.get("sha256") and checksums.get(path) not in (None, meta["sha256"]):
            corrupt.append(path)
    bytes_expected = sum(m.get("size") or 0 for m in expected.values())
    bytes_present = sum(min(present.get(p) or 0, m.get("size") or present.get(p) or 0) for p, m in expected.items())
    return {"complete": not (missing or wrong or corrupt or broken), "missing": missing, "wrong_size": wrong,
            "corrupt": corrupt, "broken": broken, "bytes_expected": bytes_expected, "bytes_present": bytes_present}


def sha256_of(path, chunk=8 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def human(size):
    if size is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return ("%d %s" % (size, unit)) if unit == "B" else ("%.1f %s" % (size, unit))
        size /= 1000.0
    return str(size)


def describe(result):
    """One line a user reads: what is wrong with this copy."""
    parts = []
    if result["broken"]:
        parts.append("; ".join(result["broken"]))
    if result["missing"]:
        more = len(result["missing"]) - 5
        parts.append("missing %s" % ", ".join(result["missing"][:5]) + (" and %d more" % more if more > 0 else ""))
    for entry in result["wrong_size"][:5]:
        parts.append("%s is %s, should be %s" % (entry["path"], human(entry["actual"]), human(entry["expected"])))
    if result["corrupt"]:
        parts.append("sha256 differs for %s" % ", ".join(result["corrupt"][:5]))
    return "; ".join(parts) or "complete"


def copy_summary(results):
    """Bytes an rsync run sent as file data (its --stats "Literal data"), and the seconds it took, summed over
    Ansible command results ({"stdout", "delta": "H:MM:SS.ffffff"})."""
    moved, seconds = 0, 0.0
    for result in results or []:
        for match in re.findall(r"Literal data: ([0-9,]+) bytes", result.get("stdout") or ""):
            moved += int(match.replace(",", ""))
        hours, minutes, secs = (result.get("delta") or "0:0:0").split(":")
        seconds += int(hours) * 3600 + int(minutes) * 60 + float(secs)
    return {"bytes": moved, "seconds": round(seconds, 3),
            "rate_bytes_per_second": int(moved / seconds) if seconds > 0 else None}


def copy_plan(judged, root, head_sources, url, password_file, each_min_bytes):
    """What a worker pulls from the head's rsync daemon (``url``, its module of the head's cache folder) to make its copy
    (``judged``: check() of it against the head's manifest; ``head_sources``: where each file of the snapshot is under
    the head's root, the cache's blobs): each large file it lacks or holds at another size, one rsync each appending to
    what an interrupted copy left (its bytes shown while it comes); the files larger than the head's, removed first
    (an append cannot shrink them); then the rest in one run (small files, the cache's links and refs). The secret is
    read from ``password_file``, never an argv."""
    sizes = {p: (m or {}).get("size") for p, m in ((judged.get("manifest") or {}).get("files") or {}).items()}
    wanted = list(judged.get("missing") or []) + [w["path"] for w in judged.get("wrong_size") or []]
    pulls = [{"path": p, "bytes": sizes.get(p), "dest": os.path.join(root, head_sources[p]),
              "argv": ["rsync", "--append-verify", "--partial", "--times", "--mkpath", "--stats", "--timeout=120",
                       "--password-file", password_file, url + head_sources[p], os.path.join(root, head_sources[p])]}
             for p in wanted if p in head_sources and (sizes.get(p) or 0) >= int(each_min_bytes)]
    oversized = [os.path.join(root, head_sources[w["path"]]) for w in judged.get("wrong_size") or []
                 if w["path"] in head_sources and (w.get("actual") or 0) > (w.get("expected") or 0)]
    return {"pulls": pulls, "oversized": oversized,
            "rest_argv": ["rsync", "--archive", "--partial", "--mkpath", "--stats", "--timeout=120", "--password-file",
                          password_file, url, root.rstrip("/") + "/"]}
