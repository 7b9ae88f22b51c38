"""plan_env: RoCE or sockets (fact 8), each node's own values (facts 6, 8), the values identical on every rank
(facts 5, 7), what Ray must not carry over; on captured sysfs trees."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import env as plan_env
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import Findings, normalize_settings

from helpers import roce_facts


def inputs(tmp_path, captures=("spark-one-cable.txt", "spark-ipv6-shift.txt"), **settings):
    nodes = {}
    for index, capture in enumerate(captures):
        name = "spark%d" % (index + 1)
        nodes[name] = {"fabric_ip": "192.168.100.%d" % (10 + index), "fabric_interfaces": ["enp1s0f1np1"],
                       "roce": roce_facts(capture, tmp_path / name) if capture else {"roce_devices": [], "nccl_ib_hca": None}}
    return {"order": sorted(nodes), "nodes": nodes, "settings": normalize_settings(settings), "backend": "ray",
            "profile": {"env": {"VLLM_TEST_FORCE_FP8_MARLIN": 1}}, "extra_env": {}}


def test_roce_on_every_node_is_used_and_gid_index_is_per_node(tmp_path):
    data, findings = inputs(tmp_path), Findings()
    assert plan_env.transport(data, findings) is True and findings.errors == []
    env = plan_env.node_environment(data, findings, True)
    assert env["spark1"]["VLLM_HOST_IP"] == "192.168.100.10" and env["spark2"]["VLLM_HOST_IP"] == "192.168.100.11"
    assert env["spark1"]["NCCL_IB_GID_INDEX"] == "3" and env["spark2"]["NCCL_IB_GID_INDEX"] == "5"


def test_one_node_without_roce_is_refused_naming_it(tmp_path):
    data, findings = inputs(tmp_path, captures=("spark-one-cable.txt", None)), Findings()
    plan_env.transport(data, findings)
    assert findings.errors[0]["host"] == "spark2"
    assert "spark2 has no usable RoCE GID while spark1 have RoCE" in findings.errors[0]["message"]


def test_socket_by_choice_turns_strict_off_with_a_warning(tmp_path):
    data, findings = inputs(tmp_path, nccl_transport="socket", nccl_strict=True), Findings()
    assert plan_env.transport(data, findings) is False
    assert "strict mode (vllm_nccl_strict, NCCL_NET=IB) is off" in findings.warnings[0]


def test_common_environment_is_the_same_for_every_rank_and_null_removes(tmp_path):
    data = inputs(tmp_path)
    data["extra_env"] = {"VLLM_TEST_FORCE_FP8_MARLIN": None, "VLLM_X": 2}
    env = plan_env.common_environment(data, {}, True)
    assert env["RAY_memory_monitor_refresh_ms"] == "0" and env["HF_HUB_OFFLINE"] == "1" and env["NCCL_DEBUG"] == "INFO"
    assert "VLLM_TEST_FORCE_FP8_MARLIN" not in env and env["VLLM_X"] == "2"


def test_per_node_names_and_secrets_are_never_carried_over():
    names = plan_env.non_carry_over({"a": {"NCCL_IB_GID_INDEX": "3"}, "b": {"NCCL_SOCKET_IFNAME": "x"}})
    assert {"NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME", "VLLM_HOST_IP", "VLLM_API_KEY", "HF_TOKEN"} <= set(names)
    assert names == sorted(names)
