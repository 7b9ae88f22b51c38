"""vLLM's compile cache (module_utils/plan/compile_cache.py): one folder per image and compile-relevant configuration,
named in every rank's container, mounted read-write from the node's container/ folder; settings vLLM hashes itself
share the folder and recreate nothing."""

import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import compile_cache, deployment, profiles

from helpers import ROOT, spark_inputs

ARGV = ("vllm", "serve", "org/model", "--tensor-parallel-size", "2", "--max-model-len", "8192", "--gpu-memory-utilization", "0.8",
        "--quantization", "fp4", "--kv-cache-dtype=fp8", "--enforce-eager")
IMAGE_ID = "sha256:" + "ab" * 32


def name(argv=None, env=None, image_id=IMAGE_ID, revision="r1"):
    return compile_cache.folder(image_id, "org/model", revision, list(ARGV if argv is None else argv), env or {"VLLM_HOST_IP": "10.0.0.1"})


def test_the_folder_is_the_image_and_what_is_compiled():
    first = name()
    assert first.startswith("abababababab-") and len(first) == 25 and name() == first
    # what vLLM hashes itself inside the folder, and what is each node's, share it
    assert name(list(ARGV)[:6] + ["1024"] + list(ARGV)[7:]) == first and name(list(ARGV)[:8] + ["0.5"] + list(ARGV)[9:]) == first
    assert name(env={"VLLM_HOST_IP": "10.0.0.2"}) == first
    # what changes the compiled graphs gets its own
    others = {name(image_id="sha256:" + "cd" * 32), name(revision="r2"), name(list(ARGV)[:-1]), name([a.replace("fp8", "auto") for a in ARGV]),
              name(list(ARGV)[:4] + ["4"] + list(ARGV)[5:]), name(env={"VLLM_NVFP4_GEMM_BACKEND": "marlin"})}
    assert first not in others and len(others) == 6
    assert compile_cache.environment(first) == {"VLLM_CACHE_ROOT": "/dgx-spark/cache", "TORCHINDUCTOR_CACHE_DIR": "/dgx-spark/cache/inductor"}


def test_stale_folders_are_those_of_images_no_longer_kept_and_only_names_of_ours():
    names = ["aaaaaaaaaaaa-111111111111", "bbbbbbbbbbbb-222222222222", "notes", "aaaaaaaaaaaa"]
    assert compile_cache.stale(names, {"kept_images": ["kept:lab-bbbbbbbbbbbb"]}) == ["aaaaaaaaaaaa-111111111111"]
    assert compile_cache.stale(names, {"image_id": "sha256:aaaaaaaaaaaa" + "0" * 52, "kept_images": []}) == ["bbbbbbbbbbbb-222222222222"]
    # a record naming no image (its ID unknown) lets nothing go, and the plan names no folder then
    assert compile_cache.stale(names, {"image_id": None, "kept_images": []}) == []
    assert name(image_id=None) is None and compile_cache.environment(None) == {}


def test_variables_that_change_nothing_compiled_share_the_folder():
    assert name(env={"VLLM_NCCL_SO_PATH": "/x", "VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_RPC_TIMEOUT": "9"}) == name()


def test_every_rank_writes_its_nodes_cache_and_a_new_context_length_recreates_no_container(tmp_path):
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    m25["model"]["revision"] = "0123456789abcdef0123456789abcdef01234567"
    plan = deployment.plan_deployment(spark_inputs(m25, tmp_path))
    assert plan["ok"], plan["errors"]
    folder = plan["cluster"]["compile_cache"]["folder"]
    for node in ("spark1", "spark2"):
        spec = plan["nodes"][node]["containers"][0]
        assert spec["env"]["VLLM_CACHE_ROOT"] == "/dgx-spark/cache"
        # its own configuration's folder alone, read-write: never the cache folder whole
        cached = [v for v in spec["volumes"] if "/container/cache" in v]
        assert cached == ["/var/lib/dgx-spark-vllm/dgx-spark/container/cache/%s:/dgx-spark/cache" % folder]
    inputs = spark_inputs(m25, tmp_path)
    inputs["overrides"] = {"max_model_len": 4096}
    shorter = deployment.plan_deployment(inputs)
    assert shorter["cluster"]["compile_cache"]["folder"] == folder
    assert [shorter["nodes"][n]["config_hash"] for n in ("spark1", "spark2")] == [plan["nodes"][n]["config_hash"] for n in ("spark1", "spark2")]
