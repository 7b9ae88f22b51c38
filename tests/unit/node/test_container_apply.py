"""container_apply: a planned container spec -> community.docker.docker_container's arguments."""

import os

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import container_apply
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import deployment, profiles

from helpers import ROOT, spark_inputs

PROFILES = os.path.join(ROOT, "profiles")


@pytest.fixture(name="spec")
def fixture_spec(tmp_path):
    profile = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [PROFILES]))
    return deployment.plan_deployment(spark_inputs(profile, tmp_path))["nodes"]["spark2"]["containers"][0]


def test_every_rdma_option_of_the_spec_reaches_docker(spec):
    args = container_apply.docker_container_args(spec, "create")
    assert args["devices"] == ["/dev/infiniband:/dev/infiniband"]
    assert args["capabilities"] == ["IPC_LOCK"] and args["ulimits"] == ["memlock:-1:-1", "stack:67108864:67108864"]
    assert (args["network_mode"], args["ipc_mode"]) == ("host", "host")
    assert args["device_requests"] == [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
    assert args["env"] == spec["env"] and args["command"] == spec["command"] and args["labels"] == spec["labels"]
    assert args["restart_policy"] == "no" and args["init"] is True and "restart" not in args


def test_only_the_image_and_the_labels_are_compared(spec):
    args = container_apply.docker_container_args(spec, "recreate")
    assert args["comparisons"] == {"*": "ignore", "image": "strict", "labels": "allow_more_present"}
    assert args["container_default_behavior"] == "no_defaults"


def test_a_worker_whose_head_was_replaced_is_restarted(spec):
    assert container_apply.docker_container_args(spec, "restart")["restart"] is True


def test_the_simulated_cluster_has_no_gpu_and_no_devices(spec):
    args = container_apply.docker_container_args(dict(spec, gpus=None, devices=[], shm_size="2g"), "create")
    assert "device_requests" not in args and "devices" not in args and args["shm_size"] == "2g"


def test_an_unknown_change_is_refused(spec):
    with pytest.raises(ValueError, match="change must be one of none, create, start, recreate, restart, remove, got 'rebuild'"):
        container_apply.docker_container_args(spec, "rebuild")


def test_a_shared_container_off_is_removed_by_name_and_one_without_ipc_or_env_is_applied():
    assert container_apply.docker_container_args({"name": "dgx-spark-gateway"}, "remove") == {
        "name": "dgx-spark-gateway", "state": "absent"}
    prometheus = {"name": "dgx-spark-prometheus", "image": "prom/prometheus:v2.53.4", "network_mode": "host",
                  "command": ["--config.file=/etc/prometheus/prometheus.yml"], "volumes": ["/s/config:/etc/prometheus:ro"],
                  "restart_policy": "unless-stopped", "labels": {"dgx_spark.vllm.managed": "true"}}
    args = container_apply.docker_container_args(prometheus, "create")
    assert args["env"] == {} and "ipc_mode" not in args and args["restart_policy"] == "unless-stopped"


def test_a_planned_recreate_is_forced_even_when_the_labels_match():
    """An env drift keeps the labels and the hash; the plan's recreate must still replace the container."""
    spec = {"name": "c", "image": "i", "command": ["x"], "env": {}, "network_mode": "host", "ipc_mode": "host",
            "volumes": [], "labels": {"dgx_spark.vllm.config_hash": "h"}}
    assert container_apply.docker_container_args(spec, "recreate")["recreate"] is True
    assert "recreate" not in container_apply.docker_container_args(spec, "none")
