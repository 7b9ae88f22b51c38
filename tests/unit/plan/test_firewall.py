"""firewall: the nftables table that lets only the cluster's nodes reach Ray's ports, checked by nft itself."""

import os
import shutil
import subprocess

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import base, firewall

from helpers import ROOT

NODES = ["192.168.100.10", "192.168.100.11"]
NFT = shutil.which("nft")


def test_every_port_ray_opens_is_pinned_and_guarded():
    head = firewall.ray_port_flags(True)
    worker = firewall.ray_port_flags(False)
    assert head[-2:] == ["--ray-client-server-port", "10001"] and "--ray-client-server-port" not in worker
    pinned = {int(v) for v in head[1::2]} | {6379}
    ports = firewall.guarded_ports("ray", 6379, 29501)
    assert ports == ["6379", "6800-6805", "10001-10101"]
    ranges = [tuple(int(x) for x in p.split("-")) if "-" in p else (int(p), int(p)) for p in ports]
    assert all(any(low <= port <= high for low, high in ranges) for port in pinned)  # none left out
    assert firewall.guarded_ports("mp", 6379, 29501) == ["29501"]  # the torch rendezvous of vLLM's own launcher


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


@pytest.fixture(name="netns")
def fixture_netns():
    if NFT is None or subprocess.run(["ip", "netns", "add", "dgx-spark-fw-test"], check=False).returncode != 0:
        pytest.skip("needs nft and a network namespace (root)")
    yield ["ip", "netns", "exec", "dgx-spark-fw-test"]
    subprocess.run(["ip", "netns", "del", "dgx-spark-fw-test"], check=False)


def test_nft_loads_the_ruleset_twice_into_one_table_and_touches_no_other(netns, tmp_path):
    script = tmp_path / "firewall.nft"
    script.write_text(firewall.ruleset("dgx-spark", NODES, firewall.guarded_ports("ray", 6379, 29501)))
    subprocess.run(netns + ["nft", "add", "table", "ip", "someone_elses"], check=True)
    for dummy in range(2):  # loading again (a re-run, a boot) replaces the table, never adds a second one
        subprocess.run(netns + ["nft", "-f", str(script)], check=True)
    listed = subprocess.run(netns + ["nft", "list", "ruleset"], check=True, capture_output=True, text=True).stdout
    assert listed.count("table inet dgx_spark_vllm_dgx_spark") == 1 and "table ip someone_elses" in listed
    assert "tcp dport @ports ip saddr @nodes accept" in listed and "tcp dport @ports reject with tcp reset" in listed
    assert "6800-6805" in listed and "10001-10101" in listed and "6379" in listed


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
