# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fetch one model revision into the Hugging Face cache, once, on the head; record its manifest.

Runs inside the cluster's vLLM image (it carries huggingface_hub) with the node's models folder at /models and
HF_HOME=/models/huggingface; HF_ENDPOINT points at a mirror when one is set. The token is read from a file
(never an argument or the environment of a process listing). Resumable: huggingface_hub continues the
*.incomplete files an interrupted run left. Prints one JSON line: {"ok": true, ...} or {"ok": false, "kind",
"error"}; exit status 0 or 2.

Usage: fetch_model.py REPO [--revision R] [--token-file F] [--node NAME] [--checksums] [--reserve-bytes N]
"""

import argparse
import hashlib
import json
import os
import sys
import time

MODELS = "/models"
MANIFESTS = os.path.join(MODELS, ".dgx-spark", "manifests")
INDEX = "model.safetensors.index.json"


def human(size):
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return "%.1f %s" % (size, unit) if unit != "B" else "%d B" % size
        size /= 1000.0
    return str(size)


def finish(ok, **data):
    print(json.dumps(dict(data, ok=ok)))
    sys.exit(0 if ok else 2)


def classify(exc, args, endpoint):
    """(kind, message) for a hub error; the token itself is never part of a message."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError
    status = getattr(getattr(exc, "response", None), "status_code", None)
    given = "the token given (vllm_hf_token)"
    if isinstance(exc, RevisionNotFoundError):
        return "unknown_revision", ("%s has no revision %r at %s; set the profile's model.revision (or vllm_model_revision) "
                                    "to a branch, tag or commit it has" % (args.repo, args.revision, endpoint))
    if status in (401, 403) or isinstance(exc, GatedRepoError):
        if args.token:
            return "token_refused", ("%s refused %s for %s (HTTP %s): it is wrong, expired or has no access to this "
                                     "repository; replace the credential" % (endpoint, given, args.repo, status))
        return "token_needed", ("%s is gated or private at %s (HTTP %s) and no token was given: set vllm_hf_token (an "
                                "AWX credential, or an Ansible Vault variable)" % (args.repo, endpoint, status))
    if isinstance(exc, RepositoryNotFoundError):
        return "unknown_repo", ("%s has no repository %r; check the profile's model.id (a private repository also "
                                "needs vllm_hf_token)" % (endpoint, args.repo))
    return "unreachable", ("cannot fetch %s from %s: %s. Set vllm_hf_endpoint to a mirror the head reaches, or place "
                           "the model in the models folder beforehand" % (args.repo, endpoint, exc))


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(8 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("repo")
    parser.add_argument("--revision", default="main")
    parser.add_argument("--token-file", default="")
    parser.add_argument("--node", default="this node")
    parser.add_argument("--checksums", action="store_true")
    parser.add_argument("--reserve-bytes", type=int, default=0, help="free space the fetch must leave")
    parser.add_argument("--log", default="", help="append the progress (standard error) to this file")
    args = parser.parse_args()
    if args.log:
        log = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)  # the head container writes that folder too
        os.dup2(log, 2)
        os.close(log)
    args.token = None
    if args.token_file and os.path.exists(args.token_file):
        with open(args.token_file, encoding="utf-8") as handle:
            args.token = handle.read().strip() or None

    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub import constants

    endpoint = constants.ENDPOINT
    api = HfApi(token=args.token or False)
    started = time.monotonic()
    try:
        info = api.model_info(args.repo, revision=args.revision, files_metadata=True)
    except Exception as exc:  # pylint: disable=broad-except
        kind, message = classify(exc, args, endpoint)
        finish(False, kind=kind, error=message)
    files = {s.rfilename: {"size": s.size, "sha256": (s.lfs or {}).get("sha256") if isinstance(s.lfs, dict)
                           else getattr(s.lfs, "sha256", None)} for s in info.siblings}
    total = sum(f["size"] or 0 for f in files.values())

    # What is already here for this commit does not count against the disk.
    snapshot = os.path.join(constants.HF_HUB_CACHE, "models--" + args.repo.replace("/", "--"), "snapshots", info.sha)
    present = 0
    for name, meta in files.items():
        path = os.path.join(snapshot, name)
        if os.path.exists(path) and os.path.getsize(path) == meta["size"]:
            present += meta["size"]
    st = os.statvfs(MODELS)
    free = st.f_bavail * st.f_frsize
    if total - present + args.reserve_bytes > free:
        finish(False, kind="disk", needed=total - present, free=free,
               error="not enough disk on %s for %s: the fetch needs %s more and must leave %s free, %s is free in the "
                     "models folder (%s in all); free space, set spark_models_dir to a larger disk or lower "
                     "vllm_model_disk_reserve_gb" % (args.node, args.repo, human(total - present), human(args.reserve_bytes),
                                                     human(free), human(total)))

    if INDEX in files:
        try:
            index_path = hf_hub_download(args.repo, INDEX, revision=info.sha, token=args.token or False)
            with open(index_path, encoding="utf-8") as handle:
                shards = sorted(set(json.load(handle)["weight_map"].values()))
        except Exception as exc:  # pylint: disable=broad-except
            kind, message = classify(exc, args, endpoint)
            finish(False, kind=kind, error=message)
        absent = [s for s in shards if s not in files]
        if absent:
            finish(False, kind="broken", error="%s@%s is broken: %s names %s, which the repository does not have; "
                                               "choose another revision" % (args.repo, args.revision, INDEX, ", ".join(absent)))

    try:
        path = snapshot_download(args.repo, revision=args.revision, token=args.token or False)
    except Exception as exc:  # pylint: disable=broad-except
        kind, message = classify(exc, args, endpoint)
        finish(False, kind=kind, error=message)

    bad = [n for n, m in files.items() if os.path.getsize(os.path.join(path, n)) != m["size"]]
    if args.checksums:
        bad += [n for n, m in files.items() if m["sha256"] and n not in bad and sha256_of(os.path.join(path, n)) != m["sha256"]]
    if bad:
        finish(False, kind="corrupt", error="after the fetch, %s differ from the hub's listing; run again" % ", ".join(bad))

    manifest = {"repo": args.repo, "revision": args.revision, "commit": info.sha, "endpoint": endpoint,
                "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "checksums_verified": args.checksums,
                "files": files}
    os.makedirs(MANIFESTS, exist_ok=True)
    target = os.path.join(MANIFESTS, "models--%s@%s.json" % (args.repo.replace("/", "--"), info.sha))
    with open(target + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
    os.replace(target + ".tmp", target)
    finish(True, commit=info.sha, snapshot=path, files=len(files), bytes=total, fetched_bytes=total - present,
           seconds=round(time.monotonic() - started, 1), manifest=target)


if __name__ == "__main__":
    main()
