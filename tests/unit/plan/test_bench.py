"""bench.yml's sweep, rows and summary (module_utils/plan/bench.py); the rows from a result file vllm bench serve wrote on
the simulated cluster (tests/unit/fixtures/bench/)."""

import glob
import json
import os
import subprocess
import sys

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import bench, deployment, profiles
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import bench as bench_results

from helpers import ROOT, read_fixture, spark_inputs

TARGET = {"run": ["docker", "run", "--rm", "image", "-c", "RUN_POINT"], "base_url": "http://192.168.1.10:8000", "model": "org/m",
          "served_name": "m", "key_file": "/run/dgx-spark-bench/key", "max_model_len": 4096, "result_dir": "/tmp/dgx-spark-bench"}
DEPLOYMENT = {"image_id": "sha256:ab", "profile": "p", "config_hash": "h"}


def test_the_default_sweep_is_the_write_ups_and_bounded():
    sweep = bench.sweep(TARGET, {}, "20261124T120000Z", "/inv/.artifacts/bench")
    assert [p["concurrency"] for p in sweep["points"]] == [1, 2, 4, 8, 16, 32] and not sweep["errors"]
    assert [p["prompts"] for p in sweep["points"]] == [8, 8, 16, 32, 64, 128]  # 4 per stream, at least 8, at most 128
    assert sweep["points"][0]["name"] == "c1-in1024-out128"
    assert sweep["dirs"] == {"container": "/tmp/dgx-spark-bench/20261124T120000Z", "controller": "/inv/.artifacts/bench/20261124T120000Z",
                             "tokenizer": "/inv/.artifacts/bench/20261124T120000Z.tokenizer/"}
    assert sweep["staged"] is None  # on the head: nothing is staged


def test_the_default_lengths_fit_every_profiles_max_model_len():
    """bench.yml with its defaults runs on every profile and inventory as shipped: where 1024 in + 128 out would not
    fit (the simulated profiles' 1024), the input is what the output leaves; lengths given are kept, and refused."""
    for path in sorted(glob.glob(os.path.join(ROOT, "profiles", "*.yml"))):
        profile = profiles.load(path)
        limit = profile["vllm"].get("max_model_len")  # none: the model's own length, far above the sweep's
        sweep = bench.sweep(dict(TARGET, max_model_len=limit), {}, "t", None)
        assert not sweep["errors"], (path, sweep["errors"])
        first = sweep["points"][0]
        assert first["input_len"] + first["output_len"] <= (limit or 1152), path
        assert (first["input_len"], first["output_len"]) == ((1024, 128) if (limit or 1152) >= 1152 else (limit - 128, 128)), path
    small = bench.sweep(dict(TARGET, max_model_len=1024), {}, "t", None)
    assert small["points"][0]["name"] == "c1-in896-out128" and not small["errors"]
    assert bench.sweep(dict(TARGET, max_model_len=1024), {"output_lens": [512]}, "t", None)["points"][0]["name"] == "c1-in512-out512"
    assert bench.sweep(dict(TARGET, max_model_len=100), {}, "t", None)["points"][0]["name"] == "c1-in50-out50"
    given = bench.sweep(dict(TARGET, max_model_len=1024), {"input_lens": [1024]}, "t", None)
    assert given["errors"] == ["input 1024 + output 128 tokens exceed the deployment's max_model_len 1024; lower "
                               "vllm_bench_input_lens or vllm_bench_output_lens"]


def test_a_sweep_that_would_not_fit_or_run_long_is_refused_naming_the_fix():
    sweep = bench.sweep(TARGET, {"input_lens": [4000], "output_lens": [128]}, "t", None)
    assert sweep["errors"] == ["input 4000 + output 128 tokens exceed the deployment's max_model_len 4096; lower "
                               "vllm_bench_input_lens or vllm_bench_output_lens"] and not sweep["points"]
    wide = bench.sweep(TARGET, {"concurrency": list(range(1, 41))}, "t", None)
    assert wide["errors"] == ["the sweep has 40 points, more than vllm_bench_max_points 36; list fewer concurrencies or "
                              "lengths, or raise the bound"]
    assert bench.sweep(TARGET, {"concurrency": "many"}, "t", None)["errors"] == [
        "vllm_bench_concurrency must be a list of whole numbers, got 'many'"]
    assert bench.sweep(TARGET, {"concurrency": [0, 2]}, "t", None)["errors"] == [
        "vllm_bench_concurrency must list numbers of 1 or more, got [0, 2]"]


def test_the_key_is_read_inside_the_container_never_in_the_argv_and_the_result_is_printed():
    point = bench.sweep(TARGET, {"concurrency": [4]}, "t", None)["points"][0]
    assert point["argv"][:6] == TARGET["run"]  # its own container, not one of the serving ones
    argv = bench.argv(point, TARGET, "/tmp/dgx-spark-bench/20261124T120000Z")
    assert "OPENAI_API_KEY" not in " ".join(argv) and "Authorization" not in " ".join(argv)
    assert argv[:2] == ["/run/dgx-spark-bench/key", "/tmp/dgx-spark-bench/20261124T120000Z/c4-in1024-out128.json"]
    assert argv[2:4] == ["bench", "serve"] and "--ignore-eos" in argv
    assert argv[argv.index("--result-dir") + 1] == "/tmp/dgx-spark-bench/20261124T120000Z"
    assert argv[argv.index("--max-concurrency") + 1] == "4" and argv[argv.index("--num-prompts") + 1] == "16"
    assert argv[argv.index("--served-model-name") + 1] == "m" and argv[argv.index("--result-filename") + 1] == "c4-in1024-out128.json"


def test_a_row_is_read_from_the_result_file_vllm_bench_serve_wrote():
    result = json.loads(read_fixture("bench", "sim-tiny-c2-in64-out16.json"))
    point = {"concurrency": 2, "input_len": 64, "output_len": 16, "prompts": 4, "name": "c2-in64-out16"}
    made = bench_results.rows([point], [{"rc": 0, "stdout": json.dumps(result)}], DEPLOYMENT)
    row = made[0]
    assert row["completed"] == result["completed"] == 4 and row["errors"] == 0
    assert row["output_tokens_per_s"] == round(result["output_throughput"], 3) and row["ttft_p99_ms"] == round(result["p99_ttft_ms"], 3)
    assert row["itl_p50_ms"] == round(result["p50_itl_ms"], 3) and row["config_hash"] == "h"
    missing = bench_results.rows([point], [{"rc": 1, "stdout": "", "stderr": "Traceback ...\nConnectionRefusedError: [Errno 111] Connection refused"}],
                                 DEPLOYMENT)[0]
    assert missing["completed"] == 0 and missing["errors"] == 4 and missing["output_tokens_per_s"] is None
    assert missing["failure"] == "vllm bench serve exited 1: ConnectionRefusedError: [Errno 111] Connection refused"
    text = bench_results.csv_text(made + [missing])
    assert text.splitlines()[0] == ",".join(bench_results.COLUMNS) and text.splitlines()[2].startswith("2,64,16,4,0,4,,")


def test_the_decode_bound_is_the_nodes_bandwidth_over_the_bytes_read_per_token():
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    assert bench.decode_bound(m25["bench"], 2) == 97.1  # 2 x 273 GB/s over 10e9 x 0.5625 bytes
    assert bench.decode_bound({}, 2) is None
    for entry in m25["bench"]["published"]:  # the published figures sit under the bound
        assert entry["output_tokens_per_s"] < bench.decode_bound(m25["bench"], 2)


def test_the_plan_says_where_and_what_to_measure(tmp_path):
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    plan = deployment.plan_deployment(spark_inputs(m25, tmp_path))
    target = plan["cluster"]["bench"]
    head = plan["nodes"]["spark1"]
    # its own container from vLLM's image, the key one read-only file of the head's root-only secrets folder: no serving
    # container mounts it (the model's code runs there)
    run = target["run"]
    assert run[:3] == ["docker", "run", "--rm"] and run[run.index("--entrypoint") + 2] == head["containers"][0]["image"]
    assert "%s:/run/dgx-spark-bench/key:ro" % head["paths"]["api_key_file"] in run and target["key_file"] == "/run/dgx-spark-bench/key"
    assert head["paths"]["api_key_file"].endswith("/secrets/vllm_api_key") and "%s:/models:ro" % head["paths"]["models_dir"] in run
    assert "HF_HUB_OFFLINE=1" in run and "--cap-drop" in run and run[-2:] == ["-c", bench.RUN_POINT]
    assert not any("secrets" in v for c in head["containers"] for v in c["volumes"])
    assert target["base_url"] == plan["cluster"]["endpoint"]["local_health_url"][:-len("/health")]
    assert target["max_model_len"] == 4096 and target["decode_bound"] == 97.1 and len(target["published"]) == 2
    assert target["result_dir"] == "/tmp/dgx-spark-bench"  # the container's own: root never reads what it wrote on the head


def test_a_figure_worse_than_the_previous_runs_beyond_the_share_is_flagged():
    old = [{"concurrency": 1, "input_len": 64, "output_len": 16, "output_tokens_per_s": 100.0, "request_throughput": 1.0,
            "ttft_p50_ms": 50.0, "itl_p50_ms": 10.0}]
    new = [dict(old[0], output_tokens_per_s=85.0, ttft_p50_ms=52.0)]
    assert bench_results.regressions(new, old, 0.10) == ["c1 in64 out16: output_tokens_per_s 100.0 -> 85.0 (-15%)"]
    assert bench_results.regressions(new, old, 0.20) == []
    meta = {"profile": "p", "image": "i", "image_id": "sha256:ab", "vllm_version": "0.32", "config_hash": "h",
            "nodes": ["a", "b"], "taken_at": "20261124T120000Z"}
    text = bench_results.summary(new, {"rows": old, "meta": {"taken_at": "20261123T120000Z"}}, meta, 97.1, [], 0.10)
    assert "REGRESSION beyond 10%:" in text and "- c1 in64 out16: output_tokens_per_s 100.0 -> 85.0 (-15%)" in text
    assert "decode bound (one stream): 97.1 tokens/s (2 x 273 GB/s" in text
    assert "No previous run of this profile" in bench_results.summary(new, None, meta, None, [], 0.10)


def test_the_report_compares_with_the_newest_earlier_run_of_the_same_profile(tmp_path):
    from ansible_collections.dgx_spark.vllm.plugins.action import bench_report

    for stamp, profile in (("20261120T100000Z", "p"), ("20261122T100000Z", "p"), ("20261123T100000Z", "other")):
        (tmp_path / stamp).mkdir()
        (tmp_path / stamp / "bench.json").write_text(json.dumps({"meta": {"profile": profile, "taken_at": stamp}, "rows": []}))
    (tmp_path / "20261124T100000Z").mkdir()  # this run's own folder is never its previous run
    (tmp_path / "20261124T100000Z" / "bench.json").write_text(json.dumps({"meta": {"profile": "p", "taken_at": "20261124T100000Z"}}))
    found = bench_report.previous_run(str(tmp_path), str(tmp_path / "20261124T100000Z"), "p")
    assert found["meta"]["taken_at"] == "20261122T100000Z"
    assert bench_report.previous_run(str(tmp_path), str(tmp_path / "x"), "none") is None


def test_the_heads_record_of_the_last_run_is_compared_with_before_the_controllers():
    """An AWX job's fresh project has no earlier run: the head's record is the one compared with; where the controller
    kept another, the head's wins and the summary says so."""
    head = {"meta": {"taken_at": "20261126T100000Z"}, "rows": []}
    controller = {"meta": {"taken_at": "20261125T100000Z"}, "rows": []}
    assert bench_results.compare_with(head, None) == (head, None)
    assert bench_results.compare_with(None, controller) == (controller, None)
    assert bench_results.compare_with(None, None) == (None, None)
    assert bench_results.compare_with(head, dict(head)) == (head, None)
    assert bench_results.compare_with(head, controller) == (head, "The controller's newest run of this profile (20261125T100000Z) "
                                                            "is not the one the head recorded (20261126T100000Z); compared with the head's.")


def test_the_points_command_prints_only_its_result_and_hands_the_key_to_the_bench_alone(tmp_path):
    """RUN_POINT as the bench's container runs it, with a stand-in for vLLM's CLI that says what it got and writes its
    result file where --result-dir points: stdout is the result file, the bench's own output goes to stderr, the key is
    in the client's environment and not in the one the process started with (/proc/<pid>/environ)."""
    key = tmp_path / "key"
    key.write_text("sk-bench\n")
    cli = tmp_path / "lib" / "vllm" / "entrypoints" / "cli"
    cli.mkdir(parents=True)
    for folder in (cli.parent.parent, cli.parent, cli):
        (folder / "__init__.py").write_text("")
    (cli / "main.py").write_text(
        "import os, sys\n"
        "def main():\n"
        "    print('key=%s started-with-it=%s' % (os.environ.get('OPENAI_API_KEY'), b'sk-bench' in open('/proc/self/environ', 'rb').read()))\n"
        "    if sys.argv[2] == 'fail':\n"
        "        print('refused', file=sys.stderr); sys.exit(3)\n"
        "    out = sys.argv[sys.argv.index('--result-dir') + 1]\n"
        "    open(out + '/' + sys.argv[sys.argv.index('--result-filename') + 1], 'w').write('{\"completed\": 4}')\n")
    point = bench.sweep(TARGET, {"concurrency": [1]}, "t", None)["points"][0]
    argv = bench.argv(point, dict(TARGET, key_file=str(key)), str(tmp_path / "run"))
    env = dict({k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, PYTHONPATH=str(tmp_path / "lib"))  # a pipe: buffered
    done = subprocess.run([sys.executable, "-c", bench.RUN_POINT] + argv, capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0 and json.loads(done.stdout) == {"completed": 4}, done
    assert done.stderr.strip() == "key=sk-bench started-with-it=False"
    failed = subprocess.run([sys.executable, "-c", bench.RUN_POINT] + argv[:2] + ["bench", "fail"], capture_output=True, text=True,
                            check=False, env=env)
    assert failed.returncode == 3 and failed.stdout == "" and "refused" in failed.stderr


def test_each_published_figure_is_set_beside_the_point_of_its_concurrency_and_lengths_or_says_why_not():
    result = json.loads(read_fixture("bench", "sim-tiny-c2-in64-out16.json"))
    points = [{"concurrency": 2, "input_len": 64, "output_len": 16, "prompts": 4, "name": "c2-in64-out16"}]
    made = bench_results.rows(points, [{"rc": 0, "stdout": json.dumps(result)}], DEPLOYMENT)
    measured = made[0]["output_tokens_per_s"]
    # seed 001's figures as its profile gives them: c1 at tg128, c4 and c8 aggregates; and one at this sweep's point
    published = profiles.load(profiles.find("minimax_m27_mxfp4", [os.path.join(ROOT, "profiles")]))["bench"]["published"]
    assert published[0]["output_len"] == 128
    same = {"concurrency": 2, "output_len": 16, "output_tokens_per_s": measured * 2, "source": "a write-up"}
    compared = bench_results.against_published(made, published + [same])
    assert [c["ratio"] for c in compared] == [None, None, None, 0.5]
    assert compared[0]["says"].startswith("c1, output 128: published 12.4 output tokens/s (seed 001, line 76")
    assert "not measured: this sweep ran 2/64/16 (concurrency, in, out)" in compared[0]["says"]
    assert compared[3]["says"].endswith("measured %s at 64 in / 16 out: 50%% of it" % measured)
    text = bench_results.summary(made, None, {"profile": "minimax_m27_mxfp4", "nodes": ["a", "b"]}, None, published + [same], 0.1)
    assert all(c["says"] in text for c in compared) and "point by point" in text


def test_a_published_figure_without_its_numbers_is_refused_with_the_profile():
    profile = profiles.load(profiles.find("minimax_m27_mxfp4", [os.path.join(ROOT, "profiles")]))
    profile["bench"]["published"].append({"concurrency": "c8", "output_tokens_per_s": 65, "output_len": "128"})
    errors = profiles.validate(profile, "minimax_m27_mxfp4.yml")
    assert any("bench.published[3] needs a number for concurrency, output_len" in e for e in errors), errors


def test_a_head_without_the_clients_key_where_bench_and_the_supervisor_read_it_gets_it_written(tmp_path):
    """A head served by a release that kept the key in the containers' folder lacks it in its secrets folder: the plan
    writes it (an apply that changes no container), and a head that holds the controller's key is left alone."""
    import hashlib

    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import changes

    path = "/var/lib/dgx-spark-vllm/dgx-spark/secrets/vllm_api_key"
    digest = hashlib.sha256(b"the-clients-key-0123").hexdigest()
    assert changes.key_differs({path: digest}, path, digest[:16]) is False
    assert changes.key_differs({}, path, digest[:16]) and changes.key_differs({path: "0" * 64}, path, digest[:16])
    assert changes.key_differs(None, path, digest[:16]) and not changes.key_differs({}, path, None)  # no key: nothing to write
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    plan = deployment.plan_deployment(dict(spark_inputs(m25, tmp_path), api_key_digest=digest[:16]), stage="inventory")
    assert plan["nodes"]["spark1"]["probe"]["paths"].count(plan["nodes"]["spark1"]["paths"]["api_key_file"]) == 1


def test_vllm_bench_from_is_refused_for_an_unknown_host_a_node_of_the_cluster_or_a_door_on_loopback():
    known, cluster = ["spark-head", "spark-w1", "loadgen"], ["spark-head", "spark-w1"]
    door = "http://192.168.1.10:8000"
    assert bench.from_refusals("", known, cluster, door) == []  # on the head
    assert bench.from_refusals("loadgen", known, cluster, door) == [] and bench.from_refusals("localhost", known, cluster, door) == []
    assert "vllm_bench_from=nowhere is no host of this inventory" in bench.from_refusals("nowhere", known, cluster, door)[0]
    refused = bench.from_refusals("spark-w1", known, cluster, door)
    assert len(refused) == 1 and "vllm_bench_from=spark-w1 is a node of spark_cluster" in refused[0] and "take CPU from a rank" in refused[0]
    for url in ("http://127.0.0.1:8000", "https://localhost:8000", "http://[::1]:8000"):
        refused = bench.from_refusals("loadgen", known, cluster, url)
        assert len(refused) == 1 and url in refused[0] and "vllm_bind_address" in refused[0], (url, refused)
    assert bench.from_refusals("loadgen", known, cluster, "http://spark-head.lan:8000") == []  # a name: not loopback


def test_vllm_bench_from_names_the_controller_as_ansible_does_and_another_name_for_a_node_is_refused_with_its_address():
    known, cluster = ["spark-head", "spark-w1", "loadgen", "w1-bmc-name"], ["spark-head", "spark-w1"]
    door = "http://192.168.1.10:8000"
    addresses = {"spark-head": "192.168.1.10", "spark-w1": "192.168.1.11", "loadgen": "192.168.1.50", "w1-bmc-name": "192.168.1.11"}
    for controller in ("localhost", "127.0.0.1", "::1"):  # Ansible's implicit localhost: this controller
        assert bench.from_refusals(controller, known, cluster, door, addresses) == [], controller
    assert bench.from_refusals("loadgen", known, cluster, door, addresses) == []
    refused = bench.from_refusals("w1-bmc-name", known, cluster, door, addresses)
    assert len(refused) == 1 and "vllm_bench_from=w1-bmc-name reaches 192.168.1.11, the address of spark-w1, a node" in refused[0]
    # A host without an address is reached by its name: a name that is a node's own refuses as that node.
    refused = bench.from_refusals("loadgen", known, cluster, door, {"loadgen": "spark-w1"})
    assert "the address of spark-w1" in refused[0]
    # One address in another spelling (an IPv6 literal, a name's case), and a host without ansible_host (Jinja's '')
    v6 = {"spark-head": "fd00::10", "spark-w1": "FD00:0:0:0:0:0:0:11", "loadgen": "fd00::11", "w1-bmc-name": ""}
    assert "the address of spark-w1" in bench.from_refusals("loadgen", known, cluster, door, v6)[0]
    assert "the address of spark-w1" in bench.from_refusals("loadgen", known, cluster, door, {"loadgen": "SPARK-W1."})[0]
    assert bench.from_refusals("w1-bmc-name", known, cluster, door, v6) == []  # reached by its own name


def test_from_a_host_outside_the_cluster_each_point_runs_the_deployments_image_as_its_user_through_the_front_door():
    """vllm_bench_from (seed 004 measured from a third machine): the image by its ID, the endpoint as a client reaches
    it, the key, the tokenizer and the certificate staged in a private folder there, read-only, as the folder's owner."""
    present = {"config.json": 1, "tokenizer.json": 9, "tokenizer_config.json": 1, "model-00001-of-00002.safetensors": 5,
               "model.safetensors.index.json": 1, "modeling_minimax.py": 1, "sub/tokenizer.json": 1, "chat_template.jinja": 1,
               ".env": 1, "README.md": 1, "cl100k.tiktoken": 1}
    copy = {"snapshot": "/m/snapshots/abc", "present": present}
    assert bench.tokenizer_files(copy) == ["/m/snapshots/abc/chat_template.jinja", "/m/snapshots/abc/cl100k.tiktoken",
                                           "/m/snapshots/abc/config.json", "/m/snapshots/abc/tokenizer.json",
                                           "/m/snapshots/abc/tokenizer_config.json"]  # by name: nothing else leaves
    assert bench.tokenizer_files(None) == [] and bench.tokenizer_files({"snapshot": None}) == []
    client = {"url": "https://10.0.0.10:8000", "ca_file": "/inv/.secrets/door.pem"}
    sweep = bench.sweep(dict(TARGET, image_id="sha256:feed"), {"concurrency": [2]}, "t", None, client, "/tmp/dgx-spark-bench-x1", "1000:1000")
    point = sweep["points"][0]["argv"]
    run = point[:point.index(bench.RUN_POINT) + 1]
    assert run[run.index("--entrypoint") + 1:] == ["python3", "sha256:feed", "-c", bench.RUN_POINT]
    assert run[run.index("--user") + 1] == "1000:1000" and "--cap-drop" in run and "ALL" in run
    for mount in ("/tmp/dgx-spark-bench-x1/key:/run/dgx-spark-bench/key:ro", "/tmp/dgx-spark-bench-x1/tokenizer:/run/dgx-spark-bench/tokenizer:ro",
                  "/tmp/dgx-spark-bench-x1/ca.pem:/run/dgx-spark-bench/ca.pem:ro"):
        assert mount in run
    assert "SSL_CERT_FILE=/run/dgx-spark-bench/ca.pem" in run and "HF_HUB_OFFLINE=1" in run
    assert sweep["staged"] == {"key": "/tmp/dgx-spark-bench-x1/key", "ca": "/tmp/dgx-spark-bench-x1/ca.pem",
                               "tokenizer": "/tmp/dgx-spark-bench-x1/tokenizer"}
    assert point[point.index("--base-url") + 1] == "https://10.0.0.10:8000" and point[point.index("--tokenizer") + 1] == "/run/dgx-spark-bench/tokenizer"
    plain = bench.sweep(dict(TARGET, image_id="sha256:feed"), {}, "t", None, {"url": "http://h:8000", "ca_file": None}, "/s", "0:0")
    assert not any("ca.pem" in a or "SSL_CERT_FILE" in a for a in plain["points"][0]["argv"])
    on_head = bench.sweep(TARGET, {}, "t", None)["points"][0]["argv"]
    assert "--tokenizer" not in on_head and "--user" not in on_head and on_head[:len(TARGET["run"])] == TARGET["run"]
