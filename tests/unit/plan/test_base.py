"""plan_base: the one set of defaults, names, paths and the findings collector."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import base


def test_defaults_fill_what_the_inventory_leaves_null_and_values_are_typed():
    settings = base.normalize_settings({"port": "9000", "cluster_name": None, "nccl_strict": "yes", "shm_size": ""})
    assert settings["port"] == 9000 and settings["cluster_name"] == "dgx-spark" and settings["nccl_strict"] is True
    assert settings["shm_size"] is None and settings["state_dir"] == "/var/lib/dgx-spark-vllm"


def test_the_nvidia_runtime_is_required_unless_simulated_or_said():
    assert base.normalize_settings({})["require_nvidia_runtime"] is True
    assert base.normalize_settings({"simulated": True})["require_nvidia_runtime"] is False
    assert base.normalize_settings({"simulated": True, "require_nvidia_runtime": "true"})["require_nvidia_runtime"] is True


def test_node_paths_put_the_node_in_and_the_cluster_under():
    settings = base.normalize_settings({"state_dir": "/srv/{node}/state/", "models_dir": "/srv/{node}/models"})
    paths = base.node_paths(settings, "spark2", "org/Model-1")
    assert paths["state_dir"] == "/srv/spark2/state/dgx-spark"
    assert paths["models_dir"] == "/srv/spark2/models"
    assert paths["model_dir"] == "/srv/spark2/models/huggingface/hub/models--org--Model-1"
    assert {f["path"]: f["mode"] for f in paths["folders"]}["/srv/spark2/state/dgx-spark/secrets"] == "0700"
    assert paths["baseline_file"] == "/srv/spark2/state/dgx-spark/run/baseline.json"


def test_a_path_model_is_where_it_says_and_no_model_has_no_folder():
    assert base.model_dir("/data/models", "/models/local/m") == "/data/models/local/m"
    assert base.model_dir("/data/models", None) is None


def test_names_reports_and_mounts():
    settings = base.normalize_settings({"cluster_name": "lab", "artifacts_dir": "/inv/.artifacts"})
    assert base.container_name(settings, "ray", "spark1") == "lab-ray-spark1"
    assert base.reports(settings) == {"plan": "/inv/.artifacts/plan.json", "summary": "/inv/.artifacts/summary.json",
                                      "last_known_good": "/inv/.artifacts/last-known-good.json",
                                      "canary": "/inv/.artifacts/canary-reference.json", "bench": "/inv/.artifacts/bench",
                                      "logs": "/inv/.artifacts/logs"}
    assert base.reports(base.normalize_settings({}))["plan"] is None
    assert base.mounts() == {"state": "/dgx-spark", "models": "/models"}


def test_findings_keep_host_value_and_message_and_digest_is_stable():
    findings = base.Findings()
    findings.error("spark2", 5, "spark2: wrong")
    findings.warn("careful")
    assert findings.errors == [{"host": "spark2", "value": 5, "message": "spark2: wrong"}] and findings.warnings == ["careful"]
    assert base.digest({"b": 1, "a": [2]}) == base.digest({"a": [2], "b": 1}) != base.digest({"a": [3], "b": 1})
