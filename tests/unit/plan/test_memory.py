"""plan_memory: the GB10's figures and each probed node's memory for the memory plan, on a captured idle GB10."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import memory, memory_model
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import normalize_settings

from helpers import memory_facts

GIB = 1024 ** 3


def test_cuda_total_of_a_gb10_is_not_memtotal():
    facts = memory_facts("gb10-idle.txt")
    assert memory_model.cuda_total(facts) == int(119.67 * GIB)
    assert memory_model.cuda_total(dict(facts, unified=False)) == facts["mem_total_bytes"]


def running(name, config_hash):
    labels = "dgx_spark.vllm.managed=true,dgx_spark.vllm.cluster=dgx-spark,dgx_spark.vllm.node=%s,dgx_spark.vllm.config_hash=%s"
    return '{"Names": "dgx-spark-ray-%s", "State": "running", "Labels": "%s"}' % (name, labels % (name, config_hash))


def test_only_a_deployment_running_unchanged_keeps_what_it_holds():
    facts = dict(memory_facts("gb10-idle.txt"), gpu_process_bytes=90 * GIB)
    inputs = {"order": ["a", "b"], "settings": normalize_settings({}),
              "nodes": {"a": {"memory": facts, "docker_ps": [running("a", "h1")]}, "b": {"memory": facts, "docker_ps": [running("b", "old")]}}}
    nodes = memory.node_memory(inputs, {"a": "h1", "b": "h2"})
    assert (nodes["a"]["unchanged"], nodes["a"]["held_bytes"]) == (True, 90 * GIB)
    assert (nodes["b"]["unchanged"], nodes["b"]["held_bytes"]) == (False, 0)
    assert nodes["a"]["cuda_total_bytes"] == int(119.67 * GIB)


def test_an_offline_plan_plans_for_an_idle_spark():
    inputs = {"order": ["a"], "settings": normalize_settings({"offline": True}), "nodes": {"a": {}}}
    assert memory.node_memory(inputs, {})["a"]["mem_available_bytes"] == memory.IDLE_GB10["mem_available_bytes"]
    assert memory.node_memory({"order": ["a"], "settings": normalize_settings({}), "nodes": {"a": {}}}, {}) == {}
