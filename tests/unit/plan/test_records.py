"""The last-known-good record, the kept images and upgrade.yml's report (module_utils/plan/records.py), on plans made
from the seed profiles."""

import json
import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import boot, deployment, planner, profiles, records
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import upgrade

from helpers import ROOT, spark_inputs

OLD_ID = "sha256:" + "a1" * 32
NEW_ID = "sha256:" + "b2" * 32


def plan_with(tmp_path, image_id=OLD_ID, image="vllm-local:26.05", **overrides):
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    inputs = spark_inputs(m25, tmp_path)
    inputs["settings"]["image"] = image
    inputs["image_info"] = dict(inputs["image_info"], id=image_id)
    inputs["overrides"] = overrides
    inputs["extra_flags"] = {"--enable-prefix-caching": True}
    plan = deployment.plan_deployment(inputs)
    assert plan["ok"], plan["errors"]
    return plan


def test_the_verified_image_is_kept_under_this_clusters_tag_and_the_oldest_let_go(tmp_path):
    old = plan_with(tmp_path)
    assert old["cluster"]["kept_image"] == "dgx-spark-vllm-kept:dgx-spark-a1a1a1a1a1a1"
    first = records.record(old)
    assert first["kept_images"] == ["dgx-spark-vllm-kept:dgx-spark-a1a1a1a1a1a1"]
    new = plan_with(tmp_path, NEW_ID)
    second = records.record(new, first)
    assert second["kept_images"] == ["dgx-spark-vllm-kept:dgx-spark-a1a1a1a1a1a1", "dgx-spark-vllm-kept:dgx-spark-b2b2b2b2b2b2"]
    assert records.record(new, second)["kept_images"] == second["kept_images"]  # serve.yml again: nothing moves
    third = records.record(plan_with(tmp_path, "sha256:" + "c3" * 32), second)
    assert third["kept_images"] == ["dgx-spark-vllm-kept:dgx-spark-b2b2b2b2b2b2", "dgx-spark-vllm-kept:dgx-spark-c3c3c3c3c3c3"]
    on_node = ["dgx-spark-vllm-kept:dgx-spark-a1a1a1a1a1a1", "dgx-spark-vllm-kept:dgx-spark-b2b2b2b2b2b2",
               "dgx-spark-vllm-kept:dgx-spark-c3c3c3c3c3c3", "dgx-spark-vllm-kept:lab-a1a1a1a1a1a1"]
    assert records.kept_to_remove(on_node, third, "dgx-spark") == ["dgx-spark-vllm-kept:dgx-spark-a1a1a1a1a1a1"]  # not lab's


def test_a_rollback_plans_the_recorded_deployment_by_its_kept_image_whatever_was_asked(tmp_path):
    recorded = records.record(plan_with(tmp_path, max_model_len=65536))
    restore = records.restore(recorded)
    assert restore == {"image": "dgx-spark-vllm-kept:dgx-spark-a1a1a1a1a1a1", "profile": "minimax_m25_nvfp4_ep", "profile_file": "",
                       "backend": "ray", "overrides": {"max_model_len": 65536},
                       "extra_flags": {"--enable-prefix-caching": True}, "extra_env": {}}
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    inputs = spark_inputs(m25, tmp_path)  # the inventory asks for another image and other flags: the record wins
    inputs["settings"]["image"], inputs["overrides"] = "vllm-local:broken", {"max_model_len": 4096}
    inputs["extra_flags"] = {"--max-num-seqs": 4}
    inputs["image_info"] = dict(inputs["image_info"], id=OLD_ID)
    whole = planner.make_plan(inputs, restore={"dgx-spark": restore})
    again = whole["deployments"]["dgx-spark"]
    assert whole["ok"] and again["cluster"]["image"] == restore["image"] and again["extra_flags"] == restore["extra_flags"]
    assert recorded["serve_config_hash"] == again["cluster"]["serve_config_hash"]
    assert recorded["cluster_hash"] == again["cluster"]["hash"]  # the same deployment, by another name of its image
    assert planner.make_plan(inputs)["deployments"]["dgx-spark"]["cluster"]["image"] == "vllm-local:broken"
    from_file = dict(recorded, profile_file="/srv/profiles/mine.yml")
    assert records.restore(from_file)["profile"] == "" and records.restore(from_file)["profile_file"] == "/srv/profiles/mine.yml"


def test_the_change_names_what_differs_and_nothing_else(tmp_path):
    recorded = records.record(plan_with(tmp_path))
    assert upgrade.change(recorded, plan_with(tmp_path)) == []
    lines = upgrade.change(recorded, plan_with(tmp_path, NEW_ID, image="vllm-local:26.06", max_model_len=32768))
    assert lines[:2] == ["image: vllm-local:26.05 -> vllm-local:26.06", "image ID: a1a1a1a1a1a1 -> b2b2b2b2b2b2"]
    assert "overrides: {} -> {'max_model_len': 32768}" in lines and lines[-1].startswith("vLLM config hash: ")


def test_the_report_names_what_failed_and_where_the_cluster_stands(tmp_path):
    recorded = records.record(plan_with(tmp_path))
    planned = records.record(plan_with(tmp_path, NEW_ID, image="vllm-local:broken"))
    change = upgrade.change(recorded, plan_with(tmp_path, NEW_ID, image="vllm-local:broken"))
    failure = {"host": "spark1", "task": "Stop when vLLM died while loading, with the end of its log",
               "message": "vLLM exited while loading on spark1"}
    report = upgrade.upgrade_report(recorded, planned, change, [failure], [], 100.0, 160.0, 250.0)
    assert report["outcome"] == "rolled_back" and report["seconds"] == {"upgrade": 60.0, "rollback": 90.0}
    assert report["message"].startswith("The upgrade to vllm-local:broken (b2b2b2b2b2b2, minimax_m25_nvfp4_ep) failed: spark1: "
                                        "Stop when vLLM died while loading, with the end of its log: vLLM exited while loading")
    assert "Rolled back to vllm-local:26.05 (a1a1a1a1a1a1, minimax_m25_nvfp4_ep) in 90 s: it serves again" in report["message"]
    worse = upgrade.upgrade_report(recorded, planned, change, [failure], [dict(failure, task="Wait for Ray")], 100.0, 160.0, 400.0)
    assert worse["outcome"] == "rollback_failed" and "The rollback to vllm-local:26.05" in worse["message"]
    assert "playbooks/recover.yml" in worse["message"]
    good = upgrade.upgrade_report(recorded, planned, change, [], None, 100.0, 190.0)
    assert good["outcome"] == "upgraded" and good["message"].startswith("Upgraded to vllm-local:broken (b2b2b2b2b2b2, ") \
        and good["seconds"]["rollback"] is None
    assert upgrade.upgrade_report(recorded, recorded, [], [], None, 1.0, 2.0)["outcome"] == "unchanged"


def test_a_count_below_one_is_refused_before_anything_changes(tmp_path):
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    inputs = spark_inputs(m25, tmp_path)
    inputs["settings"]["images_kept"] = 0
    plan = deployment.plan_deployment(inputs, stage="inventory")
    assert [e["message"] for e in plan["errors"]] == [
        "vllm_images_kept 0 keeps no image; set it to 1 or more (1: only the serving image, 2: also the one before it, which an "
        "upgrade rolls back to)"]


def test_a_failure_with_a_log_keeps_what_failed_and_the_logs_last_line():
    failure = {"host": "spark1", "task": "Stop when vLLM died while loading, with the end of its log",
               "message": ["vLLM exited while loading on spark1 (see its log); the end of /dgx-spark/logs/vllm.log:",
                           "INFO: Started server process", "vllm: this image is broken on purpose"]}
    assert upgrade.failure_line(failure) == (
        "spark1: Stop when vLLM died while loading, with the end of its log: vLLM exited while loading on spark1 (see its log); "
        "the end of /dgx-spark/logs/vllm.log: ... vllm: this image is broken on purpose")


def test_check_mode_reports_what_would_change_or_fail_and_never_a_rollback(tmp_path):
    recorded = records.record(plan_with(tmp_path))
    planned = records.record(plan_with(tmp_path, NEW_ID, image="vllm-local:26.06"))
    change = upgrade.change(recorded, plan_with(tmp_path, NEW_ID, image="vllm-local:26.06"))
    checked = upgrade.upgrade_report(recorded, planned, change, [], None, 1.0, 2.0, None, True)
    assert checked["outcome"] == "checked" and checked["message"].startswith(
        "Check mode: the upgrade to vllm-local:26.06 (b2b2b2b2b2b2, minimax_m25_nvfp4_ep) would change image: vllm-local:26.05 -> ")
    failed = upgrade.upgrade_report(recorded, planned, change, [{"host": "spark2", "task": "Copy", "message": "no disk"}],
                                    None, 1.0, 2.0, None, True)
    assert failed["outcome"] == "would_fail" and "would fail: spark2: Copy: no disk. Nothing was changed" in failed["message"]


def test_a_refused_plan_never_carries_the_extra_flags_or_env_it_was_given(tmp_path):
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    inputs = spark_inputs(m25, tmp_path)
    inputs["extra_flags"], inputs["extra_env"] = {"--api-key": "sk-leak-me-not"}, {"HF_TOKEN": "hf_leak_me_not"}
    refused = deployment.plan_deployment(inputs)
    assert not refused["ok"] and "leak-me-not" not in json.dumps(refused)
    assert "extra_flags" not in refused and "extra_env" not in refused


def installed(plan):
    """Each node's probe facts of a node holding and running exactly the plan's supervisor and the kept image."""
    import hashlib
    found = {}
    for name in plan["nodes_order"]:
        spec = plan["nodes"][name]["boot"]
        state = {path: hashlib.sha256(content.encode("utf-8")).hexdigest() for path, content, dummy in boot.files(spec)}
        state[spec["paths"]["wants"]] = state[spec["paths"]["unit"]]
        state[spec["paths"]["hold"]] = None
        found[name] = {"state": state, "supervisor_running": True, "kept_images": [plan["cluster"]["kept_image"]]}
    return found


def test_a_run_that_changes_nothing_commits_nothing_and_any_difference_commits_again(tmp_path):
    plan = plan_with(tmp_path)
    first = records.commit_changes(plan, {})
    assert first["needed"] and "the head has no last-known-good record" in first["reasons"]
    assert "spark1: the supervisor's not probed" in first["reasons"]
    plan["cluster"].update(recorded=json.loads(json.dumps(records.record(plan))), apply_needed=False)
    found = installed(plan)
    assert records.commit_changes(plan, found) == {"needed": False, "reasons": []}
    other = plan_with(tmp_path, NEW_ID)  # another image: another deployment
    other["cluster"].update(recorded=plan["cluster"]["recorded"], apply_needed=False)
    assert records.commit_changes(other, installed(other))["reasons"] == [
        "the head's last-known-good record names another deployment"]
    # A record edited where the hashes still match (a container can write the state folder): written again.
    forged = dict(plan["cluster"]["recorded"], extra_env={"LD_PRELOAD": "/dgx-spark/evil.so"})
    assert records.commit_changes(dict(plan, cluster=dict(plan["cluster"], recorded=forged)), found)["reasons"] == [
        "the head's last-known-good record differs from this deployment's"]
    assert records.commit_changes(dict(plan, cluster=dict(plan["cluster"], recorded=["not", "a", "record"])), found)["needed"]
    held = {n: dict(f, state=dict(f["state"])) for n, f in found.items()}
    hold = plan["nodes"]["spark2"]["boot"]["paths"]["hold"]
    held["spark2"]["state"][hold] = "e3b0c442"  # an interrupted run left its hold
    assert records.commit_changes(plan, held)["reasons"] == ["spark2: the supervisor's hold"]
    stopped = dict(found, spark1=dict(found["spark1"], supervisor_running=False))
    assert records.commit_changes(plan, stopped)["reasons"] == ["spark1: the supervisor's process (not running)"]
    # The copy on the next node, where the probe read it: missing or different, the commit writes it again.
    plan["cluster"]["records_on"] = ["spark1", "spark2"]
    lkg = plan["nodes"]["spark2"]["paths"]["last_known_good_file"]
    with_copy = dict(found, spark2=dict(found["spark2"], records={lkg: plan["cluster"]["recorded"]}))
    assert records.commit_changes(plan, with_copy) == {"needed": False, "reasons": []}
    assert records.commit_changes(plan, dict(found, spark2=dict(found["spark2"], records={})))["reasons"] == [
        "spark2: its copy of the last-known-good record is missing"]
    assert records.commit_changes(plan, dict(found, spark2=dict(found["spark2"], records={lkg: forged})))["reasons"] == [
        "spark2: its copy of the last-known-good record differs"]
    untagged = dict(found, spark2=dict(found["spark2"], kept_images=[]))
    assert records.commit_changes(plan, untagged)["reasons"] == [
        "spark2 lacks the kept image %s" % plan["cluster"]["kept_image"]]
    plan["cluster"]["images_kept"] = 1
    plan["cluster"]["recorded"]["kept_images"] = ["dgx-spark-vllm-kept:dgx-spark-" + "9" * 12, plan["cluster"]["kept_image"]]
    assert records.commit_changes(plan, found)["reasons"] == ["the head's last-known-good record differs from this deployment's"]


def test_a_supervisor_found_on_a_node_is_held_before_any_change_and_a_node_without_one_installs_it_later(tmp_path):
    plan = plan_with(tmp_path)
    spec = plan["nodes"]["spark1"]["boot"]
    assert spec["hold_first"]  # spark_inputs probes no state: an unread node is held first
    found = installed(plan)["spark1"]["state"]
    assert boot.hold_first(spec, found)  # this plan's supervisor is there
    assert boot.hold_first(spec, {spec["paths"]["hold"]: "e3b0c442"})  # an interrupted run's hold alone
    assert boot.hold_first(spec, {spec["paths"]["config"]: "0" * 64})  # another plan's supervisor
    assert not boot.hold_first(spec, {path: None for path in found})  # a node after teardown.yml: nothing to hold
    assert boot.hold_first(spec, None)


def test_the_plan_takes_the_record_and_the_references_the_head_keeps(tmp_path):
    """The head's copies are the truth (an AWX job's fresh project copy has no controller copy): the inventory stage
    asks the head's probe for both files, and the plan carries what it read."""
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    inputs = spark_inputs(m25, tmp_path)
    inputs["image_info"] = dict(inputs["image_info"], id=OLD_ID)
    asked = deployment.plan_deployment(inputs, "inventory")["nodes"]
    head_paths = plan_with(tmp_path)["nodes"]["spark1"]["paths"]
    assert asked["spark1"]["probe"]["records"] == [head_paths["last_known_good_file"], head_paths["canary_file"], head_paths["bench_record_file"]]
    assert asked["spark2"]["probe"]["records"] == asked["spark1"]["probe"]["records"]  # the next node keeps a copy
    recorded = records.record(plan_with(tmp_path))
    references = {"models": {"MiniMax-M2.5": {"answers": [{"prompt": "2+2=", "tokens": [19, 20]}]}}}
    bench = {"minimax_m25_nvfp4_ep": {"meta": {"taken_at": "20261126T120000Z"}, "rows": []}}
    inputs["nodes"]["spark1"]["records"] = {head_paths["last_known_good_file"]: recorded, head_paths["canary_file"]: references,
                                            head_paths["bench_record_file"]: bench}
    plan = deployment.plan_deployment(inputs)
    assert plan["ok"], plan["errors"]
    assert plan["cluster"]["recorded"] == recorded and plan["cluster"]["canary_recorded"] == references
    assert plan["cluster"]["bench_recorded"] == bench
    assert plan["cluster"]["records_on"] == ["spark1", "spark2"]
    inputs["nodes"]["spark2"]["records"] = {}  # the next node read, holding no copy: the commit writes one
    reasons = deployment.plan_deployment(inputs)["cluster"]["commit"]["reasons"]
    assert "spark2: its copy of the last-known-good record is missing" in reasons and "spark2 lacks the canary's references" in reasons
    assert "spark1 lacks the canary's references" not in reasons
    # The head's state folder lost: the copy on the next node is the record, and the commit writes the head's again.
    inputs["nodes"]["spark2"]["records"] = inputs["nodes"]["spark1"].pop("records")
    inputs["nodes"]["spark1"]["records"] = {}
    from_copy = deployment.plan_deployment(inputs)
    assert from_copy["cluster"]["recorded"] == recorded and from_copy["cluster"]["canary_recorded"] == references
    assert from_copy["cluster"]["bench_recorded"] == bench
    assert "the head has no last-known-good record" in from_copy["cluster"]["commit"]["reasons"]
    assert "spark1 lacks the canary's references" in from_copy["cluster"]["commit"]["reasons"]
    assert not [r for r in from_copy["cluster"]["commit"]["reasons"] if "its copy" in r]  # the copy is the record here
    del inputs["nodes"]["spark1"]["records"], inputs["nodes"]["spark2"]["records"]
    assert deployment.plan_deployment(inputs)["cluster"]["canary_recorded"] is None
    assert deployment.plan_deployment(inputs)["cluster"]["bench_recorded"] == {}
