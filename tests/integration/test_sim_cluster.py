"""sim.yml with three nodes on networks of their own (beside the default simulated cluster): nodes reached over SSH at
fixed management addresses, each with its own Docker daemon, a Spark's interface names, stand-ins for sysfs,
nvidia-smi and /dev/infiniband; idempotence, a node removed by hand, a taken port, removal that keeps image stores."""

import json
import os
import re
import socket
import subprocess

import docker
import pytest

from runner import run

# The simulator's own scenarios (a third cluster of three nodes, each with an image store of its own: minutes per node
# on a cold machine). Every test of make test drives sim.yml on the default cluster; these run in make test-extended.
pytestmark = [pytest.mark.slow, pytest.mark.extended]

ROOT_DIR = "/var/lib/dgx-spark-sim3"
NODES = {"sim3-head": ("10.211.0.10", 3), "sim3-w1": ("10.211.0.11", 5), "sim3-w2": ("10.211.0.12", 5)}  # fabric IP, GID index


PORT = 8010
KEY = {}  # the controller's key sim.yml makes beside the inventory


def mgmt(fabric_ip):
    return fabric_ip.replace("10.211.", "10.213.")


@pytest.fixture(scope="module", name="inventory")
def fixture_inventory(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sim3")
    hosts = {"spark_cluster": {
        "vars": {"ansible_user": "nvidia", "ansible_ssh_private_key_file": "{{ inventory_dir }}/.secrets/sim_ssh_ed25519"},
        "children": {
            "spark_head": {"hosts": {"sim3-head": {"ansible_host": mgmt(NODES["sim3-head"][0]), "spark_fabric_ip": NODES["sim3-head"][0]}}},
            "spark_workers": {"hosts": {n: {"ansible_host": mgmt(ip), "spark_fabric_ip": ip} for n, (ip, dummy) in NODES.items()
                                        if n != "sim3-head"}}}}}
    (folder / "hosts.yml").write_text(json.dumps(hosts))
    (folder / "group_vars").mkdir()
    (folder / "group_vars" / "all.yml").write_text(json.dumps({
        "ansible_python_interpreter": "/usr/bin/python3", "sim_cluster_root": ROOT_DIR, "sim_cluster_network": "dgx-spark-sim3",
        "sim_cluster_subnet": "10.211.0.0/24", "sim_cluster_mgmt_subnet": "10.213.0.0/24", "sim_cluster_endpoint_port": PORT}))
    KEY["path"] = str(folder / ".secrets" / "sim_ssh_ed25519")
    yield str(folder / "hosts.yml")
    run("sim3-absent-final", ["ansible-playbook", "-i", str(folder / "hosts.yml"), "playbooks/sim.yml", "-e", "sim_state=absent"],
        check=False)


def sim(inventory, *extra, log="sim3", check=True):
    return run(log, ["ansible-playbook", "-i", inventory, "playbooks/sim.yml"] + list(extra), check=check, timeout=1800)


def on_node(inventory, ip, command):
    """A command on a node over SSH, as Ansible reaches it: (rc, output)."""
    proc = subprocess.run(["ssh", "-i", KEY["path"], "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                           "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "nvidia@" + mgmt(ip), command],
                          capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_three_nodes_as_hosts_with_their_own_daemons_and_stand_ins(inventory):
    sim(inventory, log="sim3-up")
    client = docker.from_env()
    assert oct(os.stat(KEY["path"]).st_mode & 0o777) == "0o600"
    for name, (ip, gid_index) in NODES.items():
        assert client.containers.get(name).status == "running"
        rc, out = on_node(inventory, ip, "hostname; ip -o -4 addr show; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; "
                                         "cat /sys/class/infiniband/rocep1s0f1/ports/1/gids/%d; ls /dev/infiniband; "
                                         "docker info --format '{{.Name}} {{.Runtimes.nvidia.Path}}'" % gid_index)
        assert rc == 0, out
        lines = out.splitlines()
        assert lines[0] == name
        assert re.search(r"enP7s7\s+inet %s/24" % re.escape(mgmt(ip)), out) and re.search(r"enp1s0f1np1\s+inet %s/24" % re.escape(ip), out)
        assert "NVIDIA GB10, [N/A]" in lines
        assert any(line.endswith(":%02x%02x:%02x%02x" % tuple(int(x) for x in ip.split("."))) for line in lines)
        assert "uverbs0" in lines and "rdma_cm" in lines
        assert lines[-1] == "%s runc" % name  # the node's own daemon (it carries the node's name), with a Spark's nvidia runtime
    rc, out = on_node(inventory, NODES["sim3-head"][0], "ssh -o BatchMode=yes %s hostname" % NODES["sim3-w2"][0])
    assert (rc, out.strip()) == (0, "sim3-w2")  # node to node over the fabric, host keys known
    head = client.containers.get("sim3-head")
    assert head.attrs["HostConfig"]["PortBindings"]["8000/tcp"][0]["HostPort"] == str(PORT)


def test_second_run_changes_nothing(inventory):
    os.unlink(os.path.join(ROOT_DIR, "nodes", "stamp.json"))  # without the record of the last run, every step is checked
    rc, out = sim(inventory, log="sim3-again")
    assert "changed=0" in out.split("PLAY RECAP")[-1] and "Make the folders of sim3-w2" in out
    rc, out = sim(inventory, log="sim3-standing")  # with it, only the traps run
    assert "changed=0" in out.split("PLAY RECAP")[-1] and "Make the folders of sim3-w2" not in out


def test_a_key_gone_with_the_nodes_up_is_made_again(inventory):
    os.unlink(KEY["path"])  # a clean clone of the checkout while the nodes run
    sim(inventory, log="sim3-key-again")
    assert os.path.isfile(KEY["path"]) and on_node(inventory, NODES["sim3-w1"][0], "true")[0] == 0


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
    assert not client.networks.list(names=["dgx-spark-sim3"]) and not client.networks.list(names=["dgx-spark-sim3-mgmt"])
    assert not os.path.exists(os.path.join(ROOT_DIR, "nodes"))
    assert subprocess.run(["pgrep", "-f", "dockerd --data-root %s/stores/" % ROOT_DIR], check=False).returncode == 1  # daemons stopped
    assert os.path.isdir(os.path.join(ROOT_DIR, "stores", "sim3-head"))  # each node's image store is kept
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
