"""flags: vLLM flags to argv, gated by the image (fact 13)."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import flags


def test_flags_to_argv_and_gate():
    assert flags.to_argv({"--a": True, "--b": False, "--c": None, "--d": 3, "--e": ["x", "y"]}) == ["--a", "--d", "3", "--e", "x", "y"]
    kept, dropped, errors = flags.gate({"--max_model_len": 8, "--no-enable-prefix-caching": True, "--gone": 1},
                                       {"--max-model-len": None, "--enable-prefix-caching": None}, optional=["--gone"], image="img", version="0.32.0")
    assert kept == {"--max_model_len": 8, "--no-enable-prefix-caching": True}
    assert dropped == ["img (vLLM 0.32.0) does not accept --gone; dropped (optional for this profile)"] and errors == []
