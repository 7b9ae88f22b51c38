"""profiles: a profile of one's own is refused, mistake by mistake, naming the file, the key, the value and the fix."""

import os

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import deployment, profiles

from helpers import ROOT, spark_inputs

GOOD = """---
name: my_moe_nvfp4
model:
  id: my-org/my-moe-nvfp4
  weights_bytes: 120000000000
  config: {num_hidden_layers: 94, num_attention_heads: 64, num_key_value_heads: 4, head_dim: 128}
parallel: {nodes: 2, tensor: 2}
vllm: {gpu_memory_utilization: 0.82, max_model_len: 32768, flags: {--enforce-eager: true}}
"""


def load(tmp_path, text):
    path = tmp_path / "mine.yml"
    path.write_text(text)
    return profiles.load(str(path))


def refusal(tmp_path, text):
    with pytest.raises(profiles.ProfileError) as info:
        load(tmp_path, text)
    return str(info.value)


def test_a_profile_written_from_the_docs_plans_clean(tmp_path):
    plan = deployment.plan_deployment(spark_inputs(load(tmp_path, GOOD), tmp_path))
    assert plan["ok"], plan["errors"]
    assert plan["cluster"]["endpoint"]["served_model_name"] == "my-org/my-moe-nvfp4"
    assert "--served-model-name" not in plan["cluster"]["vllm_argv"]


@pytest.mark.parametrize("change, expected", [
    (("tensor: 2}", "tensor: two}"), "mine.yml: parallel.tensor is 'two'; it must be an integer"),
    (("vllm: {", "vllm: {flagz: 1, "), "mine.yml: vllm: unknown key 'flagz' (value 1); fix the spelling or remove it"),
    (("gpu_memory_utilization: 0.82", "gpu_memory_utilization: 1.5"), "vllm.gpu_memory_utilization is 1.5; it must be above 0 and at most 1"),
    (("{--enforce-eager: true}", "{enforce-eager: true}"), "vllm.flags key 'enforce-eager' is not a flag; write it as vLLM does (--enforce-eager)"),
    (("{--enforce-eager: true}", "{--compilation-config: {cudagraph_mode: NONE}}"), "give JSON options as one quoted string"),
    (("name: my_moe_nvfp4", "name: x\nenv: {A: true}"), "env.A is True; quote it as a string"),
    (("name: my_moe_nvfp4", "name: x\nsmoke_tests: [{name: s, kind: chit}]"), "smoke_tests[0].kind is 'chit'; it must be one of"),
    (("name: my_moe_nvfp4", "name: x\ndeviations: [{what: a, writeup: b, profile: c, reason: d, restore: {vllm_foo: 1}}]"),
     "deviations[0].restore names 'vllm_foo', which is not an inventory variable the planner reads; use one of"),
    (("  id: my-org/my-moe-nvfp4\n", ""), "model.id is missing; set it to a Hugging Face repository"),
    (("name: my_moe_nvfp4\n", "name: x\nbackend: tcp\n"), "backend is 'tcp'; it must be ray or mp"),
    (("name: my_moe_nvfp4", "name: x\nenv: {NCCL_IB_HCAA: mlx5_0}"),
     "env.NCCL_IB_HCAA is not a variable the stack reads; did you mean NCCL_IB_HCA? A misspelt name is ignored in silence"),
    (("name: my_moe_nvfp4", "name: x\nenv: {VLLM_ALLOW_LONG_MAX_MODEL_LENGTH: '1'}"), "did you mean VLLM_ALLOW_LONG_MAX_MODEL_LEN?"),
])
def test_each_mistake_is_named_with_its_fix(tmp_path, change, expected):
    text = GOOD.replace(*change)
    assert text != GOOD
    message = refusal(tmp_path, text)
    assert expected in message and str(tmp_path / "mine.yml") in message


def test_env_names_close_to_none_or_accepted_as_they_are_pass(tmp_path):
    load(tmp_path, GOOD.replace("name: my_moe_nvfp4", "name: x\nenv: {MY_OWN_SETTING: '1', NCCL_IB_HCA: mlx5_0}"))
    load(tmp_path, GOOD.replace("name: my_moe_nvfp4", "name: x\nenv: {NCCL_IB_HCAA: '1'}\nenv_unchecked: [NCCL_IB_HCAA]"))


def test_broken_yaml_and_a_missing_file_are_refused_without_a_traceback(tmp_path):
    assert "is not valid YAML; fix the line it names" in refusal(tmp_path, "name: [unclosed\n")
    assert "a profile is a mapping of keys" in refusal(tmp_path, "- a list\n")
    with pytest.raises(profiles.ProfileError, match="check the path given in vllm_profile_file"):
        profiles.load(str(tmp_path / "missing.yml"))


def test_every_shipped_profile_is_valid():
    for name in profiles.available([os.path.join(ROOT, "profiles")]):
        assert profiles.load(profiles.find(name, [os.path.join(ROOT, "profiles")]))["name"] == name


def test_restore_variables_land_where_the_preflight_role_puts_them():
    """The planner inputs a deviation's restore sets are the ones the preflight role fills from the inventory."""
    import yaml  # pylint: disable=import-outside-toplevel

    with open(os.path.join(ROOT, "roles", "preflight", "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    slots = {"settings": defaults["preflight_settings"], "overrides": defaults["preflight_overrides"],
             "extra_flags": {None: defaults["preflight_extra_flags"]}, "extra_env": {None: defaults["preflight_extra_env"]}}
    for variable, (section, key) in profiles.RESTORE_VARIABLES.items():
        assert variable in str(slots[section][key]), (variable, section, key)
    inputs = profiles.apply_variables({"settings": {"a": 1}, "extra_env": {"X": "1"}},
                                      {"vllm_nccl_transport": "socket", "vllm_extra_env": {"Y": None}})
    assert inputs == {"settings": {"a": 1, "nccl_transport": "socket"}, "extra_env": {"X": "1", "Y": None}}


@pytest.mark.parametrize("name", ["minimax_m3_nvfp4_tp3", "minimax_m25_nvfp4_ep", "nemotron3_super_nvfp4"])
def test_profiles_whose_models_have_control_tokens_check_that_none_leak(name):
    """Seed 000 served M3 "with clean tool-calling and reasoning, no leaked control tokens": the profile checks it on
    every launch (a wrong parser or chat template leaks them into the content in silence). Where the reasoning parser
    separates the thinking, the think tags are leaks too."""
    profile = profiles.load(profiles.find(name, [os.path.join(ROOT, "profiles")]))
    leaks = [t for t in profile["smoke_tests"] if t["kind"] == "no_control_tokens"]
    assert len(leaks) == 1 and leaks[0]["tokens"], name
    if any(t.get("expect") == "separated" for t in profile["smoke_tests"]):
        assert {"<think>", "</think>"} <= set(leaks[0]["tokens"]), name
