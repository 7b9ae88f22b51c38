"""One memory model everywhere (issue 34, item 3): the page-cache drop, the planner, the supervisor and the pinned-memory
refusal read the same figures (CUDA's total, the profile's runtime beside the pool, the floor), fed with the captured
GB10 outputs and each write-up's own numbers (seed file, line)."""

import copy
import os

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import (
    base, boot, deployment, memory as plan_memory, memory_fit, planner, profiles)
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import unified_memory as um

from helpers import ROOT, read_fixture, spark_inputs

GIB = 1024 ** 3
GB = 10 ** 9
SEED_PROFILES = ["minimax_m25_nvfp4_ep", "minimax_m27_mxfp4", "minimax_m27_nvfp4_gb10", "minimax_m3_nvfp4_tp3",
                 "nemotron3_super_nvfp4"]
LIMIT = int(base.DEFAULT_SETTINGS["unaccounted_limit_gib"] * GIB)


def profile(name):
    return profiles.load(os.path.join(ROOT, "profiles", name + ".yml"))


def inputs_for(name, tmp_path, meminfo="gb10-idle.txt"):
    prof = profile(name)
    return spark_inputs(prof, tmp_path, count=prof["parallel"]["nodes"], meminfo=meminfo)


def capture(name):
    return um.summarize(um.parse_meminfo(read_fixture("meminfo", name)),
                        um.parse_gpu_query(read_fixture("nvidia_smi", "gb10-query-gpu.csv")),
                        um.parse_compute_apps(read_fixture("nvidia_smi", "gb10-compute-apps-none.csv")))


def after_drop(name):
    """The capture as it reads after ``echo 3 > drop_caches``: what the probe counts as given back (MemFree, the page
    cache and the reclaimable slab) is available."""
    info = um.parse_meminfo(read_fixture("meminfo", name))
    facts = capture(name)
    back = info["MemFree"] + facts["page_cache_bytes"] + info.get("SReclaimable", 0)
    return dict(facts, mem_available_bytes=back, mem_free_bytes=back)


def with_memory(inputs, facts):
    inputs = copy.deepcopy(inputs)
    for node in inputs["nodes"].values():
        node["memory"] = copy.deepcopy(facts)
    return inputs


def errors(plan):
    return [e["message"] for e in plan["errors"]]


@pytest.mark.parametrize("name", ["minimax_m27_mxfp4", "minimax_m27_nvfp4_gb10"])
def test_the_082_profiles_get_a_drop_on_the_page_cache_capture_and_then_plan(name, tmp_path):
    """The captured page-cache GB10 (108.2 GiB available, 111.9 GiB after a drop) at the seeds' 0.82: vLLM's own check
    passes (98.1 GiB), the plan would refuse the node (under the floor beside the profile's 5.5 GiB runtime), and the
    drop cures it. The probe's verdict asks the plan's own test (memory_fit.admits), with the plan's figures
    (plan/memory.need), so the preflight drops the caches, and the plan after the drop is accepted."""
    inputs = inputs_for(name, tmp_path)
    need = plan_memory.need(inputs)
    assert need == {"runtime_bytes": 5905580032, "floor_bytes": 6 * GIB}
    fact = um.summarize(um.parse_meminfo(read_fixture("meminfo", "gb10-page-cache.txt")),
                        um.parse_gpu_query(read_fixture("nvidia_smi", "gb10-query-gpu.csv")), [], None, 0.82, need)
    assert fact["vllm_requested_bytes"] <= fact["mem_available_bytes"]  # a check of vLLM's request alone drops nothing
    assert not fact["fits"] and fact["fits_after_drop_caches"] and fact["drop_caches"]
    before = deployment.plan_deployment(with_memory(inputs, capture("gb10-page-cache.txt")))
    assert not before["ok"] and all("floor" in m for m in errors(before))  # the plan agrees: refused without the drop
    after = deployment.plan_deployment(with_memory(inputs, after_drop("gb10-page-cache.txt")))
    assert after["ok"], after["errors"]
    assert round(after_drop("gb10-page-cache.txt")["mem_available_bytes"] / GIB, 1) == 111.9


def test_the_probe_and_the_plan_give_one_verdict_at_every_utilization(tmp_path):
    """Whatever the utilization, the probe says ``fits`` exactly where the plan accepts the node's memory."""
    inputs = inputs_for("minimax_m27_nvfp4_gb10", tmp_path)
    need = plan_memory.need(inputs)
    facts = capture("gb10-page-cache.txt")
    for hundredths in range(70, 96):
        utilization = hundredths / 100.0
        verdict = um.fit(memory_fit.cuda_total(facts), facts["mem_available_bytes"], 0, utilization, need)
        plan = deployment.plan_deployment(dict(with_memory(inputs, facts), overrides={"gpu_memory_utilization": utilization}))
        memory_refused = any("floor" in m or "vLLM requests" in m for m in errors(plan))
        assert verdict["fits"] is not memory_refused, utilization


def test_seed_002_plans_at_082_with_its_asr_and_tts_services_beside_it(tmp_path):
    """Seed 002, line 31: 0.82, "lowered from 0.88 to account for parakeet-asr and csm-tts consuming ~16 GB between
    both nodes", and "the memory check passes cleanly"; lines 43-51: served so. From an idle GB10 (117.3 GiB available)
    less the services' 8 GB per node the plan accepts 0.82 with the floor kept; at 0.88 it refuses (line 59: "NVFP4
    memory check failure (vLLM, 0.88 util)")."""
    inputs = inputs_for("minimax_m27_nvfp4_gb10", tmp_path)
    idle = capture("gb10-idle.txt")
    services = 16 * GB // 2
    busy = dict(idle, mem_available_bytes=idle["mem_available_bytes"] - services)
    plan = deployment.plan_deployment(with_memory(inputs, busy))
    assert plan["ok"], plan["errors"]
    assert plan["gpu_memory_utilization"] == 0.82
    for node in plan["cluster"]["memory"]["nodes"].values():
        assert node["runtime_bytes"] == 5905580032 and node["headroom_bytes"] >= 6 * GIB
    higher = deployment.plan_deployment(dict(with_memory(inputs, busy), overrides={"gpu_memory_utilization": 0.88}))
    assert not higher["ok"] and "lower gpu_memory_utilization to 0.82" in errors(higher)[0]


def test_seed_000_head_keeps_what_the_write_up_saw_at_vllms_default():
    """Seed 000, line 7: at vLLM's default 0.9, after warm-up, the head "sits at ~96 percent RAM ... ~4.4GB free". With
    the profile's runtime (measured there) the plan's headroom on the head at 0.9 is that 4.4 GB; the 9.35 GiB default
    (seed 004) left 0.25 GiB, and disagreed with the write-up."""
    idle = capture("gb10-idle.txt")
    runtime = profile("minimax_m3_nvfp4_tp3")["memory"]["runtime_bytes"]
    left = idle["mem_available_bytes"] - memory_fit.needed_bytes(memory_fit.cuda_total(idle), 0.9) - runtime
    assert abs(left - 4.4 * GB) < 0.01 * GIB


def test_each_seed_profile_names_the_source_of_its_runtime():
    figures = {name: profile(name)["memory"] for name in SEED_PROFILES}
    assert {n: m["runtime_bytes"] for n, m in figures.items()} == {
        "minimax_m25_nvfp4_ep": 5905580032, "minimax_m27_mxfp4": 5905580032, "minimax_m27_nvfp4_gb10": 5905580032,
        "minimax_m3_nvfp4_tp3": 5905580032, "nemotron3_super_nvfp4": plan_memory.RUNTIME_BYTES}
    for name, memory in figures.items():
        assert memory["runtime_source"].startswith("seed 00"), name


@pytest.mark.parametrize("name", SEED_PROFILES)
def test_every_restore_gives_a_plan(name, tmp_path):
    """Each deviation's ``restore`` plans on the sample inventory (idle GB10s): not only does it give the write-up's value
    back (test_seed_profiles), the plan accepts it. A value the write-up leaves unstated that could not run is no
    deviation but a choice (tests/seeds, status chosen: seed 000's context)."""
    inputs = inputs_for(name, tmp_path)
    for deviation in profile(name).get("deviations") or []:
        plan = planner.make_plan(profiles.apply_variables(copy.deepcopy(inputs), deviation["restore"]))
        found = errors(plan)
        assert plan["ok"] and not found, (deviation["what"], found)


def test_the_supervisor_needs_what_the_plan_needs(tmp_path):
    inputs = inputs_for("minimax_m27_nvfp4_gb10", tmp_path)
    plan = deployment.plan_deployment(inputs)
    memory = plan["cluster"]["memory"]
    need = boot.memory_need(memory, "spark1", {"unaccounted_limit_gib": 8})
    node = memory["nodes"]["spark1"]
    assert need["need_available_bytes"] == memory_fit.needed_bytes(node["cuda_total_bytes"], 0.82, 5905580032, 6 * GIB)


class FakeDriver:
    """libcuda.so.1 as ctypes sees it: each cu* call answers 0 (CUDA_SUCCESS) or the given error, and cuMemGetInfo_v2
    writes the given free and total bytes; the calls are recorded (a context made must be destroyed)."""

    def __init__(self, free, total, fail=None):
        self.free, self.total, self.fail, self.calls = free, total, fail, []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append(name)
            if name == self.fail:
                return 100  # CUDA_ERROR_NO_DEVICE
            if name == "cuMemGetInfo_v2":
                args[0]._obj.value, args[1]._obj.value = self.free, self.total  # pylint: disable=protected-access
            return 0
        return call


def test_cuda_free_and_total_are_read_through_the_nodes_driver_and_its_context_let_go():
    driver = FakeDriver(36259627008, 128494518272)
    assert um.cuda_mem_info(loader=lambda name: driver) == {"free_bytes": 36259627008, "total_bytes": 128494518272}
    assert driver.calls == ["cuInit", "cuDeviceGet", "cuCtxCreate_v2", "cuMemGetInfo_v2", "cuCtxDestroy_v2"]
    failing = FakeDriver(1, 2, fail="cuMemGetInfo_v2")
    assert um.cuda_mem_info(loader=lambda name: failing) is None and failing.calls[-1] == "cuCtxDestroy_v2"
    assert um.cuda_mem_info(loader=lambda name: FakeDriver(1, 2, fail="cuInit")) is None

    def missing(name):
        raise OSError("%s: cannot open shared object file" % name)
    assert um.cuda_mem_info(loader=missing) is None  # no driver: the simulated nodes
    assert um.cuda_mem_info(loader=lambda name: FakeDriver(3, 2)) is None  # an answer that cannot be
    assert um.cuda_mem_info(loader=lambda name: object()) is None  # a library of that name without the driver's calls


def test_a_driver_that_does_not_answer_costs_the_bound_and_reads_as_no_answer_not_as_no_driver():
    """The read runs in a child given its seconds: a hung cuInit (a GPU fault) never holds the probe or the supervisor,
    and is told from a node without a driver (None), as vLLM would hang on it."""
    import time  # pylint: disable=import-outside-toplevel

    answer = {"free_bytes": 36259627008, "total_bytes": 128494518272}
    assert um.cuda_mem_info_bounded(2, read=lambda: answer) == answer
    assert um.cuda_mem_info_bounded(2, read=lambda: None) is None  # no driver
    started = time.monotonic()
    assert um.cuda_mem_info_bounded(0.5, read=lambda: time.sleep(30)) == {"unanswered_seconds": 0.5}
    assert time.monotonic() - started < 5

    def broken():
        raise RuntimeError("the driver's library failed")
    assert um.cuda_mem_info_bounded(2, read=broken) is None
    with pytest.raises(ChildProcessError):  # every child reaped, the killed one too
        os.waitpid(-1, os.WNOHANG)
    assert not um.UNREAPED


def test_while_the_last_reads_child_is_stuck_in_the_driver_no_other_starts(monkeypatch):
    """The supervisor looks every few seconds: a wedged driver must cost it one process, not one a look."""
    import subprocess  # pylint: disable=import-outside-toplevel

    stuck = subprocess.Popen(["sleep", "30"])  # a child that has not gone, as one in the driver's call stays
    monkeypatch.setattr(um, "UNREAPED", {stuck.pid})
    calls = []
    answer = um.cuda_mem_info_bounded(2, read=lambda: calls.append(1) or {"free_bytes": 1, "total_bytes": 2})
    assert answer == {"unanswered_seconds": 2, "earlier": True}
    assert calls == [] and um.UNREAPED == {stuck.pid}
    stuck.kill()
    stuck.wait()  # gone (here reaped by Popen; the read then finds it gone and reads again)
    assert um.cuda_mem_info_bounded(2, read=lambda: {"free_bytes": 1, "total_bytes": 2}) == {"free_bytes": 1, "total_bytes": 2}
    assert not um.UNREAPED


def test_the_reads_child_holds_none_of_its_parents_files(tmp_path):
    """A child stuck in the driver must not keep the module's output (an SSH session) or a listening socket open."""
    kept = os.open(str(tmp_path / "parents"), os.O_CREAT | os.O_WRONLY)
    try:
        def open_files():
            found = {}
            for name in os.listdir("/proc/self/fd"):
                try:
                    found[name] = os.readlink("/proc/self/fd/" + name)
                except OSError:  # listdir's own, closed by now
                    pass
            return found
        seen = um.cuda_mem_info_bounded(2, read=open_files)
    finally:
        os.close(kept)
    assert str(tmp_path / "parents") not in seen.values(), seen
    assert [seen[fd] for fd in ("0", "1", "2")] == ["/dev/null"] * 3, seen
    assert len([t for t in seen.values() if t.startswith("pipe:")]) == 1, seen  # the answer's alone


def test_the_probe_reads_cuda_once_a_node_and_only_where_nothing_holds_the_gpu(tmp_path):
    """CUDA's reading makes a context: the probe takes it where nvidia-smi lists no compute process (a launch may
    follow), once for every deployment on the node, and never beside a serving vLLM."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_read

    (tmp_path / "meminfo").write_text(read_fixture("meminfo", "gb10-idle.txt"))
    smi = tmp_path / "nvidia-smi"  # a stand-in that prints the captured answers (the probe runs it in its batch)
    smi.write_text('#!/bin/sh\ncase "$1" in --query-gpu*) cat %s/gpu.csv;; --query-compute-apps*) cat %s/apps.csv;; esac\n'
                   % (tmp_path, tmp_path))
    smi.chmod(0o755)
    (tmp_path / "gpu.csv").write_text(read_fixture("nvidia_smi", "gb10-query-gpu.csv"))

    node = {"docker": "docker", "smi_path": str(smi), "nvidia_smi": "nvidia-smi", "proc_root": str(tmp_path), "sysfs_root": str(tmp_path)}
    for apps, reads in (("gb10-compute-apps-none.csv", 1), ("gb10-compute-apps-serving.csv", 0)):
        (tmp_path / "apps.csv").write_text(read_fixture("nvidia_smi", apps))
        asked = []
        found = node_read.read({"chat": {}, "coder": {}}, node, lambda argv: (1, "", "not here"), lambda message: None,
                               cuda_read=lambda asked=asked: asked.append(1) or seed_002_cuda())
        assert len(asked) == reads
        assert [found[n]["memory"].get("cuda") for n in ("chat", "coder")] == [seed_002_cuda() if reads else None] * 2


def seed_002_cuda():
    """Seed 002, line 13: "pre_model_load_memory=33.77, local_gpu_memory=101.33" (SGLang's GiB of CUDA-free, as
    torch.cuda.mem_get_info reads it) on the node a killed container left ~33 GB on (line 12), of CUDA's 119.67 GiB."""
    return {"free_bytes": int(33.77 * GIB), "total_bytes": memory_fit.GB10_CUDA_TOTAL_BYTES}


def test_pinned_memory_only_cuda_sees_is_refused_naming_the_reboot():
    """Seed 002, line 11: "nvidia-smi shows 0 MB used. free -g shows plenty of RAM. But the memory is gone." /proc/meminfo
    is an idle GB10's (no compute apps): its unaccounted bytes see nothing; CUDA's own free, short of MemFree by far more
    than the limit, does: refused, naming the reboot (line 15: "Reboot")."""
    idle = capture("gb10-idle.txt")
    assert idle["gpu_process_bytes"] == 0 and idle["unaccounted_bytes"] < LIMIT
    assert memory_fit.pinned("spark2", idle["unaccounted_bytes"], LIMIT) is None  # /proc/meminfo alone misses it
    held, message = memory_fit.pinned("spark2", idle["unaccounted_bytes"], LIMIT, idle["mem_free_bytes"], seed_002_cuda())
    assert held == idle["mem_free_bytes"] - int(33.77 * GIB) and held > 33 * GB
    assert message.startswith("spark2: CUDA sees 33.8 GiB free of 119.7 GiB")
    assert message.endswith("Nothing but a reboot frees it; reboot spark2 before launching")


def test_the_page_cache_is_not_taken_for_pinned_memory():
    """On unified memory cudaMemGetInfo's free is about MemFree: the page cache counts as used on both sides (technical
    facts 3.2). The page-cache capture with CUDA free at its MemFree is not pinned; MemAvailable would have said so."""
    cached = capture("gb10-page-cache.txt")
    cuda = {"free_bytes": cached["mem_free_bytes"], "total_bytes": memory_fit.GB10_CUDA_TOTAL_BYTES}
    assert memory_fit.pinned("spark1", cached["unaccounted_bytes"], LIMIT, cached["mem_free_bytes"], cuda) is None
    assert cached["mem_available_bytes"] - cuda["free_bytes"] > LIMIT


def test_either_reading_refuses_the_node_in_the_plan(tmp_path):
    """The planner refuses a node whose probe carries CUDA's reading (``memory.cuda``) showing pinned memory, as it
    refuses /proc/meminfo's unaccounted bytes (the captured killed-container node), with the reboot named."""
    inputs = inputs_for("minimax_m27_nvfp4_gb10", tmp_path)
    inputs["nodes"]["spark2"]["docker"] = {"runtimes": ["nvidia", "runc"]}
    inputs["nodes"]["spark2"]["memory"] = dict(capture("gb10-idle.txt"), cuda=seed_002_cuda())
    plan = planner.make_plan(copy.deepcopy(inputs))
    assert any(m.startswith("spark2: CUDA sees 33.8 GiB free") and "reboot spark2 before launching" in m for m in errors(plan))
    inputs["nodes"]["spark2"]["memory"] = capture("gb10-leaked.txt")
    plan = planner.make_plan(copy.deepcopy(inputs))
    assert any(m.startswith("spark2 holds") and "reboot spark2 before launching" in m for m in errors(plan))


def test_a_driver_that_gave_no_answer_refuses_the_node_in_the_plan_and_no_driver_does_not(tmp_path):
    """A hung cuInit is a GPU fault vLLM would wait on for ever: refused with the reboot named, unlike a node without a
    driver (the simulated nodes: None), where /proc/meminfo alone judges."""
    inputs = inputs_for("minimax_m27_nvfp4_gb10", tmp_path)
    inputs["nodes"]["spark2"]["docker"] = {"runtimes": ["nvidia", "runc"]}
    inputs["nodes"]["spark2"]["memory"] = dict(capture("gb10-idle.txt"), cuda={"unanswered_seconds": 10})
    found = [m for m in errors(planner.make_plan(copy.deepcopy(inputs))) if m.startswith("spark2: CUDA's driver")]
    assert found == ["spark2: CUDA's driver does not answer (it gave no answer within 10 s: cuInit or cuMemGetInfo waiting, as a GPU "
                     "fault leaves it), and vLLM would wait on it for ever. Look again in a minute; if it still does not answer, "
                     "nothing but a reboot clears it: reboot spark2 before launching"]
    inputs["nodes"]["spark2"]["memory"] = dict(capture("gb10-idle.txt"), cuda={"unanswered_seconds": 10, "earlier": True})
    assert any("(an earlier read of it still waits:" in m for m in errors(planner.make_plan(copy.deepcopy(inputs))))
    inputs["nodes"]["spark2"]["memory"] = dict(capture("gb10-idle.txt"), cuda=None)
    assert not [m for m in errors(planner.make_plan(copy.deepcopy(inputs))) if m.startswith("spark2")]
