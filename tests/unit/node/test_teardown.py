"""teardown: what node_teardown runs and how it judges a node's memory (fact 3), fed with a captured docker ps."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import teardown

from helpers import memory_facts, read_fixture


def test_only_containers_the_collection_made_for_this_cluster_and_node_are_found():
    argv = teardown.find_argv("docker", "dgx-spark", "sim-head")
    filters = [argv[i + 1] for i, a in enumerate(argv) if a == "--filter"]
    assert filters == ["label=dgx_spark.vllm.managed=true", "label=dgx_spark.vllm.cluster=dgx-spark", "label=dgx_spark.vllm.node=sim-head"]


def test_the_captured_answer_gives_names_and_states():
    assert teardown.parse_found(read_fixture("docker", "teardown-find-sim-head.txt")) == [("dgx-spark-ray-sim-head", "running")]
    assert teardown.parse_found("") == []


def test_stop_logs_and_remove_take_every_name_at_once():
    assert teardown.stop_argv("docker", ["a", "b"], 60) == ["docker", "stop", "--time", "60", "a", "b"]
    assert teardown.remove_argv("docker", ["a", "b"]) == ["docker", "rm", "--force", "a", "b"]
    assert teardown.logs_argv("docker", "a") == ["docker", "logs", "--timestamps", "a"]


def test_memory_back_within_the_tolerance_passes():
    idle = memory_facts("gb10-idle.txt")
    verdict = teardown.memory_verdict("spark1", idle, dict(idle, mem_available_bytes=idle["mem_available_bytes"] - (3 << 30)), 4.0)
    assert verdict == {"judged": True, "ok": True, "missing_gib": 3.0, "message": "spark1: memory back to its baseline (within 4 GiB)"}


def test_memory_missing_names_the_node_and_says_reboot():
    idle = memory_facts("gb10-idle.txt")
    after = dict(idle, mem_available_bytes=idle["mem_available_bytes"] - (40 << 30), unaccounted_bytes=39 << 30)
    verdict = teardown.memory_verdict("spark2", idle, after, 4)
    assert not verdict["ok"] and verdict["missing_gib"] == 40.0
    assert verdict["message"] == ("spark2 did not get its memory back: 40.0 GiB less available than before launch (39.0 GiB "
                                  "unaccounted). On a GB10 memory pinned by a killed process is freed only by a reboot: reboot spark2.")


def test_without_a_baseline_nothing_is_judged():
    assert teardown.memory_verdict("spark1", None, None, 4)["judged"] is False


def test_containers_with_our_cluster_label_but_not_made_by_us_are_named_not_touched():
    argv = teardown.labelled_argv("docker", "dgx-spark")
    assert argv[argv.index("--filter") + 1] == "label=dgx_spark.vllm.cluster=dgx-spark" and "--filter" not in argv[argv.index("--filter") + 2:]
    answer = "dgx-spark-ray-sim-head\ttrue\nhand-made-ray\t\nother\tfalse\n"  # docker ps --format '{{.Names}}\t{{.Label ...}}'
    assert teardown.not_ours(answer) == ["hand-made-ray", "other"]


def test_memory_another_deployment_on_the_node_holds_is_explained_but_pinned_memory_is_not():
    # vllm_deployments: this deployment's baseline was taken before the other launched; the other's ranks still run.
    idle = dict(memory_facts("gb10-idle.txt"), gpu_process_bytes=0)
    other = 36 << 30
    after = dict(idle, mem_available_bytes=idle["mem_available_bytes"] - other - (1 << 30), gpu_process_bytes=other)
    verdict = teardown.memory_verdict("spark1", idle, after, 4)
    assert verdict["ok"] and verdict["missing_gib"] == 1.0
    assert verdict["message"] == "spark1: memory back to its baseline (within 4 GiB; 36.0 GiB held by GPU processes still running)"
    pinned = dict(after, mem_available_bytes=after["mem_available_bytes"] - (30 << 30), unaccounted_bytes=30 << 30)
    assert not teardown.memory_verdict("spark1", idle, pinned, 4)["ok"]  # memory no process holds is still named
