"""planner: one pure plan from inventory, probe facts (captured) and a profile."""

import copy
import hashlib
import json
import os
import sys

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import (
    deployment, memory_model, planner, profiles)
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_probe
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import render

from helpers import GOLDEN, MODEL_REPO, ROOT, fixture, make_cache, read_fixture, spark_inputs

PROFILES = os.path.join(ROOT, "profiles")
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def profile(name):
    return profiles.load(profiles.find(name, [PROFILES]))


def errors(plan):
    return [e["message"] for e in plan["errors"]]


PINNED = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(name="m25")
def fixture_m25():
    """The M2.5 profile pinned to a commit, as --trust-remote-code requires (the sample inventory says how)."""
    pinned = profile("minimax_m25_nvfp4_ep")
    pinned["model"]["revision"] = PINNED
    return pinned


def test_ray_plan_for_two_sparks(tmp_path, m25):
    plan = deployment.plan_deployment(spark_inputs(m25, tmp_path))
    assert plan["ok"], plan["errors"]
    head, worker = plan["nodes"]["spark1"], plan["nodes"]["spark2"]
    assert (head["rank"], worker["rank"]) == (0, 1)
    # fact 6: each node's own fabric IP, in the environment of its ray start and as --node-ip-address
    assert head["env_node"]["VLLM_HOST_IP"] == "192.168.100.10"
    assert worker["env_node"]["VLLM_HOST_IP"] == "192.168.100.11"
    head_cmd, worker_cmd = head["containers"][0]["command"], worker["containers"][0]["command"]
    assert head_cmd[:4] == ["ray", "start", "--head", "--port"]
    assert "--include-dashboard=false" in head_cmd
    assert head_cmd[head_cmd.index("--node-ip-address") + 1] == "192.168.100.10"
    assert worker_cmd[worker_cmd.index("--address") + 1] == "192.168.100.10:6379"
    assert worker_cmd[worker_cmd.index("--node-ip-address") + 1] == "192.168.100.11"
    for cmd in (head_cmd, worker_cmd):  # fact 5
        assert cmd[cmd.index("--object-store-memory") + 1] == "1073741824"
        assert cmd[cmd.index("--num-gpus") + 1] == "1"
    # fact 8: the GID index is per node, never one value for the cluster
    assert head["env_node"]["NCCL_IB_GID_INDEX"] == "3"
    assert worker["env_node"]["NCCL_IB_GID_INDEX"] == "5"
    assert head["env_node"]["NCCL_NET_GDR_LEVEL"] == "LOC"
    # fact 7: kernel-selecting variables are identical on every rank
    assert head["env_common"] == worker["env_common"]
    assert head["env_common"]["VLLM_NVFP4_GEMM_BACKEND"] == "marlin"
    assert head["env_common"]["RAY_memory_monitor_refresh_ms"] == "0"
    per_node = {"VLLM_HOST_IP", "NCCL_IB_GID_INDEX", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "VLLM_API_KEY"}
    assert set(plan["cluster"]["non_carry_over_env_vars"]) >= per_node
    # fact 1: vllm serve runs inside the head's Ray container, never as a ray:// client
    serve = head["serve"]
    assert serve["container"] == head["containers"][0]["name"] == "dgx-spark-ray-spark1"
    assert serve["argv"][-2:] == ["--distributed-executor-backend", "ray"]
    assert "ray://" not in json.dumps(plan)
    # fact 8: identical container flags on every node
    for key in ("network_mode", "ipc_mode", "devices", "capabilities", "ulimits", "gpus"):
        assert head["containers"][0][key] == worker["containers"][0][key]
    assert head["containers"][0]["devices"] == ["/dev/infiniband:/dev/infiniband"]
    assert "memlock:-1:-1" in head["containers"][0]["ulimits"]
    # fact 16: no --rm; containers carry the collection's labels and a config hash
    labels = head["containers"][0]["labels"]
    assert labels["dgx_spark.vllm.managed"] == "true" and labels["dgx_spark.vllm.config_hash"] == head["config_hash"]
    assert plan["cluster"]["expected_ray_nodes"] == 2 and plan["cluster"]["expected_ray_gpus"] == 2
    assert plan["cluster"]["endpoint"]["url"] == "http://192.168.1.101:8000"
    assert plan["parallel"]["expert_parallel"] is True and "--enable-expert-parallel" in serve["argv"]


def test_mp_plan_ranks(tmp_path, m25):
    plan = deployment.plan_deployment(spark_inputs(m25, tmp_path, backend="mp"))
    assert plan["ok"], plan["errors"]
    head, worker = plan["nodes"]["spark1"]["serve"]["argv"], plan["nodes"]["spark2"]["serve"]["argv"]
    for argv, rank in ((head, "0"), (worker, "1")):
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--node-rank") + 1] == rank
        assert argv[argv.index("--master-addr") + 1] == "192.168.100.10"
        assert argv[argv.index("--master-port") + 1] == "29501"
    assert "--headless" not in head and worker[-1] == "--headless"
    assert plan["nodes"]["spark2"]["containers"][0]["command"][0] == "/dgx-spark/bin/vllm-serve"
    assert "RAY_memory_monitor_refresh_ms" not in plan["cluster"]["env_common"]


def test_config_hash_moves_only_where_the_change_lands(tmp_path, m25):
    base = deployment.plan_deployment(spark_inputs(m25, tmp_path / "a"))
    inputs = spark_inputs(m25, tmp_path / "b")
    assert deployment.plan_deployment(inputs)["nodes"]["spark2"]["config_hash"] == base["nodes"]["spark2"]["config_hash"]
    inputs["nodes"]["spark2"]["fabric_interfaces"] = ["enP2p1s0f1np1"]
    changed = deployment.plan_deployment(inputs)
    assert changed["nodes"]["spark2"]["config_hash"] != base["nodes"]["spark2"]["config_hash"]
    assert changed["nodes"]["spark1"]["config_hash"] == base["nodes"]["spark1"]["config_hash"]
    assert changed["cluster"]["serve_config_hash"] != base["cluster"]["serve_config_hash"]
    inputs = spark_inputs(m25, tmp_path / "c")
    inputs["extra_env"] = {"VLLM_MARLIN_USE_ATOMIC_ADD": "1"}
    common = deployment.plan_deployment(inputs)
    assert all(common["nodes"][n]["config_hash"] != base["nodes"][n]["config_hash"] for n in ("spark1", "spark2"))


def test_m3_on_three_nodes_with_uneven_heads_allowed(tmp_path):
    m3 = profile("minimax_m3_nvfp4_tp3")
    inputs = spark_inputs(m3, tmp_path, count=3)
    inputs["model_config"] = {"num_hidden_layers": 62, "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128}
    plan = deployment.plan_deployment(inputs)
    assert plan["ok"], plan["errors"]
    assert any("TP=3 neither divides the 8 KV heads" in w for w in plan["warnings"])
    assert plan["nodes"]["spark3"]["rank"] == 2
    # spark3's two ports disagree (3 and 5): NCCL picks per device there
    assert "NCCL_IB_GID_INDEX" not in plan["nodes"]["spark3"]["env_node"]
    assert "--load-format" in plan["cluster"]["vllm_argv"]


def test_uneven_heads_are_refused_without_the_profiles_permission(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path, count=3)
    inputs["overrides"] = {"tensor_parallel_size": 3}
    plan = deployment.plan_deployment(inputs)
    assert "TP=3 neither divides the 8 KV heads nor is a multiple of them of lukealonso/MiniMax-M2.5-NVFP4" in errors(plan)[0]


def test_node_count_not_matching_parallel_sizes(tmp_path, m25):
    plan = deployment.plan_deployment(spark_inputs(m25, tmp_path, count=3))
    assert plan["ok"] is False and plan["stage"] == "full"
    assert errors(plan) == ["TP x PP x DP = 2 x 1 x 1 = 2, but the inventory has 3 node(s) with 1 GPU(s) each = 3; "
                            "profile minimax_m25_nvfp4_ep is for 2 node(s): add or remove nodes, or choose another profile"]


def test_model_that_does_not_fit_names_node_and_shortfall(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path, meminfo="gb10-page-cache.txt")
    inputs["overrides"] = {"gpu_memory_utilization": 0.92}  # 110.1 GiB of the 119.67 CUDA reports; 108.2 GiB available
    plan = deployment.plan_deployment(inputs)
    assert plan["ok"] is False
    assert {e["host"] for e in plan["errors"]} == {"spark1", "spark2"}
    assert "short by" in errors(plan)[0] and "Drop page caches" in errors(plan)[0]


def test_same_fabric_ip_twice(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["nodes"]["spark2"]["fabric_ip"] = "192.168.100.10"
    plan = deployment.plan_deployment(inputs)
    assert errors(plan) == ["spark1 and spark2 have the same spark_fabric_ip 192.168.100.10; each node needs its own"]


@pytest.mark.parametrize("heads", [[], ["spark1", "spark2"]])
def test_not_exactly_one_head(tmp_path, m25, heads):
    inputs = spark_inputs(m25, tmp_path)
    inputs["head_hosts"] = heads
    plan = deployment.plan_deployment(inputs)
    assert "exactly one host in spark_head, found %d" % len(heads) in errors(plan)[0]


def test_ray_client_address_is_refused(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["extra_env"] = {"RAY_ADDRESS": "ray://192.168.100.10:10001"}
    assert "Ray Client address" in errors(deployment.plan_deployment(inputs))[0]


def test_mp_with_an_image_without_nnodes(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path, backend="mp")
    for key in ("--nnodes", "-n"):
        inputs["image_info"]["options"].pop(key, None)
    plan = deployment.plan_deployment(inputs)
    assert any("backend mp needs vLLM's --nnodes" in m for m in errors(plan))


def test_ray_without_token_authentication_is_refused(tmp_path, m25):
    """Ray before 2.52 has no token authentication: anyone who reaches its ports runs code on the cluster."""
    inputs = spark_inputs(m25, tmp_path)
    inputs["image_info"]["ray_version"] = "2.51.1"
    assert any("has Ray 2.51.1, without token authentication (Ray 2.52 and later)" in m for m in errors(deployment.plan_deployment(inputs)))
    inputs = spark_inputs(m25, tmp_path, backend="mp")  # no Ray runs: nothing to authenticate
    inputs["image_info"]["ray_version"] = "2.51.1"
    assert deployment.plan_deployment(inputs)["ok"]


def test_every_ray_container_asks_for_the_token_and_a_new_token_restarts_ray(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["ray_token_digest"] = "aaaa"
    plan = deployment.plan_deployment(inputs)
    assert plan["cluster"]["ray_token_file"] == "inventories/sparks/.secrets/ray_auth_token"  # beside the clients' key
    for node in plan["nodes"].values():
        env = node["containers"][0]["env"]
        assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == "/dgx-spark/keys/ray_auth_token"
        assert node["paths"]["ray_token_file"].endswith("/container/keys/ray_auth_token")
    inputs["ray_token_digest"] = "bbbb"
    again = deployment.plan_deployment(inputs)
    assert all(again["nodes"][n]["config_hash"] != plan["nodes"][n]["config_hash"] for n in plan["nodes"])
    mp = deployment.plan_deployment(spark_inputs(m25, tmp_path, backend="mp"))
    assert mp["cluster"]["ray_token_file"] is None
    assert not any(k.startswith("RAY_AUTH") for n in mp["nodes"].values() for k in n["containers"][0]["env"])


def test_missing_gid_facts_on_a_node_that_needs_roce(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["nodes"]["spark2"]["roce"] = {"roce_devices": [], "nccl_ib_hca": None, "nccl_gid_index": None}
    plan = deployment.plan_deployment(inputs)
    assert errors(plan)[0].startswith("spark2 has no usable RoCE GID while spark1 have RoCE")
    inputs["settings"]["nccl_transport"] = "socket"
    plan = deployment.plan_deployment(inputs)
    assert plan["ok"] and plan["nodes"]["spark1"]["env_node"]["NCCL_IB_DISABLE"] == "1"


def test_fabric_ip_not_on_a_roce_port(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["nodes"]["spark2"]["fabric_ip"] = "10.0.0.2"
    assert "spark2: spark_fabric_ip 10.0.0.2 is not carried by any ACTIVE RoCE port (they carry 192.168.100.11, 192.168.101.11)" \
        in errors(deployment.plan_deployment(inputs))[0]


def test_slow_fabric_interface_is_a_warning(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["nodes"]["spark2"]["fabric_interfaces"] = ["enP7s7"]
    plan = deployment.plan_deployment(inputs)
    assert plan["ok"]
    assert any(w.startswith("spark2: the fabric interface enP7s7 is not a ConnectX RoCE port") for w in plan["warnings"])


def test_flag_the_image_lacks_is_refused_or_dropped(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["extra_flags"] = {"--swap-space": 4}
    assert "does not accept --swap-space" in errors(deployment.plan_deployment(inputs))[0]
    inputs["profile"]["vllm"]["optional_flags"] = ["--swap-space"]
    plan = deployment.plan_deployment(inputs)
    assert plan["ok"] and "--swap-space" not in plan["cluster"]["vllm_argv"]
    assert any("does not accept --swap-space; dropped" in w for w in plan["warnings"])


def test_a_profile_raises_vllms_rank_sync_timeouts_as_seed_002_raised_sglangs(tmp_path, m25):
    """Seed 002 raised SGLang's --dist-timeout to 1800 s for nodes loading at different speeds; vLLM's counterparts in
    the image (--distributed-timeout-seconds, NCCL's; --cpu-distributed-timeout-seconds, gloo's) are settable by a
    profile's vllm.flags and reach every rank's argv; the seed profiles set neither (docs/profiles.md says why)."""
    inputs = spark_inputs(m25, tmp_path)
    assert "--distributed-timeout-seconds" not in deployment.plan_deployment(copy.deepcopy(inputs))["cluster"]["vllm_argv"]
    inputs["profile"]["vllm"]["flags"].update({"--distributed-timeout-seconds": "1800", "--cpu-distributed-timeout-seconds": "1800"})
    plan = deployment.plan_deployment(inputs)
    assert plan["ok"], plan["errors"]
    argv = plan["cluster"]["vllm_argv"]
    assert argv[argv.index("--distributed-timeout-seconds") + 1] == "1800"
    assert argv[argv.index("--cpu-distributed-timeout-seconds") + 1] == "1800"


def test_flag_value_outside_its_choices(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["extra_flags"] = {"--kv-cache-dtype": "fp7"}
    assert "--kv-cache-dtype fp7 is not one of auto, bfloat16" in errors(deployment.plan_deployment(inputs))[0]


def test_unknown_parser_is_refused(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["profile"]["vllm"]["flags"]["--reasoning-parser"] = "minimax_m9"
    assert "reasoning parser minimax_m9 is not in" in errors(deployment.plan_deployment(inputs))[0]


def test_inventory_stage_needs_no_probes(m25):
    inputs = {"head_hosts": ["a"], "order": ["a", "b"], "profile": m25, "backend": "ray",
              "nodes": {"a": {"fabric_ip": "10.0.0.1"}, "b": {"fabric_ip": "10.0.0.2"}}}
    plan = deployment.plan_deployment(inputs, stage="inventory")
    assert plan["ok"] and "cluster" not in plan


def test_render_shows_commands_memory_and_verdict(tmp_path, m25):
    text = "\n".join(render.render(planner.make_plan(spark_inputs(m25, tmp_path))))
    assert "sequences at max_model_len" in text and "left to the OS" in text and "headroom floor 6.0 GiB" in text
    assert "spark2, container dgx-spark-ray-spark2: ray start --address 192.168.100.10:6379" in text
    assert "inside dgx-spark-ray-spark1: vllm serve lukealonso/MiniMax-M2.5-NVFP4" in text
    assert "Largest context that fits" in text and "Verdict: ready to apply" in text


def test_unknown_profile_lists_the_available_ones():
    with pytest.raises(profiles.ProfileError, match="unknown profile 'minimax_m9'; available: minimax_m25_nvfp4_ep"):
        profiles.find("minimax_m9", [PROFILES])


def test_malformed_profile_names_file_and_key(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("name: bad\nmodel: {id: x}\nparallel: {tensor: 0}\nvllm: {flagz: 1}\n")
    with pytest.raises(profiles.ProfileError) as info:
        profiles.load(str(bad))
    assert "bad.yml: vllm: unknown key 'flagz'" in str(info.value)
    assert "parallel.tensor must be at least 1" in str(info.value)


@pytest.mark.parametrize("name", sorted(os.path.splitext(p)[0] for p in os.listdir(PROFILES) if not p.startswith("sim_")))
def test_profile_golden(name):
    """Every rank's whole container spec and vLLM's argv equal the reviewed golden file
    (``python scripts/seed_tables.py --golden`` writes them; the diff is the review)."""
    import seed_tables  # pylint: disable=import-outside-toplevel

    with open(os.path.join(GOLDEN, name + ".json"), encoding="utf-8") as handle:
        expected = json.load(handle)
    got = json.loads(json.dumps(seed_tables.golden(name)))
    assert got == expected


def test_sim_tiny_profile_plans_on_the_simulated_shape(tmp_path):
    sim = profile("sim_tiny")
    inputs = spark_inputs(sim, tmp_path, settings={"network_mode": "container:{node}", "ipc_mode": "private", "shm_size": "2g",
                                                   "devices": [], "gpus": "none", "simulated": True, "state_dir": "/sim/{node}/state"})
    inputs["model_config"] = {"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
                              "hidden_size": 128, "max_position_embeddings": 4096}
    plan = deployment.plan_deployment(copy.deepcopy(inputs))
    assert plan["ok"], plan["errors"]
    spec = plan["nodes"]["spark2"]["containers"][0]
    assert spec["network_mode"] == "container:spark2"
    assert spec["gpus"] is None and spec["devices"] == []
    assert spec["volumes"][0] == "/sim/spark2/state/dgx-spark/container/config:/dgx-spark/config:ro"  # a worker's first
    assert plan["cluster"]["memory"]["nodes"]["spark1"]["kv_tokens"] == 2097152


def test_utilization_outside_zero_one_is_refused_before_probing(m25):
    inputs = {"head_hosts": ["a"], "order": ["a", "b"], "profile": m25, "backend": "ray", "overrides": {"gpu_memory_utilization": 1.5},
              "nodes": {"a": {"fabric_ip": "10.0.0.1"}, "b": {"fabric_ip": "10.0.0.2"}}}
    plan = deployment.plan_deployment(inputs, stage="inventory")
    assert errors(plan) == ["gpu_memory_utilization must be in (0, 1], got 1.5; vLLM requests that share of each node's memory"]


def test_context_longer_than_the_model_is_refused(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["overrides"] = {"max_model_len": 300000}
    inputs["profile"]["env"].pop("VLLM_ALLOW_LONG_MAX_MODEL_LEN")
    assert "max_model_len 300000 exceeds the model's 196608 tokens" in errors(deployment.plan_deployment(inputs))[0]


def test_ring_plan_adds_subnet_aware_routing_with_the_links_prefix(tmp_path):
    m3 = profile("minimax_m3_nvfp4_tp3")
    inputs = spark_inputs(m3, tmp_path, count=3, settings={"ring": {"links": [
        {"subnet": "192.168.10.0/30", "a": "spark1", "a_if": "enp1s0f0np0", "b": "spark2", "b_if": "enp1s0f1np1"},
        {"subnet": "192.168.20.0/30", "a": "spark2", "a_if": "enp1s0f0np0", "b": "spark3", "b_if": "enp1s0f1np1"},
        {"subnet": "192.168.30.0/30", "a": "spark3", "a_if": "enp1s0f0np0", "b": "spark1", "b_if": "enp1s0f1np1"}]}})
    plan = deployment.plan_deployment(inputs)
    assert plan["ok"], plan["errors"]
    for node in plan["nodes"].values():
        assert node["env_node"]["NCCL_IB_SUBNET_AWARE_ROUTING"] == "1"
        assert node["env_node"]["NCCL_IB_SUBNET_PREFIX_LEN"] == "30"
        assert node["env_node"]["NCCL_ALGO"] == "Ring"


def test_offline_plan_has_placeholders_and_says_so(m25):
    inputs = {"head_hosts": ["a"], "order": ["a", "b"], "profile": m25, "backend": "ray",
              "settings": {"image": "x", "offline": True},
              "nodes": {"a": {"fabric_ip": "10.0.0.1", "fabric_interfaces": ["enp1s0f1np1"]},
                        "b": {"fabric_ip": "10.0.0.2", "fabric_interfaces": ["enp1s0f1np1"]}}}
    plan = deployment.plan_deployment(inputs)
    assert plan["ok"], plan["errors"]
    assert plan["nodes"]["b"]["env_node"]["NCCL_IB_HCA"] == "<ACTIVE RoCE ports, probed on b>"
    assert plan["warnings"][0].startswith("offline plan: no node was probed")


def test_socket_transport_turns_strict_mode_off_with_a_warning(tmp_path):
    mxfp4 = profile("minimax_m27_mxfp4")
    plan = deployment.plan_deployment(spark_inputs(mxfp4, tmp_path, settings={"nccl_transport": "socket", "nccl_strict": True}))
    assert plan["ok"], plan["errors"]
    assert any(w.startswith("vllm_nccl_transport is socket, so strict mode (vllm_nccl_strict, NCCL_NET=IB) is off")
               for w in plan["warnings"])
    env = plan["nodes"]["spark2"]["env"]
    assert (env["NCCL_IB_DISABLE"], env["NCCL_P2P_DISABLE"], "NCCL_NET" in env) == ("1", "1", False)
    assert plan["cluster"]["nccl_strict"] is False
    # strict with RoCE keeps NCCL_NET=IB
    strict = deployment.plan_deployment(spark_inputs(mxfp4, tmp_path / "b", settings={"nccl_strict": True}))
    assert strict["nodes"]["spark2"]["env"]["NCCL_NET"] == "IB"


def test_extra_env_null_takes_a_profile_variable_out(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["extra_env"] = {"PYTORCH_CUDA_ALLOC_CONF": None, "RAY_memory_monitor_refresh_ms": None}
    env = deployment.plan_deployment(inputs)["cluster"]["env_common"]
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env and "RAY_memory_monitor_refresh_ms" not in env


def test_offline_plan_plans_memory_for_an_idle_spark(m25):
    inputs = {"head_hosts": ["a"], "order": ["a", "b"], "profile": m25, "backend": "ray", "settings": {"image": "x", "offline": True},
              "nodes": {"a": {"fabric_ip": "10.0.0.1", "fabric_interfaces": ["enp1s0f1np1"]},
                        "b": {"fabric_ip": "10.0.0.2", "fabric_interfaces": ["enp1s0f1np1"]}}}
    memory = deployment.plan_deployment(inputs)["cluster"]["memory"]
    assert memory["nodes"]["a"]["requested_bytes"] == int(-(-memory_model.GB10_CUDA_TOTAL_BYTES * 0.85 // 1))
    assert memory["nodes"]["a"]["kv_tokens"] > 4096


def test_plan_names_every_path_port_and_url_the_roles_use(tmp_path, m25):
    plan = deployment.plan_deployment(spark_inputs(m25, tmp_path, settings={"port": 9000, "state_dir": "/srv/{node}/state"}))
    head = plan["nodes"]["spark1"]
    assert head["paths"]["state_dir"] == "/srv/spark1/state/dgx-spark"
    assert head["paths"]["launcher"] == "/srv/spark1/state/dgx-spark/container/bin/vllm-serve"
    assert head["paths"]["model_dir"].endswith("/huggingface/hub/models--" + m25["model"]["id"].replace("/", "--"))
    assert head["ports"] == [6379, 9000] and plan["nodes"]["spark2"]["ports"] == []
    endpoint = plan["cluster"]["endpoint"]
    assert endpoint["health_url"] == "http://192.168.1.101:9000/health"
    assert endpoint["local_health_url"] == "http://192.168.1.101:9000/health"
    # vLLM joins the head's Ray by its address, launched before that Ray is up (commands.serve_command)
    assert head["serve"]["command"] == ["env", "RAY_ADDRESS=" + plan["cluster"]["ray_address"], "RAY_gcs_server_port_wait_time_s=120",
                                        "/dgx-spark/bin/vllm-serve"] + head["serve"]["argv"][2:]
    fetch = head["helpers"]["model_fetch"]["argv"]
    assert fetch[:5] == ["docker", "run", "--rm", "--name", "dgx-spark-model-fetch"]
    assert "--token-file" in fetch and not any(a.startswith(("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")) for a in fetch)


def test_inventory_stage_names_the_paths_before_any_probe(tmp_path, m25):
    plan = deployment.plan_deployment(spark_inputs(m25, tmp_path), stage="inventory")
    assert plan["ok"] and plan["nodes"]["spark2"]["paths"]["models_dir"] == "/var/lib/dgx-spark-vllm/models"


def door_running(plan):
    """The probe's line of the deployment's front door running as planned."""
    spec = plan["cluster"]["door"]["container"]
    return json.dumps({"Names": spec["name"], "State": "running", "Labels": ",".join("%s=%s" % kv for kv in spec["labels"].items())})


def model_copies(tmp_path, head_skip=(), worker_skip=(), worker_commit=None):
    """The probe's read of each node's copy of the captured fetch (node_probe.model_copy, on trees rebuilt at their
    captured sizes): the head keeps the fetch's manifest, the worker got its copy from the head."""
    with open(fixture("model", "manifest.json"), encoding="utf-8") as handle:
        manifest = json.load(handle)
    read = {}
    for name, skip, commit in (("spark1", head_skip, None), ("spark2", worker_skip, worker_commit)):
        models_dir = str(tmp_path / ("models-" + name))
        make_cache(models_dir, dict(manifest, commit=commit or manifest["commit"]), skip=skip, record=name == "spark1")
        read[name] = node_probe.model_copy(models_dir, MODEL_REPO)
    return read, manifest


def model_plan(tmp_path, m25, copies, **settings):
    inputs = spark_inputs(m25, tmp_path, settings=settings)
    for name in inputs["nodes"]:  # fresh nodes: no container of ours keeps a models folder
        inputs["nodes"][name]["docker_ps"] = []
    for name, read in copies.items():
        inputs["nodes"][name]["model_copy"] = read
    return deployment.plan_deployment(inputs)


def test_the_probe_reads_every_copy_and_the_plan_skips_the_model_step_only_when_all_are_complete(tmp_path, m25):
    copies, manifest = model_copies(tmp_path / "whole")
    assert copies["spark1"]["manifest"] == manifest and copies["spark2"]["manifest"] is None
    plan = model_plan(tmp_path / "a", m25, copies)
    assert plan["cluster"]["model_ready"], [plan["nodes"][n]["model_copy"] for n in ("spark1", "spark2")]
    whole = sum(f["size"] for f in manifest["files"].values())
    assert [plan["nodes"][n]["model_copy"]["bytes_present"] for n in ("spark1", "spark2")] == [whole, whole]
    text = "\n".join(render.deployment(plan))
    assert "complete on every node, nothing to fetch or copy" in text and "  spark2: complete (" in text
    # The model step runs again (and says what it does) where any of it is not so.
    shard = sorted(p for p in manifest["files"] if p.endswith(".safetensors"))[0]
    copies, dummy = model_copies(tmp_path / "shard", worker_skip=(shard,))
    plan = model_plan(tmp_path / "b", m25, copies)
    assert not plan["cluster"]["model_ready"] and plan["nodes"]["spark1"]["model_copy"]["complete"]
    assert plan["nodes"]["spark2"]["model_copy"]["message"] == "missing " + shard
    assert "checked again, fetched or copied by the apply" in "\n".join(render.deployment(plan))
    copies, dummy = model_copies(tmp_path / "head", head_skip=(shard,))
    assert not model_plan(tmp_path / "c", m25, copies)["cluster"]["model_ready"]
    copies, dummy = model_copies(tmp_path / "commit", worker_commit="f" * 40)
    other = model_plan(tmp_path / "d", m25, copies)
    assert not other["cluster"]["model_ready"] and not other["nodes"]["spark2"]["model_copy"]["complete"]
    copies, dummy = model_copies(tmp_path / "sums")
    assert not model_plan(tmp_path / "e", m25, copies, model_verify_checksums=True)["cluster"]["model_ready"]
    # A node whose copy was not read (no probe) is never taken as complete, nor a running container's folder left as is.
    assert not model_plan(tmp_path / "f", m25, {"spark1": copies["spark1"]})["cluster"]["model_ready"]
    inputs = spark_inputs(m25, tmp_path / "g")
    for name in inputs["nodes"]:
        inputs["nodes"][name]["model_copy"] = copies[name]
    kept = deployment.plan_deployment(inputs)  # containers not listed: each may keep its folder
    assert kept["nodes"]["spark1"]["models_mount_kept"] and not kept["cluster"]["model_ready"]


def test_a_replaced_ray_head_restarts_the_workers_and_vllm(tmp_path, m25):
    first = deployment.plan_deployment(spark_inputs(m25, tmp_path / "a"))

    def ps(plan, name, state="running", hash_of=None):
        spec = plan["nodes"][name]["containers"][0]
        labels = dict(spec["labels"])
        if hash_of:
            labels["dgx_spark.vllm.config_hash"] = hash_of
        return json.dumps({"Names": spec["name"], "State": state, "Labels": ",".join("%s=%s" % kv for kv in labels.items())})

    inputs = spark_inputs(m25, tmp_path / "b")
    serve_hash = first["nodes"]["spark1"]["serve"]["config_hash"]
    inputs["nodes"]["spark1"].update(docker_ps=[ps(first, "spark1"), door_running(first)], vllm={"running": True, "config_hash": serve_hash})
    inputs["nodes"]["spark2"].update(docker_ps=[ps(first, "spark2")])
    same = deployment.plan_deployment(copy.deepcopy(inputs))
    assert same["cluster"]["changes"] == [] and same["nodes"]["spark1"]["serve"]["change"] == "none"
    # A running container of ours left as it is keeps the models folder it started with: the model role asks it (the
    # stale check). Where the probe listed none (a fresh node), or this run starts every one anew (each recreated or
    # restarted), there is nothing to ask; a container of ours the plan does not name is asked about too.
    assert all(same["nodes"][n]["models_mount_kept"] and same["nodes"][n]["stale_models_argv"] for n in ("spark1", "spark2"))
    fresh = copy.deepcopy(inputs)
    fresh["nodes"]["spark1"].update(docker_ps=[], vllm=None)
    fresh["nodes"]["spark2"].update(docker_ps=[])
    fresh_plan = deployment.plan_deployment(copy.deepcopy(fresh))
    assert [fresh_plan["nodes"][n]["models_mount_kept"] for n in ("spark1", "spark2")] == [False] * 2
    # Every node's Ray container is made before vLLM's launch, the workers' with the head's (ray_cluster's start): no
    # old head runs whose Ray a worker could join.
    assert [fresh_plan["nodes"][n]["changes"]["dgx-spark-ray-" + n] for n in ("spark1", "spark2")] == ["create", "create"]
    assert fresh_plan["cluster"]["ray_head_first"] is False
    watcher = json.dumps({"Names": "dgx-spark-model-watcher", "State": "running",
                          "Labels": "dgx_spark.vllm.cluster=dgx-spark,dgx_spark.vllm.node=spark2,dgx_spark.vllm.managed=true"})
    fresh["nodes"]["spark2"]["docker_ps"] = [watcher]
    watched = deployment.plan_deployment(fresh)["nodes"]
    assert not watched["spark1"]["models_mount_kept"] and watched["spark2"]["models_mount_kept"]
    inputs["nodes"]["spark1"]["docker_ps"] = [ps(first, "spark1", hash_of="0" * 16), door_running(first)]
    assert [baseline(same["nodes"][n]) for n in ("spark1", "spark2")] == [None, None]
    replaced = deployment.plan_deployment(inputs)
    assert replaced["cluster"]["changes"] == ["spark1: recreate dgx-spark-ray-spark1", "spark2: restart dgx-spark-ray-spark2"]
    assert replaced["nodes"]["spark1"]["serve"]["change"] == "start"
    # The head's running container is replaced: the workers' go after it, or one could join the old head's Ray.
    assert replaced["cluster"]["ray_head_first"] is True
    assert [replaced["nodes"][n]["models_mount_kept"] for n in ("spark1", "spark2")] == [False, False]
    for name in ("spark1", "spark2"):  # vLLM starts again: each node's memory now is the baseline teardown compares with
        assert baseline(replaced["nodes"][name]) is not None


def baseline(node):
    """The memory baseline a launch writes on the node with its state files, or None."""
    found = [f for f in node["writes"]["files"] if f["path"] == node["paths"]["baseline_file"]]
    return found[0] if found else None


def test_the_heads_probe_of_ray_proves_the_join_gate_or_restarts_the_worker_that_left(tmp_path, m25):
    """The ray fact is spark_node_info's reading of a captured 2-node simulated cluster, its addresses (10.210.0.10 and
    .11) replaced by the sample inventory's."""
    first = deployment.plan_deployment(spark_inputs(m25, tmp_path / "a"))

    def ps(name):
        spec = first["nodes"][name]["containers"][0]
        return json.dumps({"Names": spec["name"], "State": "running", "Labels": ",".join("%s=%s" % kv for kv in spec["labels"].items())})

    inputs = spark_inputs(m25, tmp_path / "b")
    captured = read_fixture("ray", "sim-two-nodes.json").replace("10.210.0.1", "192.168.100.1")
    inputs["nodes"]["spark1"].update(docker_ps=[ps("spark1"), door_running(first)], ray=node_probe.ray(0, captured, "", "dgx-spark-ray-spark1"),
                                     vllm={"running": True, "config_hash": first["nodes"]["spark1"]["serve"]["config_hash"]})
    inputs["nodes"]["spark2"].update(docker_ps=[ps("spark2")])
    for name in ("spark1", "spark2"):
        inputs["nodes"][name]["state"] = written(first["nodes"][name])
    healthy = deployment.plan_deployment(copy.deepcopy(inputs))
    assert healthy["cluster"]["apply_needed"] is False and healthy["cluster"]["join_gate_proven"] is True
    text = render.deployment(healthy)
    assert "Changes: none, every container and vLLM run as planned" in text
    assert "Join gate: every node and GPU has joined Ray (read by the head's probe)" in text
    # the head's probe read the front door's image: the apply builds none and asks Docker nothing about it; a worker
    # is not asked for it
    asked = deployment.plan_deployment(spark_inputs(m25, tmp_path / "c"), "inventory")["nodes"]
    assert asked["spark1"]["probe"]["door_image"] == "dgx-spark-vllm/door:1" and "door_image" not in asked["spark2"]["probe"]
    assert healthy["cluster"]["door"]["image_present"] is False
    held = copy.deepcopy(inputs)
    held["nodes"]["spark1"]["door_image_id"] = "sha256:7d3f"
    assert deployment.plan_deployment(held)["cluster"]["door"]["image_present"] is True
    # vLLM running another configuration (its hash differs, every container as planned) is restarted, and the plan
    # says so: it was not down
    other = copy.deepcopy(inputs)
    other["nodes"]["spark1"]["vllm"]["config_hash"] = "an-older-hash"
    other = deployment.plan_deployment(other)
    assert other["nodes"]["spark1"]["serve"]["change"] == "start" and not other["nodes"]["spark1"]["serve"]["stop_first"]
    assert "Changes: spark1: restart vLLM" in render.deployment(other)
    # serve.yml checks it with the other deployments that need no change (the plan's unchanged), not as a launch.
    assert planner.make_plan(copy.deepcopy(inputs))["unchanged"] == ["dgx-spark"]
    # A run that changes nothing restores nothing: tasks/unchanged.yml skips tasks/restore.yml on every node.
    assert {n: healthy["nodes"][n]["restore"] for n in ("spark1", "spark2")} == {"spark1": [], "spark2": []}
    flushed = copy.deepcopy(inputs)
    flushed["nodes"]["spark2"]["firewall"] = "missing"  # nft flush ruleset on the worker: its table alone is loaded again
    flushed = deployment.plan_deployment(flushed)
    assert flushed["cluster"]["apply_needed"] is False
    assert {n: flushed["nodes"][n]["restore"] for n in ("spark1", "spark2")} == {"spark1": [], "spark2": ["firewall"]}
    left = json.loads(captured)
    left["nodes"] = [n for n in left["nodes"] if n["NodeManagerAddress"] != "192.168.100.11"]
    inputs["nodes"]["spark1"]["ray"] = node_probe.ray(0, json.dumps(left), "", "dgx-spark-ray-spark1")
    missing = deployment.plan_deployment(copy.deepcopy(inputs))
    assert missing["cluster"]["changes"] == ["spark2: restart dgx-spark-ray-spark2"]
    assert missing["cluster"]["ray_head_first"] is False  # the head stays: the worker rejoins it at once
    assert planner.make_plan(copy.deepcopy(inputs))["unchanged"] == []  # launched, then verified as a launch
    assert missing["nodes"]["spark1"]["serve"]["change"] == "start" and missing["cluster"]["join_gate_proven"] is False
    # vLLM runs: it is stopped by its process group before the worker's container restarts under its rank (fact 3)
    assert missing["nodes"]["spark1"]["serve"]["stop_first"] and not healthy["nodes"]["spark1"]["serve"]["stop_first"]
    assert "Changes: spark2: restart dgx-spark-ray-spark2; spark1: stop, then start vLLM" in render.deployment(missing)
    inputs["nodes"]["spark1"]["ray"] = node_probe.ray(1, "", "Error response from daemon: No such container: x", "x")
    unread = deployment.plan_deployment(inputs)
    assert unread["cluster"]["apply_needed"] is False and unread["cluster"]["join_gate_proven"] is False  # the gate task waits
    assert unread["nodes"]["spark1"]["restore"] == ["gate"] and unread["nodes"]["spark2"]["restore"] == ["gate"]


def test_groups_outside_spark_cluster_are_refused(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["groups"] = {"spark_cluster": ["spark1"], "spark_head": ["spark1"], "spark_workers": ["spark2"]}
    assert "spark2 in spark_head or spark_workers but not in spark_cluster" in errors(deployment.plan_deployment(inputs, stage="inventory"))[0]


def test_ports_must_be_ports_and_differ(tmp_path, m25):
    assert "vllm_port 70000 is not a TCP port" in errors(deployment.plan_deployment(spark_inputs(m25, tmp_path, settings={"port": 70000})))[0]
    assert "must differ" in errors(deployment.plan_deployment(spark_inputs(m25, tmp_path, settings={"port": 6379})))[0]


def test_a_new_api_key_recreates_only_the_front_door(tmp_path, m25):
    """vLLM holds no key (the front door does): a new key recreates the door, and neither Ray nor vLLM, with either
    backend."""
    inputs = spark_inputs(m25, tmp_path)
    first = deployment.plan_deployment(dict(inputs, api_key_digest="DIGEST-ONE"))
    second = deployment.plan_deployment(dict(inputs, api_key_digest="DIGEST-TWO"))
    assert first["nodes"]["spark2"]["config_hash"] == second["nodes"]["spark2"]["config_hash"]
    assert first["cluster"]["serve_config_hash"] == second["cluster"]["serve_config_hash"]
    door_hash = "dgx_spark.vllm.config_hash"
    assert first["cluster"]["door"]["container"]["labels"][door_hash] != second["cluster"]["door"]["container"]["labels"][door_hash]
    mp_first = deployment.plan_deployment(dict(spark_inputs(m25, tmp_path / "mp", backend="mp"), api_key_digest="DIGEST-ONE"))
    mp_second = deployment.plan_deployment(dict(spark_inputs(m25, tmp_path / "mp2", backend="mp"), api_key_digest="DIGEST-TWO"))
    assert mp_first["nodes"]["spark1"]["config_hash"] == mp_second["nodes"]["spark1"]["config_hash"]
    assert "DIGEST-ONE" not in json.dumps(first) and "DIGEST-TWO" not in json.dumps(second)


def written(node):
    """What a node's probe finds once the plan's writes are done: the folders, the files, the firewall and its unit."""
    found = {f["path"]: "dir" for f in node["paths"]["folders"]}
    found.update({f["path"]: hashlib.sha256(f["content"].encode()).hexdigest()
                  for f in node["writes"]["files"] + node["firewall"]["files"]})
    found[node["firewall"]["wants"]] = found[node["firewall"]["files"][1]["path"]]  # the link reads as the unit
    return found


def test_the_plan_writes_only_the_state_a_node_lacks(tmp_path, m25):
    first = deployment.plan_deployment(spark_inputs(m25, tmp_path / "a"))
    head = first["nodes"]["spark1"]
    assert [f["path"].rsplit("/", 1)[1] for f in head["writes"]["files"]] == [
        "vllm-serve", "do_not_track", "ray_non_carry_over_env_vars.json", "baseline.json"]
    assert json.loads(head["writes"]["files"][2]["content"]) == first["cluster"]["non_carry_over_env_vars"]
    assert "socket=/dgx-spark/door/vllm.sock" in head["writes"]["files"][0]["content"]
    # vLLM starts (nothing runs yet): the memory each node has now is its baseline for teardown (fact 3)
    assert json.loads(baseline(head)["content"])["mem_available_bytes"] == spark_inputs(m25, tmp_path)["nodes"]["spark1"][
        "memory"]["mem_available_bytes"]
    assert head["writes"]["firewall"] == {"files": head["firewall"]["files"], "enable": True, "reload": None}
    inputs = spark_inputs(m25, tmp_path / "b")
    found = written(head)
    inputs["nodes"]["spark1"]["state"] = found
    again = deployment.plan_deployment(inputs)["nodes"]["spark1"]["writes"]
    assert again == {"folders": [], "files": [baseline(head)],  # vLLM still starts: a new baseline
                     "firewall": {"files": [], "enable": False, "reload": None}}
    for live in ("missing", "changed", "unrecorded"):  # nft flush ruleset, a hand edit: the files hold, the table does not
        inputs["nodes"]["spark1"]["firewall"] = live
        assert deployment.plan_deployment(inputs)["nodes"]["spark1"]["writes"]["firewall"] == {"files": [], "enable": False, "reload": live}
    inputs["nodes"]["spark1"]["firewall"] = "loaded"
    del inputs["nodes"]["spark1"]["state"][head["firewall"]["wants"]]  # the unit was disabled by hand
    assert deployment.plan_deployment(inputs)["nodes"]["spark1"]["writes"]["firewall"] == {"files": [], "enable": True, "reload": None}
    inputs["nodes"]["spark1"]["state"] = found
    inputs["nodes"]["spark1"]["state"] = dict(found, **{head["paths"]["launcher"]: "0" * 64})
    assert [f["path"] for f in deployment.plan_deployment(inputs)["nodes"]["spark1"]["writes"]["files"]] == [
        head["paths"]["launcher"], head["paths"]["baseline_file"]]


def test_a_kept_container_missing_a_planned_variable_is_recreated_and_named(tmp_path, m25):
    """Fact 7 and the simulated trap: a worker's container with our labels and hash but without one planned variable
    (changed behind our back) is recreated by the re-run, which names the variable; vLLM starts again."""
    first = deployment.plan_deployment(spark_inputs(m25, tmp_path / "a"))

    def ps(name):
        spec = first["nodes"][name]["containers"][0]
        return json.dumps({"Names": spec["name"], "State": "running", "Labels": ",".join("%s=%s" % kv for kv in spec["labels"].items())})

    def env(name, drop=None):
        node = first["nodes"][name]
        return ["%s=%s" % kv for kv in sorted(dict(node["env_common"], **node["env_node"]).items()) if kv[0] != drop]

    inputs = spark_inputs(m25, tmp_path / "b")
    inputs["nodes"]["spark1"].update(docker_ps=[ps("spark1"), door_running(first)], container_env={"dgx-spark-ray-spark1": env("spark1")},
                                     vllm={"running": True, "config_hash": first["nodes"]["spark1"]["serve"]["config_hash"]})
    inputs["nodes"]["spark2"].update(docker_ps=[ps("spark2")], container_env={"dgx-spark-ray-spark2": env("spark2")})
    assert deployment.plan_deployment(copy.deepcopy(inputs))["cluster"]["changes"] == []
    inputs["nodes"]["spark2"]["container_env"] = {"dgx-spark-ray-spark2": env("spark2", drop="NCCL_IB_GID_INDEX")}
    drifted = deployment.plan_deployment(inputs)
    assert drifted["ok"], drifted["errors"]
    assert drifted["cluster"]["changes"] == ["spark2: recreate dgx-spark-ray-spark2"]
    assert drifted["nodes"]["spark1"]["serve"]["change"] == "start"
    planned = first["nodes"]["spark2"]["env_node"]["NCCL_IB_GID_INDEX"]
    assert ("Environment drift: spark2: NCCL_IB_GID_INDEX is missing in the container, planned %r (per-node value); "
            "dgx-spark-ray-spark2 is recreated" % planned) in render.deployment(drifted)


def inventory_errors(profile_data, settings=None, overrides=None):
    inputs = {"head_hosts": ["a"], "order": ["a", "b"], "profile": profile_data, "backend": "ray", "settings": settings or {},
              "overrides": overrides or {}, "nodes": {"a": {"fabric_ip": "10.0.0.1"}, "b": {"fabric_ip": "10.0.0.2"}}}
    plan = deployment.plan_deployment(inputs, stage="inventory")
    return plan["errors"], plan["warnings"]


@pytest.mark.parametrize("name", ["Spark_A", "-spark", "spark-", "a" * 41, "two words", "x/../y"])
def test_a_cluster_name_that_cannot_name_containers_is_refused(m25, name):
    found, dummy = inventory_errors(m25, settings={"cluster_name": name})
    assert found[0]["value"] == name and "vllm_cluster_name %r is not a valid cluster name" % name in found[0]["message"]
    assert "(for example dgx-spark)" in found[0]["message"]


@pytest.mark.parametrize("model_id", ["org/../../etc", "/models/../etc/passwd", "/etc/passwd", "..", "org/name/extra"])
def test_a_model_id_that_leaves_the_models_folder_is_refused(m25, model_id):
    m25["model"]["id"] = model_id
    found, dummy = inventory_errors(m25)
    assert [e["value"] for e in found] == [model_id]
    assert "model.id" in found[0]["message"] and found[0]["message"].endswith(("fix the id", "name it /models/<folder>"))


def test_trust_remote_code_needs_a_commit_or_an_explicit_unpinned_choice():
    unpinned = profile("minimax_m25_nvfp4_ep")
    assert unpinned["model"].get("revision") is None
    found, dummy = inventory_errors(unpinned)
    assert len(found) == 1 and found[0]["value"] is None
    assert "sets --trust-remote-code, so every node runs lukealonso/MiniMax-M2.5-NVFP4's own Python" in found[0]["message"]
    assert "Set vllm_model_revision to the 40-character commit you reviewed" in found[0]["message"]
    found, dummy = inventory_errors(unpinned, overrides={"model_revision": "main"})
    assert found[0]["value"] == "main"
    found, warned = inventory_errors(unpinned, settings={"trust_remote_code_unpinned": True})
    assert found == [] and "vllm_trust_remote_code_unpinned is set" in warned[0]
    found, warned = inventory_errors(unpinned, overrides={"model_revision": PINNED})
    assert found == [] and warned == []


def bind_plan(tmp_path, m25, **settings):
    plan = deployment.plan_deployment(spark_inputs(m25, tmp_path, settings=settings))
    return plan, plan["nodes"].get("spark1", {}).get("serve", {}).get("argv")


def test_the_endpoint_binds_where_the_heads_ansible_host_resolves_and_is_called_there(tmp_path, m25):
    plan, argv = bind_plan(tmp_path, m25)
    assert "--host" not in argv and "--port" not in argv  # vLLM serves on the door's socket
    assert plan["cluster"]["door"]["listen"] == "192.168.1.101:8000"  # spark1.lan on spark1, not every interface
    assert plan["cluster"]["endpoint"]["local_health_url"] == "http://192.168.1.101:8000/health"
    assert plan["cluster"]["endpoint"]["models_url"] == "http://192.168.1.101:8000/v1/models"


def test_every_interface_is_the_inventorys_choice_and_is_warned_about(tmp_path, m25):
    plan, argv = bind_plan(tmp_path, m25, bind_address="0.0.0.0")
    assert plan["ok"] and plan["cluster"]["door"]["listen"] == "0.0.0.0:8000"
    assert any("the endpoint listens on every interface of spark1, the management LAN included" in w for w in plan["warnings"])
    assert plan["cluster"]["endpoint"]["local_health_url"] == "http://127.0.0.1:8000/health"


@pytest.mark.parametrize("given, expected", [
    ("10.9.9.9", "vllm_bind_address 10.9.9.9 is not an address of spark1 (it has 127.0.0.1, 192.168.1.101, 192.168.100.10)"),
    ("spark1.lan", "vllm_bind_address 'spark1.lan' is not an IPv4 address; give one of spark1's addresses, or 0.0.0.0"),
])
def test_a_bind_address_the_head_does_not_have_is_refused(tmp_path, m25, given, expected):
    plan, dummy = bind_plan(tmp_path, m25, bind_address=given)
    assert plan["errors"][0]["host"] == "spark1" and expected in plan["errors"][0]["message"]


def test_an_ansible_host_that_resolves_elsewhere_is_refused(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["nodes"]["spark1"]["resolved"] = ["203.0.113.7"]  # a NAT or a stale DNS entry
    found = deployment.plan_deployment(inputs)["errors"]
    assert found[0]["value"] == "spark1.lan"
    assert "spark1's ansible_host spark1.lan resolves on spark1 to 203.0.113.7, none of them an address of spark1" in found[0]["message"]
    assert found[0]["message"].endswith("set vllm_bind_address to the address users reach the endpoint at")


def test_a_host_in_the_cluster_but_in_no_child_group_is_refused(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path)
    inputs["groups"] = {"spark_cluster": ["spark1", "spark2", "spark3"], "spark_head": ["spark1"], "spark_workers": ["spark2"]}
    found = deployment.plan_deployment(inputs, stage="inventory")["errors"]
    assert (found[0]["host"], found[0]["value"]) == ("spark3", "spark3")
    assert "spark3 is in spark_cluster but in neither spark_head nor spark_workers" in found[0]["message"]
    assert found[0]["message"].endswith("put it in spark_workers, or take it out of spark_cluster")


@pytest.mark.parametrize("spelling", [{"--trust_remote_code": True}, {"--trust-remote-code=true": True}, {"--TRUST-remote-code": True}])
def test_every_spelling_of_trust_remote_code_meets_the_pin_check(spelling):
    """vLLM's parser reads underscores as dashes and --name=value as the name and its value: the pin check sees them too."""
    plain = profile("sim_tiny")
    plain["vllm"]["flags"].pop("--trust-remote-code", None)
    assert inventory_errors(plain)[0] == []
    inputs = {"head_hosts": ["a"], "order": ["a", "b"], "profile": plain, "backend": "ray", "settings": {},
              "extra_flags": spelling, "nodes": {"a": {"fabric_ip": "10.0.0.1"}, "b": {"fabric_ip": "10.0.0.2"}}}
    errors = deployment.plan_deployment(inputs, stage="inventory")["errors"]
    if "TRUST" in list(spelling)[0]:  # not an option vLLM knows (its parser is case-sensitive): no code runs
        assert errors == []
        return
    assert len(errors) == 1 and "sets --trust-remote-code, so every node runs" in errors[0]["message"]


@pytest.mark.parametrize("given,expected", [
    ({"--trust-remote": True}, "vLLM reads --trust-remote as --trust-remote-code (an abbreviation); write the option whole"),
    ({"--reasoning-parser-plug": "/models/p.py"}, "vLLM reads --reasoning-parser-plug as --reasoning-parser-plugin"),
    ({"--config": "/models/serve.yaml"}, "the plan sets --config itself; set vllm.flags, one flag each instead"),
    ({"--headless": True}, "the plan sets --headless itself"),
    ({"--max_num_seqs": 8, "--max-num-seqs": 16}, "--max-num-seqs is given twice, spelt two ways, with different values"),
    ({"--api-k": "sk-do-not-show"}, "vLLM reads --api-k as --api-key (an abbreviation)"),
    ({"--enforce-eager": "--trust-remote-code"}, "--enforce-eager's value --trust-remote-code starts with '-', so vLLM would read it"),
    ({"--max-num-seqs": [8, "--host", "0.0.0.0"]}, "--max-num-seqs's value --host starts with '-'"),
    ({"--trust-remote-code": []}, "--trust-remote-code has an empty value, which puts it on the command line bare"),
])
def test_abbreviations_per_rank_options_and_two_spellings_are_refused_before_any_probe(given, expected):
    """Each would reach vLLM past a check that reads whole names or keys only; no message carries a value given."""
    inputs = {"head_hosts": ["a"], "order": ["a", "b"], "profile": profile("sim_tiny"), "backend": "ray", "settings": {},
              "extra_flags": given, "nodes": {"a": {"fabric_ip": "10.0.0.1"}, "b": {"fabric_ip": "10.0.0.2"}}}
    errors = [e["message"] for e in deployment.plan_deployment(inputs, stage="inventory")["errors"]]
    assert any(expected in e and e.startswith("vllm_extra_flags") for e in errors), errors
    assert "do-not-show" not in str(errors)


def test_a_value_that_is_a_negative_number_or_says_nothing_is_not_refused():
    inputs = {"head_hosts": ["a"], "order": ["a", "b"], "profile": profile("sim_tiny"), "backend": "ray", "settings": {},
              "extra_flags": {"--max-logprobs": -1, "--seed": "-7", "--enforce-eager": None, "--async-scheduling": False},
              "nodes": {"a": {"fabric_ip": "10.0.0.1"}, "b": {"fabric_ip": "10.0.0.2"}}}
    assert deployment.plan_deployment(inputs, stage="inventory")["errors"] == []


@pytest.mark.parametrize("given,expected", [
    ({"--host": "0.0.0.0"}, "vllm_extra_flags), --host: the plan sets --host to 192.168.1.101 itself; set vllm_bind_address instead"),
    ({"--tensor_parallel_size": 1}, "--tensor-parallel-size: the plan sets --tensor-parallel-size to 2 itself"),
    ({"--gpu-memory-utilization=0.95": True}, "the plan sets --gpu-memory-utilization to 0.85 itself; set vllm_gpu_memory_utilization"),
    ({"--port": 9000}, "the plan sets --port to 8000 itself; set vllm_port instead"),
    ({"-tp": 1}, "--tensor-parallel-size: the plan sets --tensor-parallel-size to 2 itself"),
])
def test_an_option_the_plan_sets_is_refused_when_a_flag_says_otherwise(tmp_path, m25, given, expected):
    """Later in argv, the flag would win in vLLM's parser, and the endpoint, firewall and memory plan would describe
    another server. Saying what the plan says (a write-up's --pipeline-parallel-size 1) passes."""
    plan = deployment.plan_deployment(dict(spark_inputs(m25, tmp_path), extra_flags=given))
    messages = [e["message"] for e in plan["errors"]]
    assert len(messages) == 1 and expected in messages[0], messages
    same = deployment.plan_deployment(dict(spark_inputs(m25, tmp_path / "same"), extra_flags={
        "--tensor-parallel-size": 2, "--port": "8000", "--gpu-memory-utilization": "0.850", "--pipeline-parallel-size": None}))
    assert same["ok"], same["errors"]


def test_the_workers_the_image_is_streamed_to_each_with_the_streams_own_check(tmp_path, m25):
    """Before any change, the head's ssh to each worker that lacks its image is tried with the stream's own options
    (roles/image/tasks/reach.yml): the worker's user, its fabric address, Docker answering there."""
    inputs = spark_inputs(m25, tmp_path, count=3)
    for name, image_id in (("spark1", "sha256:" + "1" * 64), ("spark2", "sha256:" + "1" * 64), ("spark3", "sha256:" + "2" * 64)):
        inputs["nodes"][name].update(docker={"runtimes": ["nvidia"]}, image_id=image_id)
    inputs["nodes"]["spark3"]["ssh_user"] = "nvidia"
    m25["parallel"].update(nodes=3, tensor=1, pipeline=1, data=3)
    plan = deployment.plan_deployment(inputs)
    assert plan["image_stream_to"] == ["spark3"]
    stream = plan["nodes"]["spark3"]["image_stream"]
    assert stream["check"] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "nvidia@192.168.100.12", "docker", "version"]
    assert "ssh -o BatchMode=yes nvidia@192.168.100.12 docker load" in stream["cmd"]
    inputs["settings"]["image_build"] = True  # an image built on the head reaches every worker
    assert deployment.plan_deployment(inputs)["image_stream_to"] == ["spark2", "spark3"]


def test_a_port_the_front_door_cannot_bind_is_refused(tmp_path, m25):
    plan, dummy = bind_plan(tmp_path, m25, port=443)
    assert not plan["ok"] and [e for e in plan["errors"] if e["message"].startswith("vllm_port 443 is below 1024")]


def test_with_image_source_pull_the_inventory_plan_lists_each_nodes_pull_and_plans_no_stream(tmp_path, m25):
    inputs = spark_inputs(m25, tmp_path, settings={"image_source": "pull", "image": "10.209.0.6:5000/vllm/vllm-ray:26.09"})
    first = planner.make_plan(inputs, stage="inventory")
    pulled = {"image": "10.209.0.6:5000/vllm/vllm-ray:26.09", "registry": "10.209.0.6:5000", "login": True}
    assert first["ok"] and first["pulls"] == {"spark1": [pulled], "spark2": [pulled]}
    other = planner.make_plan(dict(inputs, settings=dict(inputs["settings"], image_registry="registry.site:443")), stage="inventory")
    assert other["pulls"]["spark1"] == [dict(pulled, login=False)]  # the login is for another registry: never sent to this one
    del inputs["nodes"]["spark2"]["image"]  # a check run: the worker's pull was only said, so its probe found no image
    plan = planner.make_plan(inputs)
    assert plan["ok"], plan["errors"]
    only = plan["deployments"][plan["deployment_order"][0]]
    assert only["image_source"] == "pull" and only["image_stream_to"] == []
    assert planner.make_plan(spark_inputs(m25, tmp_path), stage="inventory")["pulls"] == {}  # stream: the head streams, nobody pulls


@pytest.mark.parametrize("settings, message", [
    ({"image_source": "registry"}, "image_source must be stream (the head streams its image to every worker that lacks it) or pull "
                                   "(each node pulls vllm_image from its registry), got 'registry'"),
    ({"image_source": "pull", "image_build": True}, "image_build builds the image on the head, which then streams it to the workers; "
                                                    "with image_source: pull each node pulls vllm_image from its registry instead. "
                                                    "Choose one: image_source: stream with image_build, or push the built image to "
                                                    "your registry and pull it"),
])
def test_an_image_source_that_cannot_be_is_refused_before_any_probe(tmp_path, m25, settings, message):
    plan = planner.make_plan(spark_inputs(m25, tmp_path, settings=settings), stage="inventory")
    assert message in [e["message"] for e in plan["errors"]]
