"""A node's image from a registry: names read as Docker reads them, a registry's challenge, its answers turned into
what to fix, and the pull's login kept out of argv and removed after."""

import base64
import datetime
import http.server
import ipaddress
import json
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import registry, registry_pull

# What the simulated cluster's registry (Debian's docker-registry 2.8, tasks/registry.yml) answered to a request without
# a login (read with curl), and Docker Hub's token challenge in the form its documentation gives.
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


# A pull's stream, in the form Docker's API gives it (one JSON object per line, progress in "status", an "error" object
# when the registry refuses: the daemon's own words for a missing login).
PULLED_LINES = [b'{"status":"Pulling from dgx-spark-sim/runtime","id":"sim"}\r\n',
                b'{"status":"Pulling fs layer","progressDetail":{},"id":"a1b2c3d4e5f6"}\r\n',
                b'{"status":"Pull complete","progressDetail":{},"id":"a1b2c3d4e5f6"}\r\n',
                b'{"status":"Digest: sha256:' + b"c" * 64 + b'"}\r\n',
                b'{"status":"Status: Downloaded newer image for 10.209.0.6:5000/dgx-spark-sim/runtime:sim"}\r\n']
REFUSED_LINES = [b'{"errorDetail":{"message":"Head \\"https://10.209.0.6:5000/v2/dgx-spark-sim/runtime/manifests/sim\\": no basic '
                 b'auth credentials"},"error":"Head \\"https://10.209.0.6:5000/v2/dgx-spark-sim/runtime/manifests/sim\\": no basic '
                 b'auth credentials"}\r\n']


def test_the_pull_asks_the_daemon_with_the_login_in_its_header_never_in_the_path():
    path, headers = registry_pull.request("10.209.0.6:5000/dgx-spark-sim/runtime:sim", "sim-puller", "s3cret")
    assert path == "/images/create?fromImage=10.209.0.6%3A5000%2Fdgx-spark-sim%2Fruntime&tag=sim" and "s3cret" not in path
    login = json.loads(base64.urlsafe_b64decode(headers["X-Registry-Auth"]))
    assert login == {"username": "sim-puller", "password": "s3cret", "serveraddress": "10.209.0.6:5000"}
    assert registry_pull.request("ubuntu@sha256:" + "a" * 64)[0].endswith("fromImage=ubuntu&tag=sha256%3A" + "a" * 64)
    assert registry_pull.request("ubuntu")[1] == {}  # no login, no header


def test_the_daemons_stream_says_whether_the_pull_worked():
    assert registry_pull.outcome(PULLED_LINES) == (True, "Status: Downloaded newer image for 10.209.0.6:5000/dgx-spark-sim/runtime:sim")
    ok, said = registry_pull.outcome(REFUSED_LINES)
    assert not ok and said.endswith("no basic auth credentials")
    assert registry_pull.daemon_socket({"DOCKER_HOST": "unix:///run/user/1000/docker.sock"}) == "/run/user/1000/docker.sock"
    assert registry_pull.daemon_socket({}) == "/var/run/docker.sock"


def test_the_pull_goes_to_the_daemons_socket_and_reads_its_stream(tmp_path):
    """A socket that answers as the daemon answered (PULLED_LINES): the request reaches it with the login in its header."""
    path, seen = str(tmp_path / "docker.sock"), {}
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def answer():
        conn, dummy = server.accept()
        seen["request"] = conn.recv(65536)
        body = b"".join(PULLED_LINES)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    assert registry_pull.pull("10.209.0.6:5000/dgx-spark-sim/runtime:sim", "sim-puller", "s3cret", path, timeout=10)[0]
    head = seen["request"].decode()
    assert head.startswith("POST /images/create?fromImage=") and "X-Registry-Auth: " in head and "s3cret" not in head
    server.close()
    assert registry_pull.pull("x/y:z", socket_path=str(tmp_path / "none.sock"))[1].startswith("the daemon at ")


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
    """A TLS server that answers as the registry did: the challenge without a login, the manifest with the right one
    (to HEAD as to GET, the body only to GET)."""

    def answer(self):
        if self.headers.get("Authorization") != "Basic " + registry.basic("sim-puller", "right"):
            return 401, {"WWW-Authenticate": DISTRIBUTION_CHALLENGE}, b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}'
        if not self.path.endswith("/manifests/sim"):
            return 404, {}, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}'
        return 200, {"Docker-Content-Digest": "sha256:" + "c" * 64}, b"{}"

    def send(self, body):
        status, headers, text = self.answer()
        self.send_response(status)
        for name, value in dict(headers, **{"Content-Length": str(len(text))}).items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(text)

    def do_HEAD(self):  # noqa: N802 (http.server's names)
        self.send(False)

    def do_GET(self):  # noqa: N802
        self.send(True)

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
