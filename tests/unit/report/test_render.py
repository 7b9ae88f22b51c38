"""render: the plan as lines a person reads, made from a real plan of a seed profile."""

import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import planner, profiles
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import render

from helpers import ROOT, spark_inputs

PROFILES = os.path.join(ROOT, "profiles")


def test_the_text_names_nodes_commands_memory_deviations_and_the_verdict(tmp_path):
    profile = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [PROFILES]))
    plan = planner.make_plan(spark_inputs(profile, tmp_path))
    assert plan["deployment_order"] == ["dgx-spark"] and not plan["gateway"]["enabled"]  # the whole cluster, one deployment
    text = "\n".join(render.render(plan))
    assert text.startswith("Plan: profile minimax_m25_nvfp4_ep, backend ray, 2 node(s), TP=2")
    assert "spark1, container dgx-spark-ray-spark1: ray start --head" in text
    assert "Memory (KV" in text and "Largest context that fits" in text
    assert "Deviation from the write-up" in text
    assert text.splitlines()[-1] == "Verdict: ready to apply"


def test_errors_are_listed_with_their_host_and_the_verdict_refuses():
    lines = render.render({"deployments": {"p": {"profile": "p", "backend": "ray", "parallel": {}}}, "deployment_order": ["p"],
                           "gateway": None, "ok": False, "errors": [{"host": "spark2", "message": "spark2: no Docker"}],
                           "warnings": ["w"]})
    assert lines[-3:] == ["WARNING: w", "ERROR [spark2]: spark2: no Docker", "Verdict: refused, nothing will be changed"]
