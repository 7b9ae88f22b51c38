"""One shape: whatever the inventory lists, the plan is a list of deployments. An inventory without vllm_deployments is
one deployment under the cluster's own name, planned exactly as the planner plans a deployment, with the cluster's own
names, ports, key and reports (a cluster served before sees nothing change)."""

import copy
import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import deployment, planner, profiles
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import render

from helpers import ROOT, spark_inputs

PROFILES = os.path.join(ROOT, "profiles")


def m25():
    return profiles.load(profiles.find("minimax_m25_nvfp4_ep", [PROFILES]))


def test_a_plain_inventory_is_one_deployment_named_after_the_cluster_and_planned_as_one(tmp_path):
    inputs = spark_inputs(m25(), tmp_path, settings={"cluster_name": "lab"})
    whole = planner.make_plan(copy.deepcopy(inputs))
    assert whole["deployment_order"] == ["lab"] and list(whole["deployments"]) == ["lab"]
    assert not whole["gateway"]["enabled"] and whole["gateway"]["change"] == "none"  # present, off: one deployment
    assert whole["shared_nodes"] == {} and whole["head"] == "spark1"
    assert whole["unchanged"] == []  # nothing runs yet: it is launched, not only checked
    assert whole["deployments"]["lab"] == deployment.plan_deployment(copy.deepcopy(inputs))  # the same plan, field for field
    one = whole["deployments"]["lab"]
    assert one["nodes"]["spark1"]["containers"][0]["name"] == "lab-ray-spark1"  # the names and ports it always had
    assert one["cluster"]["endpoint"]["url"].endswith(":8000")
    assert whole["reports"]["plan"] == one["cluster"]["reports"]["plan"]  # plan.json where it always was
    assert whole["ok"] and whole["errors"] == one["errors"] and whole["warnings"] == one["warnings"]


def test_a_refused_plain_inventory_keeps_its_messages_word_for_word(tmp_path):
    inputs = spark_inputs(m25(), tmp_path, count=3)  # three nodes for TP=2 x EP
    whole = planner.make_plan(copy.deepcopy(inputs))
    one = deployment.plan_deployment(copy.deepcopy(inputs))
    assert not whole["ok"] and whole["errors"] == one["errors"]
    assert not any(e["message"].startswith("deployment ") for e in whole["errors"])
    assert render.render(whole)[-1] == "Verdict: refused, nothing will be changed"


def test_each_deployment_takes_its_probe_facts_by_its_name(tmp_path):
    """The probe keeps each node's facts per deployment (preflight_node_info.deployments: deployment -> facts); the planner hands each
    deployment its own, so a fact of another never reaches it."""
    inputs = spark_inputs(m25(), tmp_path)
    facts = {h: inputs["nodes"][h] for h in inputs["nodes"]}
    bare = dict(inputs, nodes={h: {k: v for k, v in f.items() if k in ("fabric_ip", "fabric_interfaces", "ansible_host")}
                               for h, f in facts.items()})
    probed = planner.make_plan(copy.deepcopy(bare), probes={"dgx-spark": facts})
    assert probed["ok"], probed["errors"]
    assert probed["deployments"]["dgx-spark"] == deployment.plan_deployment(copy.deepcopy(inputs))
    elsewhere = planner.make_plan(copy.deepcopy(bare), probes={"another": facts})
    assert not elsewhere["ok"]  # no facts of its own: nothing was probed for it


def test_the_paths_have_the_same_shape_and_names(tmp_path):
    inputs = spark_inputs(m25(), tmp_path)
    paths = planner.paths(inputs)
    assert paths["ok"] and paths["deployment_order"] == ["dgx-spark"] and not paths["shared"]["gateway"]["enabled"]
    assert paths["deployments"]["dgx-spark"]["nodes"]["spark2"]["containers"]["ray"] == "dgx-spark-ray-spark2"
    assert paths["api_key_file"] == paths["deployments"]["dgx-spark"]["cluster"]["endpoint"]["api_key_file"]
    assert paths["reports"]["plan"] == planner.make_plan(inputs)["reports"]["plan"]
