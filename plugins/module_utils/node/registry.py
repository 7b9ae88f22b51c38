# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's image from a registry (``image_source: pull``): whether the node can pull it, asked as ``docker pull``
asks, and the pull itself.

The question goes to the registry's API from the node, with what the node's Docker would use: the system's CAs and
the ``*.crt`` files of ``/etc/docker/certs.d/<registry>/`` (Docker's own per-registry trust), and the login the
inventory or an AWX credential gives, answered to either challenge a registry sends (Basic, or a Bearer token from
the realm it names). Each answer but the manifest becomes what to fix: the CA, the login, the name, the address.

The pull gives ``docker`` the login in a ``config.json`` of its own, in a folder made for the pull (mode 0700) and
removed after it: never in argv, the environment, or the user's ``~/.docker``."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request

HUB = "docker.io"
HUB_API = "registry-1.docker.io"
HUB_CONFIG_KEY = "https://index.docker.io/v1/"  # the key docker login writes for the hub
CERTS_DIR = "/etc/docker/certs.d"
# What docker pull accepts, so that a registry answers with the manifest it would give it.
ACCEPT = ", ".join(["application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.docker.distribution.manifest.list.v2+json",
                    "application/vnd.docker.distribution.manifest.v2+json"])


def reference(image):
    """A name as Docker reads it: the registry (its first part when that has a dot, a port or is localhost; else the
    hub, whose one-part names are library's), the repository, the tag or digest (latest when neither), the host its API
    answers on, and the key of the login in a docker config."""
    name, digest = image.split("@", 1) if "@" in image else (image, None)
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = HUB, name if slash else "library/" + name
    tag = None
    if ":" in path.rsplit("/", 1)[-1]:
        path, tag = path.rsplit(":", 1)
    return {"registry": registry, "repository": path, "reference": digest or tag or "latest",
            "api_host": HUB_API if registry == HUB else registry, "config_key": HUB_CONFIG_KEY if registry == HUB else registry}


def challenge(header):
    """A WWW-Authenticate header: (its scheme in lower case, its parameters)."""
    scheme, dummy, rest = (header or "").strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'([A-Za-z_]+)="([^"]*)"', rest))


def trust(registry, certs_dir=CERTS_DIR):
    """The TLS context docker pull would use for ``registry``: the system's CAs and the registry's own ``*.crt``.
    Returns (context, the files loaded)."""
    context = ssl.create_default_context()
    folder = os.path.join(certs_dir, registry)
    loaded = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".crt"):
            context.load_verify_locations(os.path.join(folder, name))
            loaded.append(os.path.join(folder, name))
    return context, loaded


def basic(username, password):
    return base64.b64encode(("%s:%s" % (username, password)).encode()).decode()


class Answer(Exception):
    """What a registry answered instead of the manifest: the kind (tls, login, missing, denied, unreachable,
    answer) and the words for the user."""

    def __init__(self, kind, problem):
        super().__init__(problem)
        self.kind, self.problem = kind, problem


class SameHostLogin(urllib.request.HTTPRedirectHandler):
    """A redirect keeps the login only on the host that asked for it (urllib would send it anywhere)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        found = super().redirect_request(req, fp, code, msg, headers, newurl)
        if found is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            found.remove_header("Authorization")
        return found


def ask(url, headers, context, timeout):
    """(status, headers, body) of a GET with ``context``'s trust; an HTTP error is an answer too. No answer at all raises
    Answer. (Ansible's open_url takes one CA file, which replaces the system's: Docker trusts both.)"""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), SameHostLogin).open(request, timeout=timeout) as response:
            return response.status, response.headers, response.read(1 << 20)
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read(1 << 16)
    except (urllib.error.URLError, socket.timeout, ConnectionError, ssl.SSLError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(reason):
            raise Answer("tls", "its certificate is not trusted on this node (%s)" % getattr(reason, "verify_message", reason))
        raise Answer("unreachable", "it does not answer at %s (%s)" % (urllib.parse.urlsplit(url).netloc, reason))


def token(params, ref, username, password, context, timeout):
    """A Bearer token from the realm a registry named, asked with the login when there is one."""
    if username and not params["realm"].startswith("https://"):
        raise Answer("login", "its token service %s is not HTTPS, and the login is never sent in the clear. Fix: serve the token "
                     "service over HTTPS" % params["realm"])
    query = {"service": params.get("service", ""), "scope": params.get("scope") or "repository:%s:pull" % ref["repository"]}
    headers = {"Authorization": "Basic " + basic(username, password)} if username else {}
    status, dummy, body = ask(params["realm"] + "?" + urllib.parse.urlencode(query), headers, context, timeout)
    if status != 200:
        raise Answer("login", refused_login(username, "its token service at %s answered HTTP %d" % (params["realm"], status)))
    found = json.loads(body.decode() or "{}")
    return found.get("token") or found.get("access_token")


def refused_login(username, said):
    if not username:
        return ("it asks for a login (%s) and none was given. Fix: set image_registry_username and image_registry_password "
                "(in AWX, a credential that gives them as extra variables, docs/awx.md)" % said)
    return ("it refused the login of %s (%s). Fix: check image_registry_username and image_registry_password" % (username, said))


def check(image, username=None, password=None, certs_dir=CERTS_DIR, timeout=30):
    """Whether this node can pull ``image``: {"digest": the registry's} or raises Answer."""
    ref = reference(image)
    try:
        context, loaded = trust(ref["registry"], certs_dir)
    except (OSError, ssl.SSLError) as error:
        raise Answer("tls", "the CA file in %s/%s cannot be read (%s)" % (certs_dir, ref["registry"], error))
    url = "https://%s/v2/%s/manifests/%s" % (ref["api_host"], ref["repository"], ref["reference"])
    headers = {"Accept": ACCEPT}
    try:
        status, answered, body = ask(url, headers, context, timeout)
        if status == 401:
            scheme, params = challenge(answered.get("WWW-Authenticate"))
            if scheme == "bearer" and params.get("realm"):
                found = token(params, ref, username, password, context, timeout)
                headers["Authorization"] = "Bearer %s" % found
            elif username:
                headers["Authorization"] = "Basic " + basic(username, password)
            else:
                raise Answer("login", refused_login(None, "HTTP 401, %s" % (scheme or "no scheme")))
            status, answered, body = ask(url, headers, context, timeout)
    except Answer as answer:
        if answer.kind == "tls":
            answer.problem += (". Docker trusts the system's CAs and the *.crt files in %s/%s/ (%s). Fix: place the registry's "
                               "CA there as ca.crt, as docker pull reads it" % (certs_dir, ref["registry"], ", ".join(loaded) or "none there"))
        raise
    if status == 401:
        raise Answer("login", refused_login(username, "HTTP 401"))
    if status == 403:
        raise Answer("denied", "it denies %s pulls of %s (HTTP 403). Fix: grant that login read access to the repository"
                     % (username or "an anonymous client", ref["repository"]))
    if status == 404:
        raise Answer("missing", "it holds no %s:%s (HTTP 404: %s). Fix: push the image there, or name one it holds in vllm_image"
                     % (ref["repository"], ref["reference"], errors(body)))
    if status != 200:
        raise Answer("answer", "it answered HTTP %d (%s)" % (status, errors(body)))
    return {"digest": answered.get("Docker-Content-Digest"), "registry": ref["registry"]}


def errors(body):
    """The codes of a registry's error body, or its first characters."""
    try:
        return ", ".join(e.get("code", "") for e in json.loads(body.decode()).get("errors") or []) or "no error code"
    except (ValueError, AttributeError):
        return (body or b"")[:120].decode(errors="replace")


def docker_config(image, username, password):
    """A docker config holding the login for ``image``'s registry (empty without a login)."""
    if not username:
        return {}
    return {"auths": {reference(image)["config_key"]: {"auth": basic(username, password)}}}


def pull(image, username=None, password=None, docker="docker", timeout=3600, run=subprocess.run):
    """``docker pull`` with the login in a config folder of its own, removed after; (rc, stdout, stderr)."""
    folder = tempfile.mkdtemp(prefix="dgx-spark-pull-")  # mode 0700, this user's
    try:
        config = docker_config(image, username, password)
        if config:
            opened = os.open(os.path.join(folder, "config.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(opened, "w", encoding="utf-8") as handle:
                json.dump(config, handle)
        done = run([docker, "--config", folder, "pull", image], capture_output=True, text=True, timeout=timeout, check=False)
        return done.returncode, done.stdout, done.stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)
