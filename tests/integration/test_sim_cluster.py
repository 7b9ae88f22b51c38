"""sim.yml with three nodes on a network of their own (beside the default simulated cluster): nodes with
fixed addresses, fake sysfs and nvidia-smi, idempotence, a node removed by hand, a taken port, removal."""

import json
import os
import socket
import subprocess

import docker
import pytest

from runner import run

pytestmark = pytest.mark.slow

ROOT_DIR = "/var/lib/dgx-spark-sim3"
NODES = {"sim3-head": ("10.211.0.10", 3), "sim3-w1": ("10.211.0.11", 5), "sim3-w2": ("10.211.0.12", 5)}
PORT = 8010


@pytest.fixture(scope="module", name="inventory")
def fixture_inventory(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sim3")
    hosts = {"spark_cluster": {"children": {
        "spark_head": {"hosts": {"sim3-head": {"ansible_host": "sim3-head", "spark_fabric_ip": NODES["sim3-head"][0]}}},
        "spark_workers": {"hosts": {n: {"ansible_host": n, "spark_fabric_ip": ip} for n, (ip, dummy) in NODES.items() if n != "sim3-head"}},
    }}}
    (folder / "hosts.yml").write_text(json.dumps(hosts))
    (folder / "group_vars").mkdir()
    (folder / "group_vars" / "all.yml").write_text(json.dumps({
        "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3",
        "sim_cluster_root": ROOT_DIR, "sim_cluster_network": "dgx-spark-sim3", "sim_cluster_subnet": "10.211.0.0/24",
        "sim_cluster_gateway": "10.211.0.1", "sim_cluster_endpoint_port": PORT}))
    yield str(folder / "hosts.yml")
    run("sim3-absent-final", ["ansible-playbook", "-i", str(folder / "hosts.yml"), "playbooks/sim.yml", "-e", "sim_state=absent"],
        check=False)


def sim(inventory, *extra, log="sim3", check=True):
    return run(log, ["ansible-playbook", "-i", inventory, "playbooks/sim.yml"] + list(extra), check=check, timeout=1800)


def test_three_nodes_with_their_fakes(inventory):
    sim(inventory, log="sim3-up")
    client = docker.from_env()
    for name, (ip, gid_index) in NODES.items():
        node = client.containers.get(name)
        assert node.status == "running"
        assert node.attrs["NetworkSettings"]["Networks"]["dgx-spark-sim3"]["IPAMConfig"]["IPv4Address"] == ip
        smi = node.exec_run(["%s/nodes/%s/bin/nvidia-smi" % (ROOT_DIR, name), "--query-gpu=name,memory.total",
                             "--format=csv,noheader"]).output.decode()
        assert smi.strip() == "NVIDIA GB10, [N/A]"
        gid = node.exec_run(["cat", "%s/nodes/%s/sys/class/infiniband/rocep1s0f1/ports/1/gids/%d" % (ROOT_DIR, name, gid_index)])
        assert gid.output.decode().strip().endswith(":%02x%02x:%02x%02x" % tuple(int(x) for x in ip.split(".")))
        assert node.exec_run(["docker", "version", "--format", "{{.Server.Version}}"]).exit_code == 0
    head = client.containers.get("sim3-head")
    assert head.attrs["HostConfig"]["PortBindings"]["8000/tcp"][0]["HostPort"] == str(PORT)


def test_second_run_changes_nothing(inventory):
    rc, out = sim(inventory, log="sim3-again")
    assert "changed=0" in out.split("PLAY RECAP")[-1]


def test_node_removed_by_hand_is_recreated(inventory):
    client = docker.from_env()
    client.containers.get("sim3-w2").remove(force=True)
    sim(inventory, log="sim3-recreate")
    assert client.containers.get("sim3-w2").status == "running"


def test_taken_endpoint_port_is_refused_before_anything_is_made(inventory):
    sim(inventory, "-e", "sim_state=absent", log="sim3-absent")
    client = docker.from_env()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", PORT))
        taken.listen()
        rc, out = sim(inventory, log="sim3-port", check=False)
    assert rc != 0
    assert "Port %d on 127.0.0.1 is taken by another program" % PORT in out
    assert [c.name for c in client.containers.list(all=True) if c.name.startswith("sim3-")] == []


def test_absent_removes_nodes_network_and_folders(inventory):
    sim(inventory, log="sim3-up-again")
    sim(inventory, "-e", "sim_state=absent", log="sim3-absent-again")
    client = docker.from_env()
    assert [c.name for c in client.containers.list(all=True) if c.name.startswith("sim3-")] == []
    assert not client.networks.list(names=["dgx-spark-sim3"])
    assert not os.path.exists(os.path.join(ROOT_DIR, "nodes"))
    assert subprocess.run(["docker", "image", "inspect", "dgx-spark-sim/runtime:sim"], capture_output=True, check=False).returncode == 0


def test_no_docker_daemon_says_how_to_start_one(inventory):
    rc, out = run("sim3-no-daemon", ["ansible-playbook", "-i", inventory, "playbooks/sim.yml"], check=False,
                  env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert rc != 0
    assert "No Docker daemon answers on this machine" in out and "make setup" in out


def test_too_little_disk_is_refused_with_the_numbers(inventory):
    rc, out = sim(inventory, "-e", "sim_cluster_min_free_gb=100000", log="sim3-disk", check=False)
    assert rc != 0
    assert "GB free; the simulated cluster needs 100000 GB to run" in out
    assert not docker.from_env().networks.list(names=["dgx-spark-sim3"])
