"""Action vllm_cluster_plan on the controller: what it refuses before any planning."""

from helpers import run_action


def test_no_profile_lists_the_shipped_ones():
    result = run_action("vllm_cluster_plan", {"stage": "full"})
    assert result["failed"] and "no profile: set vllm_profile to a profile name (" in result["msg"]
    assert "minimax_m25_nvfp4_ep" in result["msg"]


def test_an_unknown_profile_is_named():
    result = run_action("vllm_cluster_plan", {"profile": "nope"})
    assert result["failed"] and "unknown profile 'nope'" in result["msg"]


def test_the_paths_stage_needs_no_profile_but_a_head():
    result = run_action("vllm_cluster_plan", {"stage": "paths", "fail_on_error": False})
    assert result["plan"]["stage"] == "paths" and "exactly one host in spark_head" in result["plan"]["errors"][0]["message"]
