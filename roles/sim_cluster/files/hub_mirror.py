# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated cluster's model hub: answers the endpoints huggingface_hub downloads through, from a folder.

ROOT/<org>/<name>/ holds a repository's files. Its one revision is "main"; the commit is a hash of the files'
names and contents, so changed files make a new commit. Served (as the Hub serves them, so that an unmodified
huggingface_hub client with HF_ENDPOINT pointing here works):

  GET  /api/models/<org>/<name>[/revision/<rev>]        model info, siblings with sizes and LFS hashes
  GET  /api/models/<org>/<name>/tree/<rev>[/<path>]     the file listing (recursive)
  HEAD/GET /<org>/<name>/resolve/<rev>/<file>           the file, with X-Repo-Commit, ETag, sizes, Range

Unknown repository or revision: 404 with the Hub's X-Error-Code. With --token, a repository listed in
--gated needs "Authorization: Bearer <token>": none gives 401 GatedRepo, another token 401 invalid credentials.

Usage: hub_mirror.py ROOT [--port 8090] [--token T --gated org/name ...]
"""

import argparse
import hashlib
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

LFS_MIN = 1024 * 1024  # files at least this large, or *.safetensors, are LFS files (their ETag is the sha256)
CACHE = {}
LOCK = threading.Lock()


def repo_files(root, repo):
    """{path: {"size", "oid" (git blob sha1), "sha256" or None}} and the commit, cached by the files' stat."""
    base = os.path.join(root, repo)
    stats = []
    for folder, dirs, names in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(n for n in names if not n.startswith(".")):  # the simulated cluster's own marks
            full = os.path.join(folder, name)
            st = os.stat(full)
            stats.append((os.path.relpath(full, base), st.st_size, st.st_mtime_ns))
    key = (repo, tuple(stats))
    with LOCK:
        if key in CACHE:
            return CACHE[key]
    files = {}
    for rel, size, mtime in stats:
        sha1 = hashlib.sha1(b"blob %d\0" % size)
        sha256 = hashlib.sha256()
        with open(os.path.join(base, rel), "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                sha1.update(chunk)
                sha256.update(chunk)
        lfs = size >= LFS_MIN or rel.endswith(".safetensors")
        files[rel] = {"size": size, "oid": sha1.hexdigest(), "sha256": sha256.hexdigest() if lfs else None}
    commit = hashlib.sha1(json.dumps(sorted((p, f["oid"]) for p, f in files.items())).encode()).hexdigest()
    with LOCK:
        CACHE[key] = (files, commit)
    return files, commit


class Handler(BaseHTTPRequestHandler):
    server_version = "dgx-spark-sim-hub/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # one line per request on stderr: the container's log
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def fail(self, code, error_code, message):
        body = json.dumps({"error": message}).encode()
        self.send_response(code)
        if error_code:
            self.send_header("X-Error-Code", error_code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, data):
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def resolve_repo(self, repo, revision):
        """(files, commit) or None after answering the error."""
        root = self.server.root
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo) or not os.path.isdir(os.path.join(root, repo)):
            self.fail(404, "RepoNotFound", "Repository Not Found for url: %s." % self.path)
            return None
        if repo in self.server.gated:
            auth = self.headers.get("Authorization", "")
            if not auth:
                self.fail(401, "GatedRepo", "Access to model %s is restricted. You must have access to it and be "
                                            "authenticated to access it. Please log in." % repo)
                return None
            if auth != "Bearer " + self.server.token:
                self.fail(401, None, "Invalid credentials in Authorization header")
                return None
        files, commit = repo_files(root, repo)
        if revision not in ("main", commit):
            self.fail(404, "RevisionNotFound", "Invalid rev id: %s" % revision)
            return None
        return files, commit

    def do_HEAD(self):  # noqa: N802 - the http.server interface
        self.do_GET()

    def do_GET(self):  # noqa: N802
        path = unquote(urlparse(self.path).path)
        match = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
        if match:
            found = self.resolve_repo(match.group(1), match.group(2) or "main")
            if found:
                files, commit = found
                self.send_json({"id": match.group(1), "modelId": match.group(1), "sha": commit, "private": False,
                                "gated": "manual" if match.group(1) in self.server.gated else False,
                                "tags": [], "downloads": 0, "likes": 0,
                                "siblings": [dict({"rfilename": p, "size": f["size"], "blobId": f["oid"]},
                                                  **({"lfs": {"sha256": f["sha256"], "size": f["size"], "pointerSize": 134}}
                                                     if f["sha256"] else {})) for p, f in sorted(files.items())]})
            return
        match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path)
        if match:
            found = self.resolve_repo(match.group(1), match.group(2))
            if found:
                files, commit = found
                prefix = (match.group(3) or "").strip("/")
                entries = []
                for rel, f in sorted(files.items()):
                    if prefix and not rel.startswith(prefix + "/"):
                        continue
                    entry = {"type": "file", "oid": f["oid"], "size": f["size"], "path": rel}
                    if f["sha256"]:
                        entry["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": 134}
                    entries.append(entry)
                self.send_json(entries)
            return
        match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if match:
            found = self.resolve_repo(match.group(1), match.group(2))
            if found:
                self.send_file(match.group(1), match.group(3), *found)
            return
        self.fail(404, None, "Not Found: %s" % path)

    def send_file(self, repo, rel, files, commit):
        if rel not in files:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("X-Repo-Commit", commit)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        entry = files[rel]
        size = entry["size"]
        start = 0
        ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if ranged:
            start = int(ranged.group(1))
            end = int(ranged.group(2)) if ranged.group(2) else size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
            length = end - start + 1
        else:
            self.send_response(200)
            length = size
        etag = entry["sha256"] or entry["oid"]
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", '"%s"' % etag)
        if entry["sha256"]:
            self.send_header("X-Linked-Etag", '"%s"' % etag)
            self.send_header("X-Linked-Size", str(size))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(os.path.join(self.server.root, repo, rel), "rb") as handle:
            handle.seek(start)
            left = length
            while left > 0:
                chunk = handle.read(min(1 << 20, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--token", default="")
    parser.add_argument("--gated", nargs="*", default=[])
    args = parser.parse_args()
    server = ThreadingHTTPServer(("0.0.0.0", args.port), Handler)
    server.root, server.token, server.gated = args.root, args.token, set(args.gated if args.token else [])
    sys.stderr.write("serving %s on port %d\n" % (args.root, args.port))
    server.serve_forever()


if __name__ == "__main__":
    main()
