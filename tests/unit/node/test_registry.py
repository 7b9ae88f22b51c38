"""A node's image from a registry: names read as Docker reads them, a registry's challenge, its answers turned into
what to fix, and the pull's login kept out of argv and removed after."""

import datetime
import http.server
import ipaddress
import json
import os
import ssl
import stat
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import registry

# What the simulated cluster's registry (Debian's docker-registry 2.8, tasks/registry.yml) answered to a request without
# a login, and Docker Hub's token challenge, as each sends it.
DISTRIBUTION_CHALLENGE = 'Basic realm="dgx-spark-sim-registry"'
HUB_CHALLENGE = 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/ubuntu:pull"'


@pytest.mark.parametrize("image, expected", [
    ("10.209.0.6:5000/dgx-spark-sim/runtime:sim", ("10.209.0.6:5000", "dgx-spark-sim/runtime", "sim", "10.209.0.6:5000")),
    ("nvcr.io/nvidia/vllm:26.05-py3", ("nvcr.io", "nvidia/vllm", "26.05-py3", "nvcr.io")),
    ("localhost/vllm", ("localhost", "vllm", "latest", "localhost")),
    ("vllm/vllm-openai:v0.11.0", ("docker.io", "vllm/vllm-openai", "v0.11.0", "https://index.docker.io/v1/")),
    ("ubuntu", ("docker.io", "library/ubuntu", "latest", "https://index.docker.io/v1/")),
    ("registry.example:443/team/vllm@sha256:" + "a" * 64, ("registry.example:443", "team/vllm", "sha256:" + "a" * 64, "registry.example:443")),
])
def test_a_name_is_read_as_docker_reads_it(image, expected):
    ref = registry.reference(image)
    assert (ref["registry"], ref["repository"], ref["reference"], ref["config_key"]) == expected
    assert ref["api_host"] == ("registry-1.docker.io" if ref["registry"] == "docker.io" else ref["registry"])


def test_a_registrys_challenge_gives_its_scheme_and_parameters():
    assert registry.challenge(DISTRIBUTION_CHALLENGE) == ("basic", {"realm": "dgx-spark-sim-registry"})
    assert registry.challenge(HUB_CHALLENGE) == ("bearer", {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
                                                            "scope": "repository:library/ubuntu:pull"})
    assert registry.challenge(None) == ("", {})


def test_the_pull_gets_the_login_in_a_folder_of_its_own_never_in_argv_and_the_folder_goes(tmp_path):
    seen = {}

    def docker(argv, **kwargs):  # what docker would read: its argv, and the config folder it is given
        folder = argv[argv.index("--config") + 1]
        seen.update(argv=argv, env=kwargs.get("env"), mode=stat.S_IMODE(os.stat(folder).st_mode),
                    file_mode=stat.S_IMODE(os.stat(os.path.join(folder, "config.json")).st_mode), folder=folder)
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
            seen["config"] = json.load(handle)
        return type("Done", (), {"returncode": 0, "stdout": "pulled\n", "stderr": ""})()

    assert registry.pull("10.209.0.6:5000/dgx-spark-sim/runtime:sim", "sim-puller", "s3cret", run=docker) == (0, "pulled\n", "")
    assert seen["argv"][0] == "docker" and seen["argv"][-2:] == ["pull", "10.209.0.6:5000/dgx-spark-sim/runtime:sim"]
    assert not any("s3cret" in a for a in seen["argv"]) and seen["env"] is None
    assert seen["mode"] == 0o700 and seen["file_mode"] == 0o600
    assert seen["config"] == {"auths": {"10.209.0.6:5000": {"auth": "c2ltLXB1bGxlcjpzM2NyZXQ="}}}
    assert not os.path.exists(seen["folder"])


def test_a_registry_nobody_answers_at_is_named_with_its_address():
    with pytest.raises(registry.Answer) as raised:
        registry.check("127.0.0.1:1/vllm:1", timeout=5)
    assert raised.value.kind == "unreachable" and "it does not answer at 127.0.0.1:1" in raised.value.problem


def certificate(tmp_path, name, issuer_key=None, issuer=None, ca=False):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer or subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    path = tmp_path / (name.replace(" ", "_") + ".pem")
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert, key, path


class Registry(http.server.BaseHTTPRequestHandler):
    """A TLS server that answers as the registry did: the challenge without a login, the manifest with the right one."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.headers.get("Authorization") != "Basic " + registry.basic("sim-puller", "right"):
            self.send_response(401)
            self.send_header("WWW-Authenticate", DISTRIBUTION_CHALLENGE)
            self.end_headers()
            self.wfile.write(b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}')
            return
        if not self.path.endswith("/manifests/sim"):
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}')
            return
        self.send_response(200)
        self.send_header("Docker-Content-Digest", "sha256:" + "c" * 64)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture(name="served")
def fixture_served(tmp_path):
    ca, ca_key, ca_path = certificate(tmp_path, "test CA", ca=True)
    dummy, dummy, server_path = certificate(tmp_path, "127.0.0.1", ca_key, ca.subject)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(server_path)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "127.0.0.1:%d" % server.server_address[1], ca.public_bytes(serialization.Encoding.PEM)
    server.shutdown()


def test_each_answer_but_the_manifest_says_what_to_fix(served, tmp_path):
    address, ca = served
    certs = tmp_path / "certs.d"
    with pytest.raises(registry.Answer) as untrusted:  # the CA not where docker reads it
        registry.check(address + "/dgx-spark-sim/runtime:sim", "sim-puller", "right", str(certs), 5)
    assert untrusted.value.kind == "tls" and "its certificate is not trusted on this node" in untrusted.value.problem
    assert "Fix: place the registry's CA there as ca.crt" in untrusted.value.problem and str(certs / address) in untrusted.value.problem
    (certs / address).mkdir(parents=True)
    (certs / address / "ca.crt").write_bytes(ca)
    with pytest.raises(registry.Answer) as anonymous:
        registry.check(address + "/dgx-spark-sim/runtime:sim", None, None, str(certs), 5)
    assert anonymous.value.kind == "login" and "it asks for a login" in anonymous.value.problem
    assert "set image_registry_username and image_registry_password" in anonymous.value.problem
    with pytest.raises(registry.Answer) as wrong:
        registry.check(address + "/dgx-spark-sim/runtime:sim", "sim-puller", "wrong", str(certs), 5)
    assert wrong.value.kind == "login" and "it refused the login of sim-puller (HTTP 401)" in wrong.value.problem
    with pytest.raises(registry.Answer) as missing:
        registry.check(address + "/dgx-spark-sim/runtime:other", "sim-puller", "right", str(certs), 5)
    assert missing.value.kind == "missing" and "MANIFEST_UNKNOWN" in missing.value.problem and "vllm_image" in missing.value.problem
    assert registry.check(address + "/dgx-spark-sim/runtime:sim", "sim-puller", "right", str(certs), 5)["digest"] == "sha256:" + "c" * 64
