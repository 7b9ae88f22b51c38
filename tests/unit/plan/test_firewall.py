"""firewall: deny by default, by source: the cluster's nodes reach everything, other hosts only SSH, the front door and
the allow list; checked by nft itself and by connections between network namespaces."""

import os
import shutil
import subprocess

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import base, firewall

from helpers import ROOT

NODES = ["192.168.100.10", "192.168.100.11"]
NFT = shutil.which("nft")


def test_every_port_ray_opens_is_pinned():
    head = firewall.ray_port_flags(True)
    worker = firewall.ray_port_flags(False)
    assert head[-2:] == ["--ray-client-server-port", "10001"] and "--ray-client-server-port" not in worker
    pinned = {int(v) for v in head[1::2]}
    ranges = firewall.ray_port_ranges()
    assert ranges == [(6800, 6805), (10001, 10101)]
    assert all(any(low <= port <= high for low, high in ranges) for port in pinned)  # none left out


def reach(entries, nodes, gateway=False, **given):
    settings = base.normalize_settings(given)
    settings["monitoring"] = dict(settings.get("monitoring") or {})
    findings = base.Findings()
    return firewall.reach(entries, settings, nodes, findings, gateway), findings


def test_other_hosts_reach_ssh_and_the_front_doors_on_their_heads_and_the_allow_list_everywhere():
    # SSH: 22, the inventory's ansible_port and the port the probe's own connection arrived at (sshd's, whatever the
    # inventory says)
    nodes = {"spark1": {"fabric_ip": NODES[0], "connection_port": 22}, "spark2": {"fabric_ip": NODES[1], "ssh_port": 2222, "connection_port": 2200}}
    one = [{"name": "dgx-spark", "head": "spark1", "hosts": ["spark1", "spark2"]}]
    found, findings = reach(one, nodes)
    assert found == {"nodes": NODES, "udp": [], "tcp": {"spark1": ["22", "8000"], "spark2": ["22", "2200", "2222"]}} and not findings.errors
    # Several deployments behind the gateway: the gateway's port on the first head, no deployment's own door (those
    # answer the nodes alone); Prometheus where vllm_monitoring_listen opens it beyond loopback; the inventory's own
    # ports on every node.
    several = [{"name": "a", "head": "spark1", "settings": {"port": 8001}}, {"name": "b", "head": "spark2", "settings": {"port": 8002}}]
    found, findings = reach(several, nodes, gateway=True, monitoring={"enabled": True, "listen": "192.168.1.10:9090"},
                            firewall_allow=[8888, "9000-9010/tcp", "5353/udp"])
    assert found["tcp"] == {"spark1": ["22", "8000", "9090", "8888", "9000-9010"],
                            "spark2": ["22", "2200", "2222", "8888", "9000-9010"]}
    assert found["udp"] == ["5353"] and not findings.errors
    # Several without the gateway: each door on its head, no port of the cluster's own opened on the first head for nothing
    found = reach(several, nodes)[0]["tcp"]
    assert found["spark1"] == ["22", "8001"] and found["spark2"] == ["22", "2200", "2222", "8002"]
    found, findings = reach(one, nodes, monitoring={"enabled": True, "listen": "127.0.0.1:9090"},
                            firewall_allow=["80/sctp", "0", "9-8", "x", "10000-10100", "6379", "6379/udp"])
    assert "9090" not in found["tcp"]["spark1"] and found["udp"] == ["6379"]
    assert [e["value"] for e in findings.errors] == ["80/sctp", "0", "9-8", "x", "10000-10100", "6379"]
    assert "vllm_firewall_allow: '80/sctp' is not a port, a range or either with /tcp or /udp" in findings.errors[0]["message"]
    assert "10000-10100 would open Ray's ports 10001-10101 to every host" in findings.errors[4]["message"]
    assert "6379 would open Ray's GCS to every host" in findings.errors[5]["message"]


def test_the_table_is_named_after_the_cluster_and_its_unit_loads_it_before_docker():
    paths = base.node_paths(base.normalize_settings({"cluster_name": "lab-2"}), "spark1", None)
    planned = firewall.plan(base.normalize_settings({"cluster_name": "lab-2"}), "ray", NODES, paths)
    assert planned["table"] == paths["firewall_table"] == "dgx_spark_vllm_lab_2"
    rules, unit = planned["files"]
    assert rules["path"] == "/var/lib/dgx-spark-vllm/lab-2/config/firewall.nft"
    assert unit["path"] == "/etc/systemd/system/dgx-spark-vllm-firewall-lab-2.service"
    assert planned["wants"] == "/etc/systemd/system/multi-user.target.wants/dgx-spark-vllm-firewall-lab-2.service"
    assert "ExecStart=/usr/sbin/nft -f /var/lib/dgx-spark-vllm/lab-2/config/firewall.nft" in unit["content"]
    assert "Before=network-pre.target docker.service" in unit["content"]
    assert "elements = { 192.168.100.10, 192.168.100.11 }" in rules["content"]
    assert planned["opened_tcp"] == ["22"]  # without the planner's reach: SSH alone
    # a ring's link subnets are among the nodes (NCCL's and torch's sockets over the links)
    ringed = firewall.plan(base.normalize_settings({"cluster_name": "lab-2"}), "ray", NODES, paths, links=["192.168.30.0/24"])
    assert ringed["addresses"] == NODES + ["192.168.30.0/24"]
    assert "elements = { 192.168.100.10, 192.168.100.11, 192.168.30.0/24 }" in ringed["files"][0]["content"]


@pytest.fixture(name="netns")
def fixture_netns():
    if NFT is None or subprocess.run(["ip", "netns", "add", "dgx-spark-fw-test"], check=False).returncode != 0:
        pytest.skip("needs nft and a network namespace (root)")
    yield ["ip", "netns", "exec", "dgx-spark-fw-test"]
    subprocess.run(["ip", "netns", "del", "dgx-spark-fw-test"], check=False)


def test_nft_loads_the_ruleset_twice_into_one_table_and_touches_no_other(netns, tmp_path):
    script = tmp_path / "firewall.nft"
    # overlapping elements (a range over an opened port, an address in a ring's link subnet) merge, never refuse to load
    script.write_text(firewall.ruleset("dgx-spark", NODES + ["192.168.100.0/30"], ["22", "8000", "20-30"], ["5353", "60-70"]))
    subprocess.run(netns + ["nft", "add", "table", "ip", "someone_elses"], check=True)
    for dummy in range(2):  # loading again (a re-run, a boot) replaces the table, never adds a second one
        subprocess.run(netns + ["nft", "-f", str(script)], check=True)
    listed = subprocess.run(netns + ["nft", "list", "ruleset"], check=True, capture_output=True, text=True).stdout
    assert listed.count("table inet dgx_spark_vllm_dgx_spark") == 1 and "table ip someone_elses" in listed
    assert "ip saddr @nodes accept" in listed and "meta l4proto tcp reject with tcp reset" in listed
    assert "elements = { 20-30, 8000 }" in listed and "elements = { 60-70, 546, 5353 }" in listed
    assert "ct state invalid drop" in listed


# Listens on every port given, then connects from the other namespace: prints each port's answer.
LISTEN = """
import socket, sys, time
held = []
for port in sys.argv[1:]:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", int(port))); s.listen(); held.append(s)
print("ready", flush=True)
time.sleep(30)
"""
CONNECT = """
import socket, sys
source, address = sys.argv[1], sys.argv[2]
for port in sys.argv[3:]:
    s = socket.socket(); s.settimeout(3); s.bind((source, 0))
    try:
        s.connect((address, int(port))); print(port, "open")
    except ConnectionRefusedError:
        print(port, "refused")
    except OSError as exc:
        print(port, "no answer", exc)
"""


def test_a_host_outside_the_cluster_reaches_only_the_opened_ports_whatever_listens(tmp_path):
    """Two namespaces on a veth pair: the node with the table loaded and listeners on the opened ports, Ray's GCS and a
    port nobody listed (as vLLM's ranks pick); the other side connects from a node's address and from an outsider's."""
    if NFT is None or subprocess.run(["ip", "netns", "add", "dgx-fw-node"], check=False).returncode != 0:
        pytest.skip("needs nft and a network namespace (root)")
    node, other = ["ip", "netns", "exec", "dgx-fw-node"], ["ip", "netns", "exec", "dgx-fw-other"]
    listener = None
    try:
        subprocess.run(["ip", "netns", "add", "dgx-fw-other"], check=True)
        subprocess.run(["ip", "link", "add", "dgx-fw-a", "netns", "dgx-fw-node", "type", "veth", "peer", "name", "dgx-fw-b",
                        "netns", "dgx-fw-other"], check=True)
        for ns, link, addresses in ((node, "dgx-fw-a", ["192.168.100.10/24"]), (other, "dgx-fw-b", ["192.168.100.11/24", "192.168.100.99/24"])):
            for address in addresses:
                subprocess.run(ns + ["ip", "addr", "add", address, "dev", link], check=True)
            subprocess.run(ns + ["ip", "link", "set", link, "up"], check=True)
            subprocess.run(ns + ["ip", "link", "set", "lo", "up"], check=True)
        settings = base.normalize_settings({})
        settings["monitoring"] = {}
        settings["firewall_reach"] = firewall.reach([{"name": "dgx-spark", "head": "spark1"}], settings,
                                                    {"spark1": {"fabric_ip": NODES[0]}, "spark2": {"fabric_ip": NODES[1]}}, base.Findings())
        planned = firewall.plan(settings, "ray", NODES, base.node_paths(settings, "spark1", None), "spark1")
        script = tmp_path / "firewall.nft"
        script.write_text(planned["files"][0]["content"])  # the plan's table for the head, as serve.yml writes it
        subprocess.run(node + ["nft", "-f", str(script)], check=True)
        ports = ["22", "8000", "6379", "43117"]
        listener = subprocess.Popen(node + ["python3", "-c", LISTEN] + ports, stdout=subprocess.PIPE, text=True)
        assert listener.stdout.readline().strip() == "ready"

        def answers(source):
            out = subprocess.run(other + ["python3", "-c", CONNECT, source, "192.168.100.10"] + ports, capture_output=True,
                                 text=True, check=True).stdout
            return dict(line.split(" ", 1) for line in out.splitlines())
        assert answers("192.168.100.11") == dict.fromkeys(ports, "open")  # a node of the cluster
        assert answers("192.168.100.99") == {"22": "open", "8000": "open", "6379": "refused", "43117": "refused"}
    finally:
        if listener:
            listener.kill()
        for ns in ("dgx-fw-node", "dgx-fw-other"):
            subprocess.run(["ip", "netns", "del", ns], check=False)


def test_a_node_without_nft_is_refused_unless_the_firewall_is_off(tmp_path):
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import deployment, profiles  # pylint: disable=import-outside-toplevel
    from helpers import spark_inputs  # pylint: disable=import-outside-toplevel

    profile = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    inputs = spark_inputs(profile, tmp_path)
    inputs["nodes"]["spark2"]["state"] = {firewall.NFT: None}
    found = deployment.plan_deployment(inputs)["errors"]
    assert [(e["host"], e["value"]) for e in found] == [("spark2", "/usr/sbin/nft")]
    assert "install it (sudo apt install nftables), or set vllm_firewall: false" in found[0]["message"]
    inputs["settings"]["firewall"] = False
    plan = deployment.plan_deployment(inputs)
    assert plan["ok"] and plan["nodes"]["spark2"]["firewall"] is None
