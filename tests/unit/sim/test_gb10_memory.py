"""The simulated GB10's memory (roles/sim_cluster/files/gb10_memory.py) as the collection's probe reads it.

The stand-in is fed ledger totals; its meminfo and compute apps go through the probe's own parsers, and the figures
a Spark would show come out: a rank's pool used and explained, pinned memory unaccounted, page cache that only a
drop frees, a node that starts with less.
"""

import importlib.util
import json
import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import unified_memory as um

from helpers import ROOT, read_fixture

GIB = 1024 ** 3
FILES = os.path.join(ROOT, "roles", "sim_cluster", "files")
SPEC = importlib.util.spec_from_file_location("gb10_memory", os.path.join(FILES, "gb10_memory.py"))
gb10 = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gb10)
BASE = gb10.read_base(os.path.join(FILES, "gb10_idle_meminfo.txt"))
RANK = 35_000 * 1024 ** 2  # 0.3 x 119.67 GiB, rounded to MiB as nvidia-smi gives it


def probe(totals, apps="", utilization=None):
    return um.summarize(um.parse_meminfo(gb10.render(BASE, totals)),
                        um.parse_gpu_query(read_fixture("nvidia_smi", "gb10-query-gpu.csv")),
                        um.parse_compute_apps(apps), [], utilization)


def test_the_idle_figures_are_the_captured_gb10s():
    with open(os.path.join(FILES, "gb10_idle_meminfo.txt"), encoding="utf-8") as handle:
        assert handle.read() == read_fixture("meminfo", "gb10-idle.txt")
    assert um.parse_meminfo(gb10.render(BASE, {})) == um.parse_meminfo(read_fixture("meminfo", "gb10-idle.txt"))


def test_every_rendering_has_one_length_so_an_in_place_write_never_leaves_a_tail():
    lengths = {len(gb10.render(BASE, totals)) for totals in
               ({}, {"rank": RANK}, {"rank": 2 * RANK, "pinned": 40 * GIB, "cache": 60 * GIB, "other": 9 * GIB})}
    assert len(lengths) == 1


def test_a_running_rank_holds_its_pool_and_nvidia_smi_explains_it():
    idle, serving = probe({}), probe({"rank": RANK}, "4242, python3, %d\n" % (RANK // 1024 ** 2))
    assert idle["mem_available_bytes"] - serving["mem_available_bytes"] == RANK
    assert serving["gpu_process_bytes"] == RANK
    assert serving["unaccounted_bytes"] == idle["unaccounted_bytes"]


def test_pinned_memory_is_used_and_unaccounted():
    idle, pinned = probe({}), probe({"pinned": RANK})
    assert idle["mem_available_bytes"] - pinned["mem_available_bytes"] == RANK
    assert pinned["unaccounted_bytes"] - idle["unaccounted_bytes"] == RANK


def test_page_cache_starves_a_high_utilization_until_dropped():
    cached = probe({"cache": 60 * GIB}, utilization=0.92)  # vLLM asks 110.1 GiB of CUDA's 119.67; 109.3 GiB available
    assert cached["page_cache_bytes"] >= 60 * GIB
    assert not cached["fits"] and cached["fits_after_drop_caches"]
    assert probe({}, utilization=0.92)["fits"]
    assert cached["unaccounted_bytes"] == probe({})["unaccounted_bytes"]


def test_a_node_that_starts_with_less_holds_it_in_a_process():
    idle, other = probe({}), probe({"other": 9 * GIB})
    assert idle["mem_available_bytes"] - other["mem_available_bytes"] == 9 * GIB
    assert other["anon_bytes"] - idle["anon_bytes"] == 9 * GIB
    assert other["unaccounted_bytes"] == idle["unaccounted_bytes"]


def event(action, container, code=None):
    attributes = {"exitCode": str(code)} if code is not None else {}
    return json.dumps({"Type": "container", "Action": action, "Actor": {"ID": container, "Attributes": attributes}}).encode()


def test_a_container_that_starts_again_is_judged_by_its_next_death_not_its_last():
    deaths = gb10.Deaths()
    for line in (event("die", "ray", 137), event("oom", "ray")):  # a power cycle killed it
        deaths.note(line)
    assert deaths.killed_hard("ray") is True
    deaths.note(event("start", "ray"))  # its restart policy started it again on the next boot
    assert deaths.killed_hard("ray") is None
    deaths.note(event("die", "ray", 0))  # then it stopped cleanly: its ranks' memory is freed, not pinned
    assert deaths.killed_hard("ray") is False
    deaths.note(b"1a2")  # a chunk size between events is not an event
    assert deaths.killed_hard("ray") is False
