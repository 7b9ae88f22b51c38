"""parity: environment parity of containers and rank processes against the plan (fact 7)."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import parity


PLANNED = {
    "spark1": {"env_common": {"VLLM_NVFP4_GEMM_BACKEND": "marlin"}, "env_node": {"VLLM_HOST_IP": "192.168.100.10", "NCCL_IB_GID_INDEX": "3"}},
    "spark2": {"env_common": {"VLLM_NVFP4_GEMM_BACKEND": "marlin"}, "env_node": {"VLLM_HOST_IP": "192.168.100.11", "NCCL_IB_GID_INDEX": "5"}},
}


def env(**values):
    base = {"PATH": "/usr/bin", "VLLM_NVFP4_GEMM_BACKEND": "marlin"}
    base.update(values)
    return base


def test_parity_holds():
    actual = {"spark1": env(VLLM_HOST_IP="192.168.100.10", NCCL_IB_GID_INDEX="3"),
              "spark2": [env(VLLM_HOST_IP="192.168.100.11", NCCL_IB_GID_INDEX="5")]}
    assert parity.check(PLANNED, actual) == []


def test_head_value_carried_over_a_workers_own_is_caught():
    actual = {"spark1": env(VLLM_HOST_IP="192.168.100.10", NCCL_IB_GID_INDEX="3"),
              "spark2": env(VLLM_HOST_IP="192.168.100.11", NCCL_IB_GID_INDEX="3")}
    problems = parity.check(PLANNED, actual, "vLLM rank process")
    assert problems == ["spark2: NCCL_IB_GID_INDEX is '3' in the vLLM rank process, planned '5' (per-node value). Recreate the "
                        "containers with playbooks/serve.yml; if it persists, the value comes from the image or from the "
                        "driver's environment"]


def test_missing_kernel_variable_and_stale_image_value_are_caught():
    actual = {"spark1": {"VLLM_HOST_IP": "192.168.100.10", "NCCL_IB_GID_INDEX": "3", "VLLM_USE_FLASHINFER_MOE_FP4": "1"},
              "spark2": env(VLLM_HOST_IP="192.168.100.11", NCCL_IB_GID_INDEX="5")}
    problems = parity.check(PLANNED, actual)
    assert problems[0].startswith("spark1: VLLM_NVFP4_GEMM_BACKEND is missing in the container, planned 'marlin' (common value)")
    assert problems[1].startswith("VLLM_USE_FLASHINFER_MOE_FP4 differs across nodes and is not in the plan (spark1='1')")


def test_nothing_running_is_named():
    assert parity.check(PLANNED, {"spark1": []})[0] == "spark1: no running container to read the environment from"


def test_environ_dump_and_docker_env():
    assert parity.parse_environ_dump("A=1\nB=x=y\n---\nA=2\n---\n") == [{"A": "1", "B": "x=y"}, {"A": "2"}]
    assert parity.parse_env_list(["A=1", "B=", "junk"]) == {"A": "1", "B": ""}
