"""progress: what a wait says between its looks, read from what the node shows (a captured vLLM launch log, Ray's
count, dd's byte count), and the callback's line, which never says FAILED."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import progress

from helpers import read_fixture


def test_vllms_load_is_read_from_its_log_as_it_grows():
    lines = read_fixture("vllm_log", "vllm-0.32-cpu-ray-launch.log").splitlines()
    seen = []
    for end in range(1, len(lines) + 1):
        said = progress.load_progress(lines[:end])
        if said and (not seen or seen[-1] != said):
            seen.append(said)
    assert seen[0] == "engine starting"
    assert "loading the weights: 3 of 3 shards (100%)" in seen or "loading the weights: 0 of 3 shards (0%)" in seen
    assert "sizing the KV cache" in seen
    assert seen[-1] == "serving, answering /health next"
    assert seen.index("engine starting") < seen.index("sizing the KV cache") < seen.index("serving, answering /health next")
    assert progress.load_progress(["nothing of interest"]) is None


def test_shards_are_read_from_tqdms_rewritten_line():
    line = ("Loading safetensors checkpoint shards:  14% Completed | 1/7 [00:09<00:57]\r"
            "Loading safetensors checkpoint shards:  43% Completed | 3/7 [00:27<00:36]")
    assert progress.load_progress([line]) == "loading the weights: 3 of 7 shards (43%)"
    assert progress.load_progress(["(Worker pid=9) INFO Model loading took 61.3 GiB and 212.4 seconds"]) == \
        "weights loaded (61.3 GiB per rank)"


def test_copied_bytes_from_dd_and_sizes():
    text = "1048576 bytes (1.0 MB, 1.0 MiB) copied, 1 s, 1.0 MB/s\r2147483648 bytes (2.1 GB, 2.0 GiB) copied, 2 s, 1.0 GB/s"
    assert progress.dd_bytes(text) == 2 * 1024 ** 3
    assert progress.dd_bytes("") == 0
    assert progress.copied(2 * 1024 ** 3, 8 * 1024 ** 3) == "2.0 GiB of 8.0 GiB (25%)"
    assert progress.copied(5 * 1024 ** 2, None) == "5 MiB copied"
    assert progress.joined(1, 2, 1.0, 2) == "1 of 2 nodes joined Ray, 1 of 2 GPUs"


def test_the_waiting_line_says_what_it_waits_for_and_never_failed():
    line = progress.waiting_line("Wait for vLLM", "spark1", {"attempts": 3, "retries": 180, "failed": True,
                                                             "progress": "loading the weights: 3 of 7 shards (43%)"})
    assert line == "... waiting [spark1] Wait for vLLM - loading the weights: 3 of 7 shards (43%) (look 3 of at most 180)"
    assert "FAILED" not in line.upper()
    assert "not yet" in progress.waiting_line("t", "h", {"attempts": 1, "retries": 2, "msg": "OK (68 bytes)"})
    assert "- not ready: 1 of 2 nodes alive (look" in progress.waiting_line(
        "t", "h", {"attempts": 1, "retries": 2, "failed": True, "msg": "not ready: 1 of 2 nodes alive"})
