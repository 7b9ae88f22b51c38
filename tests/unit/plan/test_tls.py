"""TLS on the clients' front door (module_utils/plan/tls.py): the certificate's files, the door's listeners, the URL
and what every check trusts, and the settings refused before anything changes."""

import copy
import json
import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import base, door, planner, profiles, tls

from helpers import ROOT, spark_inputs


def profile():
    return profiles.load(os.path.join(ROOT, "profiles", "minimax_m25_nvfp4_ep.yml"))


def plan_with(tmp_path, **settings):
    inputs = spark_inputs(profile(), tmp_path, settings=dict(settings))
    inputs["tls_digest"] = "d1" if settings.get("tls") else None
    return planner.make_plan(copy.deepcopy(inputs))


def test_the_files_are_the_inventorys_or_a_self_signed_pair_beside_the_key():
    key = {"api_key_file": "/inv/.secrets/vllm_api_key"}
    assert tls.files(base.normalize_settings(key)) is None
    made = tls.files(base.normalize_settings(dict(key, tls="true")))
    assert made == {"cert": "/inv/.secrets/tls/cert.pem", "key": "/inv/.secrets/tls/key.pem", "ca": "/inv/.secrets/tls/cert.pem",
                    "self_signed": True, "names_file": "/inv/.secrets/tls/names.json"}  # the names it holds: others make another
    given = tls.files(base.normalize_settings(dict(key, tls=True, tls_cert_file="/c.pem", tls_key_file="/k.pem")))
    assert given == {"cert": "/c.pem", "key": "/k.pem", "ca": None, "self_signed": False, "names_file": None}  # the system's authorities
    assert tls.files(base.normalize_settings(dict(key, tls=True, tls_cert_file="/c.pem", tls_key_file="/k.pem",
                                                  tls_ca_file="/ca.pem")))["ca"] == "/ca.pem"
    assert tls.subject_alt_names(tls.names({"spark1": {"ansible_host": "10.0.0.5"}, "spark2": {"ansible_host": "spark2.lan"}})) == [
        "DNS:spark1", "IP:10.0.0.5", "DNS:spark2", "DNS:spark2.lan"]


def test_the_door_serves_tls_where_clients_reach_it_and_plain_http_on_the_heads_loopback():
    section = {"local": "127.0.0.1:8000"}
    text = door.nginx_conf("10.209.0.10", 8000, tls=section)
    assert "listen 10.209.0.10:8000 ssl;" in text and "listen 127.0.0.1:8000;" in text and text.count("listen ") == 2
    assert "ssl_certificate /etc/dgx-spark-door/tls.crt;" in text and "ssl_certificate_key /etc/dgx-spark-door/tls.key;" in text
    assert "ssl_protocols TLSv1.2 TLSv1.3;" in text
    # everything else is the plain door's: the key on every route but GET /health
    plain = door.nginx_conf("10.209.0.10", 8000)
    assert text.split("location = /health", 1)[1] == plain.split("location = /health", 1)[1]


def test_with_tls_clients_and_checks_ask_https_by_name_and_the_head_asks_its_loopback(tmp_path):
    plan = plan_with(tmp_path, tls=True)
    assert plan["ok"], plan["errors"]
    cluster = plan["deployments"]["dgx-spark"]["cluster"]
    endpoint, front = cluster["endpoint"], cluster["door"]
    assert endpoint["url"] == "https://spark1.lan:8000"  # the head as the inventory names it, the certificate's name
    assert endpoint["local_address"] == "127.0.0.1:8000" and endpoint["local_health_url"] == "http://127.0.0.1:8000/health"
    ca = "inventories/sparks/.secrets/tls/cert.pem"
    assert endpoint["client"]["ca_file"] == ca and endpoint["check"]["ca_file"] == ca
    assert front["tls"]["cert_file"] == ca and front["tls"]["key_path"].endswith("/door/tls.key")
    assert "%s:/etc/dgx-spark-door/tls.key:ro" % front["tls"]["key_path"] in front["container"]["volumes"]
    assert plan["key_files"]["tls"]["names"][:2] == ["DNS:spark1", "DNS:spark1.lan"]
    # the head's own requests (the supervisor's checks, bench) go to the plain loopback listener
    assert cluster["bench"]["base_url"] == "http://127.0.0.1:8000" if cluster.get("bench") else True
    plain = plan_with(tmp_path)["deployments"]["dgx-spark"]["cluster"]
    assert plain["endpoint"]["url"].startswith("http://") and plain["door"]["tls"] is None and plain["endpoint"]["client"]["ca_file"] is None
    assert plain["door"]["container"]["labels"] != front["container"]["labels"]
    again = plan_with(tmp_path, tls=True)["deployments"]["dgx-spark"]["cluster"]["door"]
    assert again["container"]["labels"] == front["container"]["labels"]  # the same certificate: nothing to recreate


def test_only_the_door_clients_reach_serves_tls_behind_the_gateway(tmp_path):
    tiny = profiles.load(profiles.find("sim_tiny", [os.path.join(ROOT, "profiles")]))
    inputs = spark_inputs(tiny, tmp_path, settings={"simulated": True, "offline": True, "tls": True})
    inputs.update(tls_digest="d1", groups={"spark_cluster": ["spark1", "spark2"], "spark_head": ["spark1"], "spark_workers": ["spark2"]})
    listed = [{"name": "chat", "profile": "sim_tiny", "nodes": "spark_cluster"}, {"name": "coder", "profile": "sim_tiny", "nodes": "spark_cluster"}]
    coder = copy.deepcopy(tiny)
    coder["model"]["served_name"] = "sim-tiny-coder"
    plan = planner.make_plan(inputs, listed=listed, profiles_of={"chat": tiny, "coder": coder})
    assert plan["ok"], plan["errors"]
    cluster = plan["deployments"]["chat"]["cluster"]
    assert cluster["door"]["tls"] is None and cluster["endpoint"]["url"].startswith("http://192.168.100.10:")  # a backend on the fabric
    gateway = plan["gateway"]
    assert gateway["url"] == "https://spark1.lan:8000" and gateway["door"]["tls"]["local"] is None
    assert "listen %s ssl;" % gateway["door"]["listen"] in gateway["door"]["files"][0]["content"]
    assert cluster["endpoint"]["client"]["ca_file"] == gateway["check"]["ca_file"] == "inventories/sparks/.secrets/tls/cert.pem"
    assert cluster["endpoint"]["client"]["url"] == gateway["url"]


def test_tls_settings_that_cannot_work_are_refused_before_anything_changes(tmp_path):
    half = plan_with(tmp_path, tls=True, tls_cert_file="/c.pem")
    assert not half["ok"] and "go together" in half["errors"][0]["message"]
    inputs = spark_inputs(profile(), tmp_path, settings={"tls": True, "tls_cert_file": "/c.pem", "tls_key_file": "/k.pem"})
    unread = planner.make_plan(inputs)  # the action found no readable pair: no digest
    assert not unread["ok"] and "cannot be read on the controller" in unread["errors"][0]["message"]
    loopback = plan_with(tmp_path, tls=True, bind_address="127.0.0.1")
    assert any("loopback" in e["message"] for e in loopback["errors"]), loopback["errors"]


def test_a_pair_nginx_could_not_serve_and_a_plain_public_url_are_refused(tmp_path):
    """The action reads the pair on the controller: a key that is not the certificate's, an expired certificate or a file
    that is not PEM would leave the door restarting; each is refused by the plan, naming the files."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from ansible_collections.dgx_spark.vllm.plugins.action import vllm_cluster_plan as action

    def pair(days):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "spark1.lan")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(1)
                .not_valid_before(now - datetime.timedelta(days=2)).not_valid_after(now + datetime.timedelta(days=days))
                .sign(key, hashes.SHA256()))
        return (cert.public_bytes(serialization.Encoding.PEM),
                key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    good, other, old = pair(30), pair(30), pair(-1)
    assert action.tls_problem(*good) is None
    assert action.tls_problem(good[0], other[1]) == "has a private key that is not the certificate's"
    assert action.tls_problem(*old).startswith("has expired (")
    assert action.tls_problem(b"not a certificate", good[1]).startswith("is not a PEM certificate")
    inputs = spark_inputs(profile(), tmp_path, settings={"tls": True, "tls_cert_file": "/c.pem", "tls_key_file": "/k.pem"})
    refused = planner.make_plan(dict(inputs, tls_digest="d1", tls_problem="has expired (2026-01-01)"))
    assert "vllm_tls: the certificate /c.pem with its key /k.pem has expired (2026-01-01); give a valid pair" in refused["errors"][0]["message"]
    plain = plan_with(tmp_path, tls=True, public_url="http://spark.example:8000")
    assert any("vllm_public_url http://spark.example:8000 is plain HTTP" in e["message"] for e in plain["errors"]), plain["errors"]


def test_a_loopback_address_from_another_interface_is_dropped_before_any_port_is_opened():
    """The door's plain listener is on the head's loopback: a packet for 127.0.0.1 that arrives on another interface
    (route_localnet) is dropped before the opened ports are admitted."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import firewall

    rules = firewall.ruleset("t", ["192.168.100.10"], ["22", "8000"])
    lines = [line.strip() for line in rules.splitlines()]
    assert lines.index("ip daddr 127.0.0.0/8 drop") < lines.index("tcp dport @opened_tcp accept")
    assert lines.index('iifname "lo" accept') < lines.index("ip daddr 127.0.0.0/8 drop") and "ip6 daddr ::1 drop" in lines


def test_a_tls_door_prometheus_cannot_read_is_refused_and_the_gateway_takes_it_in(tmp_path):
    """Without the gateway, each deployment's door serves TLS to every host; Prometheus, on the first head, reads its
    own head's through the loopback listener but could not read another head's: refused before anything changes,
    naming the deployment and the fix. With the gateway the doors are the cluster's own and Prometheus reads them all."""
    tiny = profiles.load(profiles.find("sim_tiny", [os.path.join(ROOT, "profiles")]))
    coder = copy.deepcopy(tiny)
    coder["model"]["served_name"] = "sim-tiny-coder"
    listed = [{"name": "chat", "profile": "sim_tiny", "nodes": ["spark1", "spark2"]},
              {"name": "coder", "profile": "sim_tiny", "nodes": ["spark3", "spark2"], "port": 8001, "ray_ports_offset": 200}]

    def plan(**settings):
        given = dict({"simulated": True, "offline": True, "tls": True, "monitoring": {"enabled": True}}, **settings)
        inputs = spark_inputs(tiny, tmp_path, count=3, settings=given)
        inputs.update(tls_digest="d1", groups={"spark_cluster": ["spark1", "spark2", "spark3"], "spark_head": ["spark1"],
                                               "spark_workers": ["spark2", "spark3"]})
        return planner.make_plan(inputs, listed=copy.deepcopy(listed), profiles_of={"chat": tiny, "coder": coder})

    refused = plan(gateway={"enabled": False})
    assert [e["host"] for e in refused["errors"]] == ["spark3"], refused["errors"]
    assert "deployment coder's vLLM through its door on spark3" in refused["errors"][0]["message"]
    assert "vllm_gateway: true" in refused["errors"][0]["message"]
    behind = plan()
    assert behind["ok"], behind["errors"]
    scraped = json.dumps(behind["monitoring"]["files"]["prometheus.yml"])
    assert "192.168.100.10:8001" in scraped and "192.168.100.12:8001" in scraped and "https" not in scraped  # each door on the fabric
