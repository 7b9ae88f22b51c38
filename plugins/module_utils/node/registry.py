# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's image from a registry (``image_source: pull``): whether the node can pull it, asked as ``docker pull``
asks, and the pull itself.

The question goes to the registry's API from the node, with what the node's Docker would use: the system's CAs and
the ``*.crt`` files of ``/etc/docker/certs.d/<registry>/`` (Docker's own per-registry trust), and the login the
inventory or an AWX credential gives, answered to either challenge a registry sends (Basic, or a Bearer token from
the realm it names). Each answer but the manifest becomes what to fix: the CA, the login, the name, the address.

The pull (module_utils/node/registry_pull.py) hands the login to the node's Docker daemon over its socket, in the
request's X-Registry-Auth header: never in argv, the environment, a file, or the user's ``~/.docker``."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import socket
import ssl
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
    hub, whose one-part names are library's), the repository, the tag or digest (latest when neither), the name as given
    without them, the host its API answers on, and the key of the login in a docker config."""
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
            "name": name[:-len(tag) - 1] if tag else name,
            "api_host": HUB_API if registry == HUB else registry, "config_key": HUB_CONFIG_KEY if registry == HUB else registry}


def challenge(header):
    """A WWW-Authenticate header: (its scheme in lower case, its parameters)."""
    scheme, dummy, rest = (header or "").strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'([A-Za-z_]+)="([^"]*)"', rest))


def trust(registry, certs_dir=CERTS_DIR):
    """The TLS context docker pull would use for ``registry``: the system's CAs and the registry's own ``*.crt``, and a
    client certificate the registry asks for (``<name>.cert`` with its ``<name>.key``). Returns (context, the files
    loaded)."""
    context = ssl.create_default_context()
    folder = os.path.join(certs_dir, registry)
    loaded = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        path = os.path.join(folder, name)
        if name.endswith(".crt"):
            context.load_verify_locations(path)
            loaded.append(path)
        elif name.endswith(".cert"):
            context.load_cert_chain(path, path[:-len(".cert")] + ".key")
            loaded.append(path)
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
    """A redirect is followed only to HTTPS, and keeps the login only where scheme, host and port stay the same (urllib
    would send it anywhere, in the clear too)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urllib.parse.urlsplit(newurl).scheme != "https":
            return None  # the redirect is then the answer: "it answered HTTP 30x"
        found = super().redirect_request(req, fp, code, msg, headers, newurl)
        before, after = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)
        if found is not None and (before.scheme, before.hostname, before.port) != (after.scheme, after.hostname, after.port):
            found.remove_header("Authorization")
        return found


def ask(url, headers, context, timeout, method="GET"):
    """(status, headers, body) of a request with ``context``'s trust; an HTTP error is an answer too. No answer at all
    raises Answer. (Ansible's open_url takes one CA file, which replaces the system's: Docker trusts both.)"""
    request = urllib.request.Request(url, headers=headers, method=method)
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
    except (http.client.HTTPException, ValueError) as error:
        raise Answer("answer", "its answer at %s could not be read (%s)" % (urllib.parse.urlsplit(url).netloc, error))


def token(params, ref, username, password, context, timeout):
    """A Bearer token from the realm a registry named, asked with the login when there is one."""
    if username and not params["realm"].startswith("https://"):
        raise Answer("login", "its token service %s is not HTTPS, and the login is never sent in the clear. Fix: serve the token "
                     "service over HTTPS" % params["realm"])
    query = {"service": params.get("service", ""), "scope": params.get("scope") or "repository:%s:pull" % ref["repository"]}
    headers = {"Authorization": "Basic " + basic(username, password)} if username else {}
    joined = "&" if urllib.parse.urlsplit(params["realm"]).query else "?"
    status, dummy, body = ask(params["realm"] + joined + urllib.parse.urlencode(query), headers, context, timeout)
    if status != 200:
        raise Answer("login", refused_login(username, "its token service at %s answered HTTP %d" % (params["realm"], status)))
    try:
        found = json.loads(body.decode() or "{}")
    except ValueError:
        found = {}
    if not (found.get("token") or found.get("access_token")):
        raise Answer("login", "its token service at %s gave no token" % params["realm"])
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
        raise Answer("tls", "a CA or client certificate file in %s/%s/ cannot be read (%s). Fix: make it readable for the SSH "
                     "user, or remove what is not the registry's" % (certs_dir, ref["registry"], error))
    url = "https://%s/v2/%s/manifests/%s" % (ref["api_host"], ref["repository"], ref["reference"])
    headers = {"Accept": ACCEPT}
    try:
        status, answered, body = ask(url, headers, context, timeout, "HEAD")
        if status == 401:
            scheme, params = challenge(answered.get("WWW-Authenticate"))
            if scheme == "bearer" and params.get("realm"):
                found = token(params, ref, username, password, context, timeout)
                headers["Authorization"] = "Bearer %s" % found
            elif username:
                headers["Authorization"] = "Basic " + basic(username, password)
            else:
                raise Answer("login", refused_login(None, "HTTP 401, %s" % (scheme or "no scheme")))
            status, answered, body = ask(url, headers, context, timeout, "HEAD")
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
    if status == 404:  # a HEAD has no body: the error's codes come with a GET (a manifest not found counts no pull)
        body = ask(url, headers, context, timeout)[2]
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
        return (body or b"")[:120].decode(errors="replace") or "no error code"
