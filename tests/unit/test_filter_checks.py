"""The verification filters (plugins/filter/checks.py): thin adapters of module_utils, errors as filter errors."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgx_spark.vllm.plugins.filter import checks

from helpers import read_fixture


def test_every_filter_is_registered():
    assert set(checks.FilterModule().filters()) == {"env_parity", "docker_env", "environ_dump", "started_env", "nccl_transport",
                                                    "status_report", "status_node", "human_bytes", "rsync_summary", "ring_links"}


def test_started_env_reads_what_docker_container_returned_and_skips_kept_ones():
    host = {"head_result": {"changed": True, "container": {"Config": {"Env": ["A=1", "B=2"]}}},
            "kept_result": {"changed": False, "change": "none"}}
    assert checks.started_env(host, ["head_result", "kept_result", "absent"]) == [{"A": "1", "B": "2"}]


def test_docker_env_and_parity():
    env = checks.docker_env(["VLLM_HOST_IP=10.0.0.1", "X=y"])
    planned = {"a": {"env_common": {}, "env_node": {"VLLM_HOST_IP": "10.0.0.2"}}}
    assert "a: VLLM_HOST_IP is '10.0.0.1' in the container, planned '10.0.0.2'" in checks.env_parity(planned, {"a": env})[0]


def test_ring_links_errors_are_filter_errors():
    with pytest.raises(AnsibleFilterError, match="ring link 0"):
        checks.ring_links([{"subnet": "192.168.10.1/30", "a": "s1"}], "s1")


def test_nccl_transport_of_a_captured_fallback_and_byte_counts():
    verdict = checks.nccl_transport(read_fixture("nccl", "nccl-socket-fallback.log"), expect_ib=True, strict=True)
    assert verdict["status"] == "fallback" and "NCCL fell back to TCP sockets" in verdict["messages"][0]
    assert checks.human_bytes(1536) == "1.5 KB" and checks.human_bytes(None) == "?"
