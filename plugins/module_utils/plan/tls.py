# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TLS on the clients' front door (``vllm_tls: true``). Pure; no I/O.

The key travels on every request, so on a network other people share the door should speak TLS. It is the door that
clients reach that serves it: the deployment's own, or the gateway's in front of several (each deployment's door is
then a backend on the fabric, which only the cluster's nodes reach, and stays plain HTTP).

- **The certificate** is the inventory's (``vllm_tls_cert_file`` and ``vllm_tls_key_file``, PEM files on the
  controller, the chain in the certificate file), or, when neither is given, a self-signed one the preflight role makes
  once beside the API key (``<inventory>/.secrets/tls/``), for the names and addresses of every node (any of them may
  become the head). A new certificate or key recreates the door, nothing else.
- **The URL** names the head as the inventory does (its ``ansible_host``, which the self-signed certificate holds), not
  the address that name resolves to: a certificate is for the name clients use.
- **Who checks it**: the controller's checks (verification, status, the smoke tests and the canary) ask the door over
  TLS and verify its certificate against ``vllm_tls_ca_file``: by default the self-signed certificate itself, or the
  controller's system authorities for the inventory's own certificate.
- **The head's own requests** (the supervisor's health and completion checks, bench's load generator, Prometheus)
  go to the door's second listener, plain HTTP on the head's loopback, with the same key: they never leave the head.
- **Plain HTTP on the clients' port** is refused: nginx answers it 400 and passes nothing on.
"""

from __future__ import annotations

CERT_MOUNT = "/etc/dgx-spark-door/tls.crt"
KEY_MOUNT = "/etc/dgx-spark-door/tls.key"
PROTOCOLS = "TLSv1.2 TLSv1.3"
LOOPBACK = "127.0.0.1"


def files(settings):
    """The controller's certificate, key and CA files when TLS is on, else None: the inventory's, or the self-signed
    pair beside the API key (``self_signed``: the preflight role makes it once, when missing)."""
    if not settings.get("tls"):
        return None
    cert, key = settings.get("tls_cert_file"), settings.get("tls_key_file")
    self_signed = not cert and not key
    if self_signed:
        folder = (settings["api_key_file"].rsplit("/", 1)[0] if settings.get("api_key_file") and "/" in settings["api_key_file"] else ".") + "/tls"
        cert, key = folder + "/cert.pem", folder + "/key.pem"
    return {"cert": cert, "key": key, "ca": settings.get("tls_ca_file") or (cert if self_signed else None), "self_signed": self_signed,
            "names_file": (cert.rsplit("/", 1)[0] + "/names.json") if self_signed else None}


def ca_file(settings):
    """What the controller's checks trust for the door's certificate: None without TLS, or with the system's authorities."""
    return (files(settings) or {}).get("ca")


def check(settings, bind, digest, findings, problem=None):
    """The inventory's TLS settings, before anything changes: both files or neither, each one readable (``digest``: the
    action's digest of the pair, None when a file is missing), a pair nginx can serve (``problem``: the action's
    finding), an https URL, and a door that clients reach from elsewhere."""
    given = files(settings)
    if not given:
        return
    if problem:
        findings.error("all", given["cert"], "vllm_tls: the certificate %s with its key %s %s; give a valid pair%s"
                       % (given["cert"], given["key"], problem, ", or delete them to have a self-signed one made again"
                          if given["self_signed"] else ""))
    if str(settings.get("public_url") or "").startswith("http://"):
        findings.error("all", settings["public_url"], "vllm_public_url %s is plain HTTP, and with vllm_tls the door refuses "
                       "it; write it with https://" % settings["public_url"])
    if bool(settings.get("tls_cert_file")) != bool(settings.get("tls_key_file")):
        findings.error("all", settings.get("tls_cert_file") or settings.get("tls_key_file"),
                       "vllm_tls_cert_file and vllm_tls_key_file go together: give both (PEM files on the controller, the "
                       "certificate's chain in its file), or neither for a self-signed certificate made once")
    elif not given["self_signed"] and not digest:
        findings.error("all", "%s, %s" % (given["cert"], given["key"]),
                       "vllm_tls: the certificate %s or its key %s cannot be read on the controller; give the paths of both "
                       "PEM files, or neither for a self-signed certificate made once" % (given["cert"], given["key"]))
    if bind and bind.startswith("127."):
        findings.error("all", bind, "vllm_tls with the endpoint on the head's loopback (%s): no client elsewhere reaches it; "
                       "set vllm_bind_address to the address clients reach, or vllm_tls: false" % bind)


def names(nodes):
    """The names and addresses a self-signed certificate holds: every node's inventory name and ansible_host."""
    found = []
    for name, node in sorted((nodes or {}).items()):
        for value in (name, node.get("ansible_host")):
            if value and value not in found:
                found.append(str(value))
    return found


def subject_alt_names(values):
    """community.crypto's subject_alt_name entries of ``values``: IP: for addresses, DNS: for names."""
    import ipaddress
    result = []
    for value in values:
        try:
            result.append("IP:%s" % ipaddress.ip_address(value))
        except ValueError:
            result.append("DNS:%s" % value)
    return result


def nginx_listen(listen, local):
    """The door's listen lines: TLS where clients reach it, and plain HTTP on the head's loopback (``local``,
    host:port) for the head's own requests."""
    lines = ["listen %s ssl;" % listen]
    if local:
        lines.append("listen %s;" % local)
    lines += ["ssl_certificate %s;" % CERT_MOUNT, "ssl_certificate_key %s;" % KEY_MOUNT, "ssl_protocols %s;" % PROTOCOLS,
              "ssl_session_cache shared:tls:1m;"]
    return "\n        ".join(lines)
