"""node_probe: what a node's probe reads, fed with captured Docker output through a fake runner."""

import json

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_probe
from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import command

from helpers import read_fixture


def runner(answers):
    """A run() that answers each argv (matched by its first words) with (rc, stdout, stderr)."""
    calls = []

    def run(argv):
        calls.append(argv)
        for prefix, answer in answers:
            if argv[:len(prefix)] == prefix:
                return answer
        return 1, "", "unexpected %s" % argv

    run.calls = calls
    return run


def test_the_liveness_check_of_a_state_file_on_the_node_starts_with_the_probe_batch(tmp_path):
    """A state file on the node names the group before the read starts: its check is started with the other commands
    (node_read.up_front), and serving() is answered from there, not after them."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_read
    held = tmp_path / "vllm.json"
    held.write_text(json.dumps({"pgid": 300, "config_hash": "88d591a8ea1107ef"}))
    spec = {"serve_container": "c", "serve_state_file_host": str(held)}
    alive = ["docker", "exec", "c", "kill", "-0", "--", "-300"]
    assert alive in node_read.up_front({"chat": spec}, "docker", None)
    run = runner([(alive, (0, "", ""))])
    assert node_probe.serving(run, "c", "/dgx-spark/run/vllm.json", host_file=str(held))["running"] is True
    assert run.calls == [alive]  # the file was read on the node, not through an exec
    assert node_probe.serving_argvs("c", "docker", str(tmp_path / "absent.json")) == []  # none held: serving() asks inside


def test_docker_info_gives_version_and_runtimes():
    run = runner([(["docker", "info"], (0, read_fixture("docker", "info-sim.json"), ""))])
    assert node_probe.docker_info(run) == {"version": "20.10.24+dfsg1", "root_dir": "/var/lib/docker",
                                           "runtimes": ["io.containerd.runc.v2", "io.containerd.runtime.v1.linux", "runc"]}


def test_free_space_reads_the_nearest_existing_folder(tmp_path):
    found = node_probe.free_space([str(tmp_path / "dgx-spark" / "logs"), str(tmp_path)])
    assert found[str(tmp_path / "dgx-spark" / "logs")]["at"] == str(tmp_path)  # not made yet: its parent's filesystem
    assert found[str(tmp_path)]["free_bytes"] > 0


def test_no_daemon_is_none():
    run = runner([(["docker", "info"], (1, "", "Cannot connect to the Docker daemon"))])
    assert node_probe.docker_info(run) is None


def test_container_env_reads_each_named_container():
    run = runner([(["docker", "container", "inspect"], (0, read_fixture("docker", "inspect-env-sim.txt"), ""))])
    envs = node_probe.container_env(run, ["dgx-spark-ray-sim-head", "dgx-spark-ray-sim-worker1"])
    assert sorted(envs) == ["dgx-spark-ray-sim-head", "dgx-spark-ray-sim-worker1"]
    assert "VLLM_HOST_IP=10.210.0.10" in envs["dgx-spark-ray-sim-head"]
    assert "VLLM_HOST_IP=10.210.0.11" in envs["dgx-spark-ray-sim-worker1"]
    assert node_probe.container_env(run, []) == {}


def test_serving_reads_the_state_file_and_asks_whether_the_group_lives():
    state = json.dumps({"pgid": 300, "config_hash": "88d591a8ea1107ef", "argv": ["vllm"], "started_at": 1.0})
    alive = runner([(["docker", "exec", "c", "cat"], (0, state, "")), (["docker", "exec", "c", "kill"], (0, "", ""))])
    expected = {"running": True, "config_hash": "88d591a8ea1107ef", "pgid": 300}
    assert node_probe.serving(alive, "c", "/dgx-spark/run/vllm.json") == expected
    dead = runner([(["docker", "exec", "c", "cat"], (0, state, "")), (["docker", "exec", "c", "kill"], (1, "", "No such process"))])
    assert node_probe.serving(dead, "c", "/dgx-spark/run/vllm.json")["running"] is False
    none = runner([(["docker", "exec", "c", "cat"], (1, "", "No such file"))])
    assert node_probe.serving(none, "c", "/dgx-spark/run/vllm.json") == {"running": False, "config_hash": None, "pgid": None}


def test_image_is_read_once_per_id(tmp_path):
    info = read_fixture("image_info", "vllm-cpu-0.32.0.json")
    run = runner([(["docker", "run"], (0, json.dumps(json.loads(info)), ""))])
    first = node_probe.image(run, "img", "sha256:abc", cache_dir=str(tmp_path))
    again = node_probe.image(run, "img", "sha256:abc", cache_dir=str(tmp_path))
    assert (first["cached"], again["cached"]) == (False, True)
    assert len(run.calls) == 1 and first["version"] == again["version"]


def test_model_config_and_weights_from_the_hub_cache(tmp_path):
    snapshot = tmp_path / "huggingface" / "hub" / "models--org--m" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (tmp_path / "huggingface" / "hub" / "models--org--m" / "refs").mkdir()
    (tmp_path / "huggingface" / "hub" / "models--org--m" / "refs" / "main").write_text("a" * 40)
    (snapshot / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    (snapshot / "model-00001.safetensors").write_bytes(b"x" * 100)
    (snapshot / "model-00002.safetensors").write_bytes(b"x" * 50)
    config, weights = node_probe.model(str(tmp_path), "org/m")
    assert config == {"num_hidden_layers": 2} and weights == 150
    assert node_probe.model(str(tmp_path), "org/other") == (None, None)


def test_ray_fact_from_the_captured_driver_answer_and_from_a_stopped_container():
    fact = node_probe.ray(0, read_fixture("ray", "sim-two-nodes.json"), "", "dgx-spark-ray-sim-head")
    assert fact["alive_ips"] == ["10.210.0.10", "10.210.0.11"] and fact["gpu_total"] == 2.0
    gone = node_probe.ray(1, "", "Error response from daemon: No such container: dgx-spark-ray-sim-head", "dgx-spark-ray-sim-head")
    assert "container dgx-spark-ray-sim-head does not exist" in gone["error"]
    assert node_probe.ray_argv("c")[:3] == ["docker", "exec", "c"]


def test_devices_lists_the_device_nodes_of_each_path(tmp_path):
    folder = tmp_path / "infiniband"
    folder.mkdir()
    (folder / "not-a-device").write_text("")
    empty = node_probe.devices([str(folder), str(tmp_path / "absent")])
    assert empty == {str(folder): [], str(tmp_path / "absent"): None}
    assert node_probe.devices(["/dev/null"]) == {"/dev/null": ["null"]}


def test_addresses_are_the_nodes_ipv4_addresses():
    captured = read_fixture("ip", "machine-with-bridges.json")  # `ip -j -4 addr show` on a machine with Docker bridges
    run = runner([(["ip", "-j", "-4", "addr", "show"], (0, captured, ""))])
    found = node_probe.interfaces(run)
    assert node_probe.addresses(found) == ["10.209.0.1", "10.210.0.1", "127.0.0.1", "172.17.0.1", "192.0.2.2"]
    assert found["lo"] == ["127.0.0.1/8"]
    assert node_probe.interfaces(runner([])) is None and node_probe.addresses(None) is None  # no ip: unknown, not "none"
    owner = [name for name, cidrs in found.items() if any(c.startswith("10.209.0.1/") for c in cidrs)][0]
    assert node_probe.connection_interface(found, "10.209.0.99 51234 10.209.0.1 22") == owner  # SSH_CONNECTION's server address
    assert node_probe.connection_interface(found, None) is None  # a local connection


def test_resolve_uses_the_nodes_resolver():
    assert node_probe.resolve("127.0.0.1") == ["127.0.0.1"]
    assert node_probe.resolve("name.that.does.not.resolve.invalid") == []


def test_records_are_read_as_json_and_a_missing_or_broken_one_is_none(tmp_path):
    good, broken = tmp_path / "last-known-good.json", tmp_path / "broken.json"
    good.write_text('{"image_id": "sha256:ab", "kept_images": []}\n')
    broken.write_text('{"image_id": ')
    assert node_probe.records([str(good), str(broken), str(tmp_path / "absent.json")]) == {
        str(good): {"image_id": "sha256:ab", "kept_images": []}, str(broken): None, str(tmp_path / "absent.json"): None}


def test_a_record_behind_a_link_or_not_a_file_is_not_read(tmp_path):
    real = tmp_path / "real.json"
    real.write_text('{"image_id": "sha256:ab"}')
    (tmp_path / "link.json").symlink_to(real)
    (tmp_path / "folder.json").mkdir()
    found = node_probe.records([str(tmp_path / "link.json"), str(tmp_path / "folder.json"), "/dev/zero"])
    assert found == {str(tmp_path / "link.json"): None, str(tmp_path / "folder.json"): None, "/dev/zero": None}


def test_two_deployments_on_a_node_share_one_listing_of_kept_tags_and_one_inspect():
    """A second deployment on a node adds no Docker listing of its own: one ``image ls`` names every deployment's kept
    tags (Docker ORs the filters) and one inspect reads every container; each deployment takes back its own."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import records
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_read
    specs = {name: {"kept_reference": records.kept_reference("dgx-spark-" + name), "containers": ["dgx-spark-%s-ray-sim-head" % name],
                    "image": "dgx-spark-sim/runtime:sim"} for name in ("chat", "coder")}
    argvs = node_read.up_front(specs, "docker", None)
    listings = [a for a in argvs if a[1:3] == ["image", "ls"]]
    inspects = [a for a in argvs if a[1:3] == ["container", "inspect"]]
    assert len(listings) == 1 and listings[0].count("--filter") == 2
    assert len(inspects) == 1 and inspects[0][-2:] == ["dgx-spark-chat-ray-sim-head", "dgx-spark-coder-ray-sim-head"]
    listed = ["dgx-spark-vllm-kept:dgx-spark-chat-0e535157a2c2", "dgx-spark-vllm-kept:dgx-spark-coder-0e535157a2c2"]
    assert node_read.kept(listed, specs["coder"]["kept_reference"]) == ["dgx-spark-vllm-kept:dgx-spark-coder-0e535157a2c2"]


def test_the_head_reads_the_front_doors_image_with_the_rest():
    """The front door's image is asked with the other commands (its inspect in the batch), so the plan knows whether the
    apply must build it and the apply asks Docker nothing about it."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_read
    specs = {"chat": {"image": "dgx-spark-sim/runtime:sim", "door_image": "dgx-spark-vllm/door:1"}}
    argvs = node_read.up_front(specs, "docker", None)
    assert node_read.image_id_argv("docker", "dgx-spark-vllm/door:1") in argvs
    assert node_read.image_id_argv("docker", "dgx-spark-sim/runtime:sim") in argvs
    there = runner([(node_read.image_id_argv("docker", "dgx-spark-vllm/door:1"), (0, "sha256:7d3f\n", ""))])
    assert node_probe.image_id(there, "dgx-spark-vllm/door:1") == "sha256:7d3f"
    missing = runner([])  # Docker: "No such image"
    assert node_probe.image_id(missing, "dgx-spark-vllm/door:1") is None


def fake_process(proc, pid, ppid, environ):
    folder = proc / str(pid)
    folder.mkdir()
    (folder / "environ").write_bytes(b"\0".join(b"%s=%s" % (k.encode(), v.encode()) for k, v in environ.items()) + b"\0")
    (folder / "stat").write_text("%d (s h) S %d %d 0 0" % (pid, ppid, pid))


def test_the_ssh_session_is_read_from_the_shell_sshd_started_when_sudo_dropped_it(tmp_path):
    """A non-root SSH user's become: sshd -> the user's shell (SSH_CONNECTION set) -> sudo -> sh -> the module, whose
    environment sudo reset. The chain is a captured one's shape: a comm with a space and a parenthesis in it."""
    session = "10.209.0.1 51234 10.209.0.10 22"
    fake_process(tmp_path, 40, 1, {"PATH": "/usr/sbin"})  # sshd's
    fake_process(tmp_path, 41, 40, {"USER": "nvidia", "SSH_CONNECTION": session})
    fake_process(tmp_path, 42, 41, {"SUDO_USER": "nvidia"})  # sudo keeps none of it
    fake_process(tmp_path, 43, 42, {"SUDO_USER": "nvidia"})
    assert command.ssh_session({"SUDO_USER": "nvidia"}, start=43, proc=str(tmp_path)) == session
    assert command.ssh_session({"SSH_CONNECTION": "10.0.0.9 1 10.0.0.1 2222"}, start=43, proc=str(tmp_path)) == "10.0.0.9 1 10.0.0.1 2222"
    assert command.ssh_session({}, start=40, proc=str(tmp_path)) is None  # a local connection: no ancestor has one
    assert command.ssh_session({}, start=99, proc=str(tmp_path)) is None  # a process gone meanwhile
