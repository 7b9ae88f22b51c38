"""What Python vLLM loads beyond its image: refused unless pinned (module_utils/plan/code.py)."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import code
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import Findings

SHA = "ab" * 32


def checked(flags, envs=(), pins=None):
    findings = Findings()
    used = code.check(flags, list(envs), pins, findings)
    return used, [e["message"] for e in findings.errors], findings.warnings


def test_a_plugin_file_runs_only_with_its_sha256_pinned():
    used, errors, dummy = checked({"--reasoning-parser-plugin": "/models/huggingface/p.py"})
    assert used == [] and len(errors) == 1
    assert "loads /models/huggingface/p.py" in errors[0] and "vllm_code_pins: {/models/huggingface/p.py:" in errors[0]
    used, errors, warned = checked({"--reasoning-parser-plugin": "/models/huggingface/p.py"}, pins={"/models/huggingface/p.py": SHA.upper()})
    assert errors == [] and warned == [] and used == [{"path": "/models/huggingface/p.py", "sha256": SHA}]


def test_a_pin_that_is_not_a_sha256_pins_nothing():
    dummy, errors, dummy = checked({"--tool-parser-plugin": "/models/t.py"}, pins={"/models/t.py": "md5:abc"})
    assert len(errors) == 1 and "gives it no sha256" in errors[0]
    dummy, errors, dummy = checked({}, pins=["/models/t.py"])
    assert errors == ["vllm_code_pins must map each file's path (as the container sees it) to its sha256"]


def test_module_names_resolve_in_the_image_and_pass():
    flags = {"--logits-processors": ["vllm.v1.sample.logits_processor.MinPLogitsProcessor", "mypkg.procs.Custom"],
             "--middleware": ["mypkg.mw:add_headers"], "--worker-cls": "auto", "--scheduler-cls": "vllm.v1.core.sched.scheduler.Scheduler",
             "--tool-parser-plugin": "mypkg.tool_parsers"}
    assert checked(flags) == ([], [], [])


def test_a_model_repositorys_code_or_a_relative_path_is_refused():
    dummy, errors, dummy = checked({"--worker-extension-cls": "transformers_modules.org.model.ext.Cls"})
    assert len(errors) == 1 and "a model repository's own code" in errors[0] and "--trust-remote-code" in errors[0]
    for value in ("parsers/mine.py", "/models/../etc/p.py", "./p.py"):
        dummy, errors, dummy = checked({"--reasoning-parser-plugin": value}, pins={value: SHA})
        assert len(errors) == 1 and "neither a module of the image nor an absolute, normalized path" in errors[0], value


def test_variables_that_widen_pythons_path_are_refused_wherever_given():
    envs = [("profile p: env", {"PYTHONPATH": "/models/lib", "VLLM_X": "1"}), ("vllm_extra_env", {"LD_PRELOAD": "/models/x.so", "PYTHONHOME": None})]
    dummy, errors, dummy = checked({}, envs)
    assert len(errors) == 2
    assert "profile p: env sets PYTHONPATH" in errors[0] and "vllm_extra_env sets LD_PRELOAD" in errors[1]
    assert all("/models" not in e for e in errors)  # the variable is named, its value is not repeated


def test_variables_that_open_a_way_around_the_key_or_load_code_are_refused():
    envs = [("vllm_extra_env", {name: "1" for name in code.OPENING_ENV}), ("profile p: env", {"VLLM_SERVER_DEV_MODE": "1"}),
            ("vllm_extra_env", {"CUSTOM_PRE_PROCESS": None})]  # a null takes the profile's out
    dummy, errors, dummy = checked({}, envs)
    assert len(errors) == len(code.OPENING_ENV) + 1 and all(e.endswith(": remove it; nothing was changed") for e in errors)
    for says in ("vllm_extra_env sets VLLM_SERVER_DEV_MODE, which opens vLLM's development routes without its key",
                 "profile p: env sets VLLM_SERVER_DEV_MODE, which opens", "vllm_extra_env sets CUSTOM_SCRIPT_FILENAME, which loads a Python file",
                 "vllm_extra_env sets RAY_AUTH_MODE, which would switch off Ray's token authentication"):
        assert sum(says in e for e in errors) == 1, (says, errors)


def test_a_pin_no_flag_uses_is_warned():
    dummy, errors, warned = checked({}, pins={"/models/old.py": SHA})
    assert errors == [] and warned == ["vllm_code_pins names /models/old.py, which no flag loads; the launcher checks only the files vLLM loads"]


def test_the_seed_profiles_plugin_is_checked_at_every_launch_and_a_new_pin_relaunches(tmp_path):
    """Seed 004's --reasoning-parser-plugin file: pinned, the head's serve command checks it before vLLM; pinned anew
    (the file reviewed again), vLLM is launched again, since the running one loaded the old file."""
    import yaml

    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import deployment
    from helpers import ROOT, spark_inputs

    with open("%s/profiles/nemotron3_super_nvfp4.yml" % ROOT, encoding="utf-8") as handle:
        profile = yaml.safe_load(handle)
    path = profile["vllm"]["flags"]["--reasoning-parser-plugin"]
    hashes = []
    for sha in ("1" * 64, "2" * 64):
        plan = deployment.plan_deployment(spark_inputs(profile, tmp_path / sha[0], settings={"code_pins": {path: sha}}))
        assert plan["ok"], plan["errors"]
        head = plan["nodes"][plan["head"]]["serve"]
        assert "--dgx-spark-pin=%s:%s" % (sha, path) in head["command"]
        assert head["command"].index("--dgx-spark-pin=%s:%s" % (sha, path)) < head["command"].index("--reasoning-parser-plugin")
        hashes.append(head["config_hash"])
    assert hashes[0] != hashes[1]
