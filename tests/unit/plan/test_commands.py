"""plan_commands: `ray start` (facts 5, 6, 20), vLLM's argv, container specs (facts 8, 16), the fetch helper."""

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import commands, door
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import node_paths, normalize_settings


def inputs(**settings):
    return {"settings": normalize_settings(dict({"image": "img:1"}, **settings)), "backend": "mp",
            "profile": {"model": {"id": "org/m"}, "ray": {}, "container": {"shm_size": "16g"}}, "overrides": {},
            "endpoint": {"bind": "192.168.1.10", "advertised": "192.168.1.10"}}


def test_ray_start_of_head_and_worker():
    head = commands.ray_command(inputs(), "10.0.0.1", True, "10.0.0.1")
    worker = commands.ray_command(inputs(), "10.0.0.2", False, "10.0.0.1")
    assert head[:6] == ["ray", "start", "--head", "--port", "6379", "--include-dashboard=false"]
    assert worker[2:4] == ["--address", "10.0.0.1:6379"]
    for argv, ip in ((head, "10.0.0.1"), (worker, "10.0.0.2")):
        assert argv[argv.index("--node-ip-address") + 1] == ip
        assert argv[argv.index("--object-store-memory") + 1] == "1073741824" and argv[-1] == "--block"


def test_mp_argv_names_rank_master_and_headless_workers():
    parallel = {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "data_parallel_size": 1, "nodes": 2}
    rank1 = commands.serve_argv(inputs(), parallel, {}, 0.8, None, 1, "10.0.0.1")
    assert rank1[:3] == ["vllm", "serve", "org/m"] and rank1[-1] == "--headless"
    assert rank1[rank1.index("--master-addr") + 1] == "10.0.0.1" and rank1[rank1.index("--node-rank") + 1] == "1"
    # No rank listens on a TCP port: rank 0 serves on the front door's socket, the headless ranks serve nothing.
    assert "--host" not in rank1 and "--port" not in rank1 and "--uds" not in rank1
    rank0 = commands.serve_argv(inputs(), parallel, {}, 0.8, None, 0, "10.0.0.1")
    assert "--host" not in rank0 and "--port" not in rank0 and rank0[rank0.index("--uds") + 1] == "/dgx-spark/door/vllm.sock"


def test_container_spec_keeps_logs_and_labels_and_takes_the_profile_shm():
    settings = inputs()["settings"]
    spec = commands.container_spec(inputs(), "spark1", "ray", {"A": "1"}, node_paths(settings, "spark1", "org/m"), ["ray"], "ray-head")
    assert spec["name"] == "dgx-spark-ray-spark1" and spec["restart_policy"] == "no" and spec["shm_size"] == "16g"
    assert spec["volumes"][-1] == "/var/lib/dgx-spark-vllm/models:/models:ro"
    assert spec["labels"]["dgx_spark.vllm.role"] == "ray" and spec["gpus"] == "all"


def test_fetch_helper_runs_in_the_image_with_the_token_as_a_file():
    settings = inputs(hf_endpoint="http://mirror:8090", model_verify_checksums=True)["settings"]
    argv = commands.model_fetch_argv(inputs(hf_endpoint="http://mirror:8090", model_verify_checksums=True), "spark1",
                                     node_paths(settings, "spark1", "org/m"), "org/m", None)
    assert argv[:5] == ["docker", "run", "--rm", "--name", "dgx-spark-model-fetch"]
    assert "HF_ENDPOINT=http://mirror:8090" in argv and argv[-1] == "--checksums"
    assert argv[argv.index("--revision") + 1] == "main" and argv[argv.index("--token-file") + 1] == "/dgx-spark/fetch/hf_token"
    assert argv[argv.index("--reserve-bytes") + 1] == str(2 * 1024 ** 3)


def test_no_gpus_on_the_simulated_cluster():
    assert commands.gpus(normalize_settings({"gpus": "none"})) is None
    assert commands.gpus(normalize_settings({})) == "all"


@pytest.mark.parametrize("extra,removed", [(["--uds", "S"], True), (["--headless"], False)])
def test_the_launcher_gives_vllm_no_key_and_removes_a_socket_left_behind(tmp_path, extra, removed):
    """vLLM holds no key (the front door does): nothing of one reaches its environment. A socket a vLLM before it left
    is removed first (vLLM binds without unlinking); a headless rank serves no socket and touches none."""
    import subprocess

    socket = tmp_path / "vllm.sock"
    socket.write_text("")
    script = commands.LAUNCHER_SCRIPT.replace(door.VLLM_SOCKET, str(socket))
    script = script.replace('exec vllm serve "$@"', 'echo "key=$VLLM_API_KEY args=$*"')  # vLLM itself is not here
    (tmp_path / "launcher").write_text(script)
    proc = subprocess.run(["sh", str(tmp_path / "launcher"), "m"] + extra, capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip() == "key= args=m " + " ".join(extra)
    assert socket.exists() is not removed
    assert "VLLM_API_KEY" not in commands.LAUNCHER_SCRIPT and "api_key" not in commands.LAUNCHER_SCRIPT


def test_the_launcher_starts_vllm_only_when_every_pinned_file_is_the_one_pinned(tmp_path):
    """vllm_code_pins: the launcher checks each pinned file before every start (a supervisor's too); a file changed,
    replaced or gone stops it before vLLM imports anything, naming the file; vLLM gets its own arguments only."""
    import hashlib
    import subprocess

    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import code

    plugin = tmp_path / "parser.py"
    plugin.write_text("print('reviewed')\n")
    pins = [{"path": str(plugin), "sha256": hashlib.sha256(plugin.read_bytes()).hexdigest()}]
    (tmp_path / "launcher").write_text(commands.LAUNCHER_SCRIPT.replace('exec vllm serve "$@"', 'echo "args=$*"'))

    def launch():
        argv = ["sh", str(tmp_path / "launcher")] + commands.launch(["vllm", "serve", "m", "--reasoning-parser-plugin", str(plugin)], pins)[1:]
        return subprocess.run(argv, capture_output=True, text=True, check=False)

    proc = launch()
    assert proc.returncode == 0 and proc.stdout.strip() == "args=m --reasoning-parser-plugin %s" % plugin
    plugin.write_text("print('changed under you')\n")
    proc = launch()
    assert proc.returncode == 78 and "args=" not in proc.stdout
    assert "%s is missing or differs from its sha256 in vllm_code_pins" % plugin in proc.stderr
    plugin.unlink()
    assert launch().returncode == 78
    assert commands.launch(["vllm", "serve", "m"]) == [commands.LAUNCHER, "m"]  # no pin, the launcher as before
    assert code.launcher_args(pins) == ["--dgx-spark-pin=%s:%s" % (pins[0]["sha256"], plugin)]


@pytest.mark.parametrize("text,parts", [("2.60.0", (2, 60, 0)), ("2.52", (2, 52)), ("2.60.0rc1", (2, 60, 0)), ("3.0.0.dev0", (3, 0, 0)),
                                        ("unknown", ())])
def test_version_parts(text, parts):
    assert commands.version_parts(text) == parts


def test_no_container_mounts_the_state_folder_and_only_vllms_log_and_state_are_writable():
    """Root runs the supervisor's code and loads the firewall's ruleset from the state folder: no container mounts it,
    only the folders of container/ each kind needs, read-only but for the head's log and state and the fetch's log."""
    settings = inputs()["settings"]
    paths = node_paths(settings, "spark1", "org/m")
    state = paths["state_dir"]
    mounted = {kind: commands.state_volumes(paths, kind) for kind in commands.MOUNTS}
    for kind, volumes in mounted.items():
        for volume in volumes:
            source, target = volume.split(":")[:2]
            assert source.startswith(state + "/container/") and target == "/dgx-spark/" + source.rsplit("/", 1)[1], (kind, volume)
    writable = {kind: sorted(v.split(":")[1] for v in volumes if not v.endswith(":ro")) for kind, volumes in mounted.items()}
    # vLLM's socket's folder (door) is written by the container that runs the endpoint's vLLM: root runs nothing there.
    # (Each rank also writes its own compile cache folder, plan/compile_cache.py; tests/unit/plan/test_compile_cache.py.)
    assert writable == {"ray-head": ["/dgx-spark/door", "/dgx-spark/logs", "/dgx-spark/run"], "ray-worker": [], "vllm": ["/dgx-spark/door"],
                        "model-fetch": ["/dgx-spark/logs"]}
    assert not any("/keys" in v for v in mounted["model-fetch"])
    assert not any("/fetch" in v for k in ("ray-head", "ray-worker", "vllm") for v in mounted[k])
    fetch = commands.model_fetch_argv(inputs(), "spark1", paths, "org/m", None)
    assert [fetch[i + 1] for i, a in enumerate(fetch) if a == "-v"] == ["/var/lib/dgx-spark-vllm/models:/models"] + mounted["model-fetch"]
