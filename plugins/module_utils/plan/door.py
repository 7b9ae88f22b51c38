# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The front door: the one listener clients reach, an nginx in front of each deployment's vLLM. Pure; no I/O.

vLLM's own key guards only the paths under ``/v1`` (and a few other prefixes): ``/invocations`` answers a full
completion without it, and ``/tokenize``, ``/metrics``, ``/docs``, ``/version`` and more answer anyone (vLLM's security
guide lists them). So vLLM here has no TCP port and no key at all: it serves on a Unix socket (``--uds``) in a folder
only root can enter, and the door, nginx from Debian, is the only way in:

- it listens where vLLM listened (the endpoint's bind address and ``vllm_port``: the URL clients knew stays theirs);
- every route asks for ``Authorization: Bearer <key>`` but ``GET /health`` (matched on nginx's normalized path, so
  ``//health`` or ``/health/../invocations`` need the key too); ``/metrics`` included: the collection's Prometheus
  sends the key from a file of its own;
- the key is in a file only nginx's master reads (``keys.conf``, mode 0600 in a root-only folder, mounted read-only):
  never in an argv, an environment or a log (the access log is off: nginx's format would not log the header, but a
  client's URL may hold what it should not);
- the socket: vLLM runs as root in its container and makes the socket with root's umask (mode 0755, root's); connecting
  needs write permission on it (unix(7)), so on the host only root reaches vLLM, and in the door only its workers,
  which run as root with every capability dropped. Nothing else on the host (another user) reaches vLLM but through the
  door and its key.

Streaming (server-sent events) passes token by token: no buffering either way, an hour's timeouts.
"""

from __future__ import annotations

import re

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import labels as container_labels, nodes as nodes_check, tls as tls_utils
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import container_name, digest, STATE_MOUNT

IMAGE = "dgx-spark-vllm/door:1"   # built from DOCKERFILE (Debian's nginx) on a head that lacks it
DOCKERFILE = "door.Dockerfile"    # in roles/vllm_serve/files
CONFIG_MOUNT = "/etc/dgx-spark-door"
SOCKET_MOUNT = "/run/dgx-spark-door"      # the socket's folder, as the door sees it
SOCKET_NAME = "vllm.sock"
VLLM_SOCKET = STATE_MOUNT + "/door/" + SOCKET_NAME  # the socket, as vLLM's container sees it (commands.MOUNTS "door")
HEALTH_PATH = "/health"
# Routes vLLM itself answers without its key (its own key guards /v1 only): the verification asks each without the
# key through the door, and each must answer the door's 401 (verify/endpoint_check.refused_without_key). POST ones are
# sent an empty JSON body: vLLM would answer 400 or 422 to it, generating nothing, and the door 401.
KEYLESS_CHECKED = ("/v1/models", "/metrics", "/version", "/openapi.json", "/docs", "/ping", "/load", "POST /invocations",
                   "POST /tokenize", "POST /v1/completions")
UNAUTHORIZED_STATUS = 401
# A key goes into nginx's configuration as a literal string: only characters that need no quoting there, and short
# enough for the map's hash bucket (map_hash_bucket_size 256, with "Bearer "). Generated keys are 48 letters and
# digits; a given vllm_api_key outside this set is refused at the plan.
KEY_PATTERN = re.compile(r"^[A-Za-z0-9._~+/=-]{16,200}$")
UNAUTHORIZED = '{"error": {"message": "Unauthorized: this endpoint needs its API key (Authorization: Bearer <key>)", "code": 401}}'


def key_refusal(key):
    """Why ``key`` cannot be the door's key, or None."""
    if KEY_PATTERN.match(key or ""):
        return None
    return ("the API key must be 16 to 200 characters of letters, digits and . _ ~ + / = - (it is written into the "
            "front door's configuration as it is); give another vllm_api_key, or none to have one generated")


def keys_conf(key):
    """The door's secret file: a map from the request's Authorization header to whether it carries the key."""
    refusal = key_refusal(key)
    if refusal:
        raise ValueError(refusal)
    # A regular expression, not a string: nginx compares a map's strings ignoring case. Every character but letters and
    # digits is escaped (PCRE reads a backslash before one as the character itself).
    pattern = "".join(c if c.isalnum() else "\\" + c for c in key)
    return ("# Written by dgx_spark.vllm (module_utils/plan/door.py): the front door's key. Root only.\n"
            'map $http_authorization $dgx_key_ok {\n    default 0;\n    "~^Bearer %s$" 1;\n}\n' % pattern)


NGINX_CONF = """# Written by dgx_spark.vllm (module_utils/plan/door.py): the front door. The key is in keys.conf.
user root;
worker_processes 2;
error_log stderr warn;
pid /run/nginx/nginx.pid;
events {
    worker_connections 1024;
}
http {
    server_tokens off;
    access_log off;
    default_type application/json;
    map_hash_bucket_size 256;
    client_body_temp_path /run/nginx/body;
    proxy_temp_path /run/nginx/proxy;
    fastcgi_temp_path /run/nginx/fastcgi;
    uwsgi_temp_path /run/nginx/uwsgi;
    scgi_temp_path /run/nginx/scgi;
    include %(config)s/keys.conf;
    upstream behind {
        server unix:%(socket)s;
        keepalive 16;
    }
    server {
        %(listen)s
        client_max_body_size 64m;
        location = %(health)s {
            limit_except GET {
                deny all;
            }
            proxy_pass http://behind%(upstream_health)s;
        }
        location / {
            if ($dgx_key_ok = 0) {
                return 401 '%(unauthorized)s';
            }
            proxy_pass http://behind;
            proxy_http_version 1.1;
            proxy_set_header Connection "";%(authorization)s
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_cache off;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
        }
    }
}
"""


# What the door stands in front of: vLLM (the default), or the gateway (gateway.BEHIND_DOOR): the socket's name in its
# folder, the path the door's health route asks there, and whether the client's Authorization header goes on (vLLM has
# no key: the client's is nobody else's business; LiteLLM checks the same key again).
VLLM = {"socket": SOCKET_NAME, "health": HEALTH_PATH, "authorization": False}


def nginx_conf(listen, port, behind=None, tls=None):
    """nginx's configuration (no secret in it: the key is included from keys.conf). ``tls``: the door's TLS section
    (tls_section), which serves TLS where clients reach it and plain HTTP on the head's loopback (plan/tls.py)."""
    behind = behind or VLLM
    address = "%s:%d" % (listen, int(port))
    lines = tls_utils.nginx_listen(address, tls["local"]) if tls else "listen %s;" % address
    return NGINX_CONF % {"config": CONFIG_MOUNT, "socket": SOCKET_MOUNT + "/" + behind["socket"], "listen": lines,
                         "health": HEALTH_PATH, "upstream_health": behind["health"], "unauthorized": UNAUTHORIZED,
                         "authorization": "" if behind["authorization"] else '\n            proxy_set_header Authorization "";'}


def tls_section(settings, folder, digest, local=None):
    """The door's TLS (plan/tls.py), or None when vllm_tls is off: the controller's certificate and key files, where the
    head keeps them (the key 0600, root's), their digest, and its plain loopback listener (``local``, host:port)."""
    given = tls_utils.files(settings)
    if not given:
        return None
    return {"cert_file": given["cert"], "key_file": given["key"], "cert_path": folder + "/tls.crt", "key_path": folder + "/tls.key",
            "digest": digest, "local": local}


def plan(name, image, labels, listen, port, folder, socket_folder, key_digest, behind=None, tls=None):
    """The door's section of a deployment's plan (or of the gateway's, ``behind``: what it stands in front of, VLLM by
    default): its files on the head, its container (the config hash covers the configuration, the image, the key's
    digest and the certificate's: a new key or certificate recreates it, nothing else does), and where it listens.
    ``tls``: tls_section's, or None for plain HTTP."""
    config = nginx_conf(listen, port, behind, tls)
    container = {"name": name, "image": image, "network_mode": "host",
                 "command": ["nginx", "-c", CONFIG_MOUNT + "/nginx.conf", "-g", "daemon off;"],
                 "env": {}, "init": True, "restart_policy": "unless-stopped",
                 "volumes": ["%s/nginx.conf:%s/nginx.conf:ro" % (folder, CONFIG_MOUNT), "%s/keys.conf:%s/keys.conf:ro" % (folder, CONFIG_MOUNT),
                             "%s:%s:ro" % (socket_folder, SOCKET_MOUNT)]
                 + (["%s:%s:ro" % (tls["cert_path"], tls_utils.CERT_MOUNT), "%s:%s:ro" % (tls["key_path"], tls_utils.KEY_MOUNT)] if tls else []),
                 # nginx's master drops to its workers' user (root here, so setuid/setgid are kept) and nothing else.
                 "capabilities": ["SETUID", "SETGID"], "cap_drop": ["ALL"], "read_only": True, "tmpfs": ["/run/nginx"],
                 "security_opts": ["no-new-privileges"], "labels": dict(labels)}
    container["labels"][container_labels.CONFIG_HASH] = digest({"container": container, "config": config, "key": key_digest,
                                                                "tls": (tls or {}).get("digest")})
    return {"container": container, "folder": folder, "socket_folder": socket_folder, "listen": "%s:%d" % (listen, int(port)), "tls": tls,
            "build_folder": folder + "/build", "build_file": folder + "/build/Dockerfile",
            "files": [{"path": folder + "/nginx.conf", "content": config, "mode": "0644"}],
            "keys_file": folder + "/keys.conf", "health_path": HEALTH_PATH}


def client(settings, url):
    """How clients reach a deployment's model at its own door (``url``), as its verification, a run that changes
    nothing and status.yml ask it (shared.through_gateway puts the gateway's in its place): with the key on every route,
    and, with TLS, trusting ``ca_file`` (plan/tls.py)."""
    return {"url": url, "api_url": url + "/v1", "health_path": HEALTH_PATH, "api_key_file": settings["api_key_file"],
            "keyless_checked": list(KEYLESS_CHECKED), "keyless_status": UNAUTHORIZED_STATUS, "metrics": True, "ready_probe": False,
            "ca_file": tls_utils.ca_file(settings)}


def image(settings):
    """The door's image: the inventory's vllm_door_image, or the one built from DOCKERFILE."""
    return settings.get("door_image") or IMAGE


def section(settings, head, paths, endpoint, key_digest, probed, findings, image_present=False, tls_digest=None):
    """The door of a deployment on its head, and what the apply step does to it (module_utils/plan/nodes.planned_change:
    none, create, start or recreate; one of its name that is not ours is refused). ``image_present``: the head's probe
    found the door's image, so the apply builds nothing and asks Docker nothing about it. ``endpoint``: where it
    listens (nodes.door_address); with TLS on, the door clients reach serves it (not one behind the gateway)."""
    name = container_name(settings, "door", head)
    bind = endpoint["bind"]
    tls = None if endpoint.get("behind_gateway") else tls_section(settings, paths["door_dir"], tls_digest, endpoint.get("loopback"))
    result = plan(name, image(settings), container_labels.labels(settings["cluster_name"], head, "door"),
                  bind or "0.0.0.0", settings["port"], paths["door_dir"], paths["door_socket_dir"], key_digest, tls=tls)
    result.update(host=head, change=nodes_check.planned_change(result["container"], True, probed, findings, head),
                  dockerfile=DOCKERFILE, image_present=bool(image_present), key_file=settings["api_key_file"])
    if int(settings["port"]) < 1024:  # its workers hold no capability, NET_BIND_SERVICE included
        findings.error(head, settings["port"], "vllm_port %s is below 1024: the front door binds it with no privilege, and cannot; "
                       "choose a port of 1024 or above (8000 by default), or put a proxy of yours in front" % settings["port"])
    return result
