"""plan_nodes: the planner's checks of what each node's probe found, fed with captured docker ps and ss output."""

import json

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import nodes as plan_nodes
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import Findings, normalize_settings

from helpers import memory_facts, read_fixture

PS = read_fixture("docker", "ps-all-sim.jsonl").splitlines()
SS = read_fixture("ss", "sim-head-serving.txt").splitlines()
HEAD_RAY = "dgx-spark-ray-sim-head"


def probed(**extra):
    facts = {"docker": {"version": "26.1.5", "runtimes": ["io.containerd.runc.v2", "runc"]}, "memory": memory_facts("gb10-idle.txt"),
             "docker_ps": PS, "listening": SS}
    facts.update(extra)
    return facts


def messages(findings):
    return [e["message"] for e in findings.errors]


def test_docker_ps_capture_parses_names_states_and_labels():
    found = {c["name"]: c for c in plan_nodes.parse_docker_ps(PS)}
    assert found[HEAD_RAY]["state"] == "running"
    assert found[HEAD_RAY]["labels"]["dgx_spark.vllm.node"] == "sim-head"
    assert found[HEAD_RAY]["labels"]["dgx_spark.vllm.config_hash"]
    assert "sim-worker1" in found  # the simulated nodes share the daemon: every container is listed


def test_listening_capture_gives_the_ports():
    ports = plan_nodes.parse_listening(SS)
    assert {6379, 8000} <= set(ports)


def test_ports_held_by_our_running_containers_pass():
    findings = Findings()
    plan_nodes.check_node("sim-head", probed(), normalize_settings({"simulated": True}), [HEAD_RAY], [6379, 8000], findings)
    assert findings.errors == []


def test_ports_held_when_none_of_ours_runs_are_refused_with_the_port():
    findings = Findings()
    others = [line for line in PS if "dgx_spark.vllm.node=sim-head" not in line]
    plan_nodes.check_node("sim-head", probed(docker_ps=others), normalize_settings({"simulated": True, "port": 9000}),
                          [HEAD_RAY], [6379, 8000], findings)
    assert messages(findings) == ["sim-head: port(s) 6379, 8000 are held by a program this collection did not start (none of its "
                                  "containers runs here). Stop it (ss -ltnp shows which), or choose other ports (vllm_port), then "
                                  "run again"]


def test_ports_held_while_another_cluster_of_ours_runs_are_refused_naming_it():
    """Another inventory's cluster on the same nodes (the sim-models inventory's chat deployment on the sim inventory's
    Ray port): its containers are ours, but not this cluster's; the launch would fail half-way (Ray's head exits)."""
    findings = Findings()
    theirs = [line.replace("dgx_spark.vllm.cluster=dgx-spark,", "dgx_spark.vllm.cluster=dgx-spark-chat,") for line in PS]
    plan_nodes.check_node("sim-head", probed(docker_ps=theirs), normalize_settings({"simulated": True}), [HEAD_RAY], [6379, 8000],
                          findings)
    assert messages(findings) == ["sim-head: port(s) 6379, 8000 are taken while another deployment of this collection runs "
                                  "here (dgx-spark-chat). Tear it down (playbooks/teardown.yml with the inventory that serves "
                                  "it), then run again; to serve both on these nodes, list them in one inventory's "
                                  "vllm_deployments, which gives each its own ports"]


def test_a_container_with_our_name_without_our_label_is_refused():
    findings = Findings()
    impostor = PS[0].replace("dgx_spark.vllm.managed=true", "made.by=hand")
    plan_nodes.check_node("sim-worker1", probed(docker_ps=[impostor]), normalize_settings({"simulated": True}),
                          ["dgx-spark-ray-sim-worker1"], [], findings)
    assert "container(s) dgx-spark-ray-sim-worker1 use this collection's names but were not made by it" in messages(findings)[0]


@pytest.mark.parametrize("change,expected", [
    ({"docker": None}, "no Docker daemon answers"),
    ({"memory": dict(memory_facts("gb10-idle.txt"), unaccounted_bytes=20 * 1024 ** 3)}, "holds 20.0 GiB that no process"),
    ({"memory": dict(memory_facts("gb10-idle.txt"), vllm_processes=[{"pid": 4242, "orphan": True}])}, "outlived their server"),
])
def test_node_state_that_would_fail_is_refused_naming_the_node(change, expected):
    findings = Findings()
    plan_nodes.check_node("spark2", probed(**change), normalize_settings({"simulated": True}), [], [], findings)
    assert len(findings.errors) == 1 and findings.errors[0]["host"] == "spark2"
    assert expected in findings.errors[0]["message"] and findings.errors[0]["message"].startswith("spark2")


def test_a_spark_without_the_nvidia_runtime_is_refused_the_simulation_is_not():
    spark, sim = Findings(), Findings()
    plan_nodes.check_node("spark1", probed(), normalize_settings({"simulated": False}), [], [], spark)
    plan_nodes.check_node("spark1", probed(), normalize_settings({"simulated": True}), [], [], sim)
    assert messages(spark) == ["spark1: Docker has no nvidia runtime (it has io.containerd.runc.v2, runc); install "
                               "nvidia-container-toolkit and run nvidia-ctk runtime configure --runtime=docker, then restart Docker"]
    assert sim.errors == []


def test_unbalanced_free_memory_is_refused_with_each_node():
    low = dict(memory_facts("gb10-idle.txt"))
    low["mem_available_bytes"] -= 10 * 1024 ** 3
    findings = Findings()
    plan_nodes.check_balance(["a", "b"], {"a": probed(), "b": probed(memory=low)}, normalize_settings({}), findings)
    assert "free memory is unbalanced across nodes (a 117.3 GiB, b 107.3 GiB)" in messages(findings)[0]


def test_nodes_lacking_the_heads_image_id_or_holding_another_get_the_heads():
    findings = Findings()
    nodes = {"a": probed(image_id="sha256:" + "1" * 64), "b": probed(image_id="sha256:" + "2" * 64), "c": probed(image_id=None),
             "d": probed(image_id="sha256:" + "1" * 64)}
    assert plan_nodes.check_images(["a", "b", "c", "d"], nodes, findings) == ["b", "c"]
    assert findings.errors == []


def test_container_change_follows_the_config_hash_and_the_state():
    spec = {"name": HEAD_RAY, "labels": {"dgx_spark.vllm.config_hash": "x"}}
    running = {"name": HEAD_RAY, "state": "running", "labels": {"dgx_spark.vllm.config_hash": "x"}}
    assert plan_nodes.container_change(spec, []) == "create"
    assert plan_nodes.container_change(spec, [running]) == "none"
    assert plan_nodes.container_change(spec, [dict(running, state="exited")]) == "start"
    assert plan_nodes.container_change(spec, [dict(running, labels={"dgx_spark.vllm.config_hash": "y"})]) == "recreate"


def test_head_and_worker_ports():
    settings = normalize_settings({"port": 9000})
    assert plan_nodes.node_ports(settings, "ray", True) == [6379, 9000]
    assert plan_nodes.node_ports(settings, "mp", True) == [9000, 29501]
    assert plan_nodes.node_ports(settings, "ray", False) == []


def test_a_head_without_the_image_is_refused_unless_the_image_role_builds_it():
    nodes = {"h": probed(image_id=None), "w": probed(image_id=None)}
    refused, built = Findings(), Findings()
    assert plan_nodes.check_images(["h", "w"], nodes, refused, "img:missing") == ["h", "w"]
    assert messages(refused) == ["The head h does not hold img:missing; pull or load it there, set image_source: pull to pull it on "
                                 "every node, or set image_build with image_base to build it"]
    plan_nodes.check_images(["h", "w"], nodes, built, "img:missing", build=True)
    assert built.errors == []


def test_with_pull_a_node_lacking_the_image_is_planned_and_one_holding_another_is_refused():
    pulled = Findings()  # a check run: the pulls before the probe were only said, so both still lack it
    assert plan_nodes.check_images(["h", "w"], {"h": probed(image_id=None), "w": probed(image_id=None)}, pulled, "r:5000/img:1",
                                   source="pull") == ["h", "w"]
    assert pulled.errors == []
    other = Findings()
    plan_nodes.check_images(["h", "w"], {"h": probed(image_id="sha256:" + "a" * 64), "w": probed(image_id="sha256:" + "b" * 64)},
                            other, "r:5000/img:1", source="pull")
    assert messages(other) == ["w holds another image under the plan's name than the head h (sha256:bbbbbbbbbbbb, the head's "
                               "sha256:aaaaaaaaaaaa), and image_source: pull fetches only what a node lacks. Pull it again on each "
                               "node (docker pull), or remove it where it is older (docker image rm), then run again"]


def test_a_node_the_probe_did_not_read_is_named_and_nothing_is_guessed():
    findings = Findings()
    assert plan_nodes.check_probed(["sim-head", "sim-worker1"], {"sim-head": probed(), "sim-worker1": {"fabric_ip": "10.210.0.11"}},
                                   normalize_settings({}), findings) is True
    assert messages(findings) == ["sim-worker1 was not probed: it was unreachable, its probe failed, or the probe stopped at another "
                                  "node's failure (see above). Make every node reachable (ssh to its ansible_host), then run again; "
                                  "nothing was changed"]
    offline = Findings()
    assert plan_nodes.check_probed(["sim-head"], {"sim-head": {}}, normalize_settings({"offline": True}), offline) is False


def test_a_node_whose_rdma_devices_are_missing_or_empty_is_refused_naming_what_the_others_hold():
    held = ["rdma_cm", "uverbs0", "uverbs1"]
    nodes = {"spark1": probed(devices={"/dev/infiniband": held}), "spark2": probed(devices={"/dev/infiniband": []}),
             "spark3": probed(devices={"/dev/infiniband": None})}
    findings = Findings()
    plan_nodes.check_devices(["spark1", "spark2", "spark3"], nodes, ["/dev/infiniband"], findings)
    assert [e["host"] for e in findings.errors] == ["spark2", "spark3"]
    assert messages(findings)[0].startswith("spark2: /dev/infiniband holds no device, so its container would get no RDMA device "
                                            "and NCCL would fall back to sockets on this node alone (spark1 hold rdma_cm, uverbs0, uverbs1)")
    assert "spark3: /dev/infiniband is missing" in messages(findings)[1]
    assert "remove /dev/infiniband from spark_container_devices on every node" in messages(findings)[1]
    findings = Findings()
    plan_nodes.check_devices(["spark1", "spark2"], {"spark1": nodes["spark1"], "spark2": probed(devices={"/dev/infiniband": held})},
                             ["/dev/infiniband"], findings)
    assert findings.errors == []


def test_a_rank_of_this_cluster_counts_as_free_memory_for_the_balance():
    """A worker whose rank outlived a dead head holds its pool: the plan restarts that worker, so it is not unbalanced;
    the same memory held by something else is."""
    held = dict(memory_facts("gb10-idle.txt"))
    held["mem_available_bytes"] -= 36 * 1024 ** 3
    held["gpu_process_bytes"] = 36 * 1024 ** 3
    ours = json.dumps({"Names": "dgx-spark-ray-b", "State": "running",
                       "Labels": "dgx_spark.vllm.managed=true,dgx_spark.vllm.cluster=dgx-spark,dgx_spark.vllm.node=b,"
                                 "dgx_spark.vllm.config_hash=h"})
    findings = Findings()
    plan_nodes.check_balance(["a", "b"], {"a": probed(docker_ps=[]), "b": probed(memory=held, docker_ps=[ours])},
                             normalize_settings({}), findings)
    assert findings.errors == []
    plan_nodes.check_balance(["a", "b"], {"a": probed(docker_ps=[]), "b": probed(memory=held, docker_ps=[])},
                             normalize_settings({}), findings)
    assert "free memory is unbalanced across nodes (a 117.3 GiB, b 81.3 GiB)" in messages(findings)[0]


def test_a_full_disk_is_refused_naming_the_node_the_folders_and_the_reserve():
    findings = Findings()
    disk = {"/var/lib/dgx-spark-vllm/dgx-spark": {"at": "/var/lib/dgx-spark-vllm/dgx-spark", "free_bytes": 0},
            "/var/lib/docker": {"at": "/var/lib/docker", "free_bytes": 900 * 10 ** 9}}
    plan_nodes.check_node("spark1", probed(disk=disk), normalize_settings({"simulated": True}), [], [], findings)
    assert messages(findings) == [
        "spark1: the filesystem of /var/lib/dgx-spark-vllm/dgx-spark has 0 B free, and a launch needs 2.0 GB there (vLLM's log "
        "and run files; on Docker's data root, Ray's session files and compile caches). Free space on it (docker system prune "
        "for Docker's), or lower vllm_launch_disk_reserve_gb, then run again"]
    lowered = Findings()
    plan_nodes.check_node("spark1", probed(disk=disk), normalize_settings({"simulated": True, "launch_disk_reserve_gb": 0}),
                          [], [], lowered)
    assert messages(lowered) == []
