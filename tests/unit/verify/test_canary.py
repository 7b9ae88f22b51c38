"""canary: greedy answers as token IDs, compared exactly on the same basis and within the tolerance across a change;
fed with a real answer of the simulated cluster's vLLM (tests/unit/fixtures/canary)."""

import json
import os

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import deployment, profiles
from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import canary

from helpers import ROOT, read_fixture, spark_inputs


def plan(tmp_path, **overrides):
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    inputs = spark_inputs(m25, tmp_path)
    inputs["overrides"] = overrides
    made = deployment.plan_deployment(inputs)
    assert made["ok"], made["errors"]
    return made


def test_the_real_answer_reads_as_token_ids():
    answer = json.loads(read_fixture("canary", "sim-tiny-completion-token-ids.json"))
    tokens = canary.tokens_of(answer)
    assert len(tokens) == 16 and all(isinstance(t, int) for t in tokens)
    with pytest.raises(ValueError, match="return_tokens_as_token_ids"):
        canary.tokens_of({"choices": [{"logprobs": {"tokens": ["Paris"]}}]})


def test_the_request_is_greedy_seeded_and_asks_for_ids():
    body = canary.request("m", "Hi", canary.settings({}))
    assert body == {"model": "m", "prompt": "Hi", "max_tokens": 16, "temperature": 0, "seed": 1234, "logprobs": 0,
                    "return_tokens_as_token_ids": True}


def test_the_profile_overrides_one_level_deep():
    config = canary.settings({"canary": {"max_tokens": 8, "tolerance": {"prefix_tokens": 2}}})
    assert config["max_tokens"] == 8 and config["tolerance"] == {"prefix_tokens": 2, "match_share": 0.5}
    assert config["prompts"] == canary.DEFAULTS["prompts"]


def test_max_model_len_is_not_numerics_but_the_image_and_quantization_are(tmp_path):
    base = canary.basis(plan(tmp_path))
    assert canary.differences(base, canary.basis(plan(tmp_path, max_model_len=65536))) == []
    assert "--tensor-parallel-size" in base["flags"] and base["image_id"]
    other = dict(base, image_id="sha256:other", flags=dict(base["flags"], **{"--kv-cache-dtype": "fp8"}))
    assert canary.differences(base, other) == ["image_id %s -> sha256:other" % base["image_id"],
                                               "--kv-cache-dtype %s -> fp8" % base["flags"].get("--kv-cache-dtype", "(unset)")]


def reference(tokens, basis=None):
    return {"basis": basis or {"image_id": "a", "model": "m", "revision": "r", "flags": {}, "env": {}},
            "answers": [{"prompt": "p", "tokens": tokens}], "recorded_at": "2026-11-24T10:00:00Z"}


def test_the_same_basis_must_match_token_for_token():
    ref = reference([1, 2, 3, 4, 5, 6])
    same = ref["basis"]
    assert canary.compare(ref, same, [{"prompt": "p", "tokens": [1, 2, 3, 4, 5, 6]}], canary.settings({}))["passed"]
    verdict = canary.compare(ref, same, [{"prompt": "p", "tokens": [1, 2, 3, 4, 5, 7]}], canary.settings({}))
    assert not verdict["passed"] and verdict["exact"]
    assert "5 of 6 tokens agree from the start" in verdict["message"] and "token for token" in verdict["message"]


def test_a_changed_basis_passes_within_the_tolerance_and_names_the_change():
    ref = reference([1, 2, 3, 4, 5, 6, 7, 8])
    upgraded = dict(ref["basis"], image_id="b")
    close = canary.compare(ref, upgraded, [{"prompt": "p", "tokens": [1, 2, 3, 4, 9, 9, 9, 9]}], canary.settings({}))
    assert close["passed"] and not close["exact"] and close["changed"] == ["image_id a -> b"]
    far = canary.compare(ref, upgraded, [{"prompt": "p", "tokens": [9, 9, 9, 4, 9, 9, 9, 9]}], canary.settings({}))
    assert not far["passed"] and "0 of 8 tokens agree from the start (12% in place)" in far["message"]
    assert "across: image_id a -> b" in far["message"] and "vllm_canary_accept=true" in far["message"]


def test_garbage_is_named():
    thresholds = canary.settings({"canary": {"garbage": {"control_tokens": ["<|im_end|>"]}}})["garbage"]
    assert canary.garbage("Paris is the capital of France.", thresholds) == []
    looping = " ".join(["the cat sat"] * 8)
    assert canary.garbage(looping, thresholds)[0].startswith("the 3-gram 'the cat sat' repeats 8 times")
    assert canary.garbage("ok\x00\x01\x02\x03", thresholds) == ["4 of 6 characters are unprintable"]
    assert canary.garbage("done<|im_end|>", thresholds) == ["control tokens leaked: <|im_end|>"]


def test_each_model_keeps_its_own_reference():
    answers = [{"prompt": "p", "tokens": [1, 2], "text": "x"}]
    first = canary.keep({}, "m1", canary.reference(answers, {"model": "m1"}, "t1"))
    both = canary.keep(first, "m2", canary.reference(answers, {"model": "m2"}, "t2"))
    assert sorted(both["models"]) == ["m1", "m2"] and canary.stored_for(both, "m1")["recorded_at"] == "t1"
    assert canary.stored_for(both, "m3") is None and canary.stored_for(None, "m1") is None
