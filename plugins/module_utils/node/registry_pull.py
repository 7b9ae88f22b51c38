# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pull of ``image_source: pull`` (module_utils/node/registry.py asks first): the node's Docker daemon pulls the
image through its API on its socket (``POST /images/create``), as ``docker pull`` asks it, the login in the request's
``X-Registry-Auth`` header. So the login is never in argv, the environment, a file (a folder of it would outlive a
pull cut short by a dropped SSH session), or the user's ``~/.docker``; the daemon's own mirrors, proxy and insecure
registries apply as to any pull."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import time
import urllib.parse

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.registry import reference

SOCKET = "/var/run/docker.sock"


class UnixConnection(http.client.HTTPConnection):
    """HTTP over the daemon's unix socket."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def request(image, username=None, password=None):
    """(the API path, its headers) of the pull of ``image``: the name apart from its tag or digest, and the login for
    the image's own registry (Docker's X-Registry-Auth: base64url of its JSON)."""
    ref, headers = reference(image), {}
    if username:
        login = {"username": username, "password": password or "", "serveraddress": ref["config_key"]}
        headers["X-Registry-Auth"] = base64.urlsafe_b64encode(json.dumps(login).encode()).decode()
    return "/images/create?" + urllib.parse.urlencode({"fromImage": ref["name"], "tag": ref["reference"]}), headers


def outcome(lines):
    """(ok, the last status or the error) from the daemon's progress: one JSON object per line, an "error" on failure."""
    last = ""
    for line in lines:
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if found.get("error"):
            return False, found["error"]
        last = found.get("status") or last
    return bool(last), last or "the daemon said nothing"


def timed(lines, deadline, timeout):
    for line in lines:
        if time.monotonic() > deadline:
            raise TimeoutError("still pulling after %d s" % timeout)
        yield line


def daemon_socket(environ):
    """The daemon's socket: DOCKER_HOST's when it names a unix socket, else Docker's default."""
    given = environ.get("DOCKER_HOST") or ""
    return given[len("unix://"):] if given.startswith("unix://") else SOCKET


def pull(image, username=None, password=None, socket_path=SOCKET, timeout=3600, read_timeout=600):
    """Pull ``image`` through the daemon; (ok, its last status or its error)."""
    path, headers = request(image, username, password)
    connection = UnixConnection(socket_path, read_timeout)
    try:
        connection.request("POST", path, headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            return False, "the daemon answered HTTP %d: %s" % (response.status, response.read(4096).decode(errors="replace").strip())
        return outcome(timed(response, time.monotonic() + timeout, timeout))
    except (OSError, http.client.HTTPException) as error:
        return False, "the daemon at %s: %s" % (socket_path, error)
    finally:
        connection.close()
