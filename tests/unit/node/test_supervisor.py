"""boot: the node's supervisor that brings the model back after a boot, planned from the plan and deciding each look
from what the node shows (captured probe outputs: a GB10's meminfo, Ray's state on the simulated cluster)."""

import json
import os
import shutil
import subprocess
import time

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import firewall_state, process_group, supervisor
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import boot, deployment, profiles
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_probe
from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import canary

from helpers import ROOT, read_fixture, run_module, spark_inputs


def plan(tmp_path, **settings):
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    made = deployment.plan_deployment(spark_inputs(m25, tmp_path, settings=settings))
    assert made["ok"], made["errors"]
    return made


def test_each_node_gets_its_steps_in_order_from_the_plan(tmp_path):
    made = plan(tmp_path)
    head, worker = made["nodes_order"]
    cluster = made["cluster"]
    worker_steps = made["nodes"][worker]["boot"]["config"]["steps"]
    assert [s["kind"] for s in worker_steps] == ["firewall", "tcp", "container"]
    # fail closed: the firewall's table first on every node, nothing starts without it
    assert worker_steps[0] == {"name": "the firewall table dgx_spark_vllm_dgx_spark is the one serve.yml loaded", "kind": "firewall",
                               "table": "dgx_spark_vllm_dgx_spark", "record": made["nodes"][worker]["paths"]["firewall_record"],
                               "unit": "dgx-spark-vllm-firewall-dgx-spark.service"}
    worker_steps = worker_steps[1:]
    assert worker_steps[0]["rejoin"] == made["nodes"][worker]["containers"][0]["name"]
    assert (worker_steps[0]["host"], worker_steps[0]["port"]) == (cluster["head_ip"], 6379)
    assert worker_steps[1]["container"] == made["nodes"][worker]["containers"][0]["name"] and worker_steps[1]["check_memory"]
    head_boot = made["nodes"][head]["boot"]
    steps = head_boot["config"]["steps"]
    assert [s["kind"] for s in steps] == ["firewall", "container", "join", "driver", "health", "completion"]
    steps = steps[1:]
    assert steps[1]["expected_gpus"] == cluster["expected_ray_gpus"] == 2 and steps[1]["expected_ips"] == cluster["expected_ips"]
    serve = made["nodes"][head]["serve"]
    # the driver the supervisor starts is the one serve.yml starts, under the same hash: a later serve.yml changes nothing
    assert steps[2]["argv"] == serve["command"] and steps[2]["config_hash"] == serve["config_hash"] == cluster["serve_config_hash"]
    assert steps[2]["state_file"] == "/dgx-spark/run/vllm.json" and steps[2]["check_memory"]
    assert steps[2]["state_file_host"] == made["nodes"][head]["paths"]["vllm_state_file"]
    assert steps[3]["url"] == cluster["endpoint"]["local_health_url"]
    assert steps[4]["key_file"] == made["nodes"][head]["paths"]["api_key_file"] and steps[4]["model"] == cluster["endpoint"]["served_model_name"]
    node_memory = cluster["memory"]["nodes"][head]
    assert head_boot["config"]["memory"]["need_available_bytes"] == (
        node_memory["requested_bytes"] + node_memory["runtime_bytes"] + cluster["memory"]["headroom_floor_bytes"])
    assert head_boot["enabled"] is True


def test_the_unit_starts_after_docker_and_the_firewall_and_runs_the_copied_code(tmp_path):
    made = plan(tmp_path)
    node = made["nodes"][made["head"]]["boot"]
    assert node["paths"]["unit"] == "/etc/systemd/system/dgx-spark-vllm-serve-dgx-spark.service"
    assert node["paths"]["wants"] == "/etc/systemd/system/multi-user.target.wants/dgx-spark-vllm-serve-dgx-spark.service"
    lines = node["unit"].splitlines()
    assert ("After=local-fs.target docker.service network-online.target nftables.service nvidia-persistenced.service "
            "dgx-spark-vllm-firewall-dgx-spark.service") in lines
    exec_start = [line for line in lines if line.startswith("ExecStart=")][0]
    assert exec_start.split("=", 1)[1].split() == ["/usr/bin/env", "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=" + node["paths"]["lib"], "python3", "-m",
                                                   "ansible_collections.dgx_spark.vllm.plugins.module_utils.node.supervisor", node["paths"]["config"]]
    assert node["paths"]["config"].startswith(made["nodes"][made["head"]]["state_dir"] + "/")


def test_one_variable_turns_it_off(tmp_path):
    made = plan(tmp_path, boot_start=False, firewall=False)
    node = made["nodes"][made["head"]]["boot"]
    assert node["enabled"] is False
    assert "After=local-fs.target docker.service network-online.target nftables.service nvidia-persistenced.service" in node["unit"].splitlines()
    assert boot.next_boot(node["config"], False, None)["next_boot"].startswith("nothing")


class FakeNode(supervisor.Ops):
    """A node as the supervisor sees it: files, Docker's answers, the endpoint."""

    docker = "docker"

    def __init__(self, files=None, running=(), ray=None, healthy=False, cuda=None):
        self.files = dict(files or {})
        self.cuda_answer = cuda  # CUDA's own reading; none: no driver, as on the simulated nodes
        self.running = set(running)
        self.ray = ray
        self.healthy = healthy
        self.pgid = None
        self.read_started = 0.0
        self.calls = []
        self.asked = 0
        self.canary_asked = []
        self.metrics = "# HELP vllm:num_requests_running Number of requests in model execution batches.\n" \
                       "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0.0\n" \
                       "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0.0\n"
        self.canary_answer = json.loads(read_fixture("canary", "sim-tiny-completion-token-ids.json"))

    def exists(self, path):
        return path in self.files

    def cuda(self):
        return self.cuda_answer

    def read(self, path):
        if path == "/state/run/vllm.json" and self.pgid:
            return json.dumps({"pgid": self.pgid, "config_hash": "h", "started_at": 1000.0 + self.pgid + self.read_started})
        if path not in self.files:
            raise OSError("no %s" % path)
        return self.files[path]

    def connects(self, host, port):
        return "head" in self.running

    def http(self, url, body=None, key=None, timeout=5, text=False):
        if url.endswith("/metrics"):
            return 200, self.metrics
        if body is None:
            return (200 if self.healthy else None), None
        assert key == "sk-test"
        if url.endswith("/v1/completions"):  # the canary's prompts: the captured answer, or the test's
            self.canary_asked.append(body["prompt"])
            return 200, self.canary_answer
        self.asked += 1
        return 200, {"choices": [{"message": {"content": "Hello there"}, "finish_reason": "length"}]}

    def run(self, argv, data=None, timeout=60):
        self.calls.append(list(argv))
        if argv[1] == "inspect":
            return (0, "true\n" if argv[-1] in self.running else "false\n", "") if argv[-1] in ("head", "worker") else (1, "", "No such object")
        if argv[1] in ("start", "restart"):
            self.running.add(argv[-1])
            return 0, argv[-1], ""
        if argv[1] == "exec" and "ray" not in self.running and argv[2] == "head":
            return 1, "", "container head is not running"
        if argv[1] == "exec" and "-c" in argv and "import ray" in " ".join(argv):
            return 0, self.ray, ""
        if argv[1] == "exec" and argv[3:5] == ["kill", "-0"]:
            return (0, "", "") if self.pgid else (1, "", "")
        if argv[1] == "exec" and argv[4:6] == ["sh", "-c"] and argv[6] == process_group.LAUNCH_SCRIPT:  # the launch
            self.pgid = 4242
            return 0, "4242\n", ""
        return 0, "", ""


def head_config():
    return {"hold": "/state/boot/hold", "status": "/state/boot/status.json", "interval": 5,
            "memory": {"need_available_bytes": int(100 * boot.GIB), "unaccounted_limit_bytes": 8 * boot.GIB},
            "steps": [{"name": "container head runs", "kind": "container", "container": "head", "check_memory": True},
                      {"name": "every node and GPU joined", "kind": "join", "container": "head", "expected_nodes": 2,
                       "expected_gpus": 2, "expected_ips": ["10.210.0.10", "10.210.0.11"]},
                      {"name": "vLLM runs in head", "kind": "driver", "container": "head", "argv": ["/dgx-spark/bin/vllm-serve", "m"],
                       "config_hash": "h", "state_file": "/dgx-spark/run/vllm.json", "log_file": "/dgx-spark/logs/vllm.log",
                       "state_file_host": "/state/run/vllm.json",
                       "check_memory": True},
                      {"name": "the endpoint answers", "kind": "health", "url": "http://127.0.0.1:8000/health"},
                      {"name": "one completion", "kind": "completion", "url": "http://127.0.0.1:8000", "model": "m",
                       "key_file": "/state/secrets/key"}]}


def test_a_head_that_boots_starts_in_order_and_only_when_every_node_joined():
    node = FakeNode(files={"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt"), "/state/secrets/key": "sk-test\n"})
    memo = {}
    config = head_config()
    assert supervisor.look(config, node, memo) == ("starting", "container head runs", "started container head")
    node.running.add("ray")
    one = json.loads(read_fixture("ray", "one-of-two.json"))
    for entry in one["nodes"]:
        entry["NodeManagerAddress"] = "10.210.0.10"
    node.ray = json.dumps(one)
    state, detail, did = supervisor.look(config, node, memo)
    assert (state, did) == ("waiting", None) and detail.startswith("every node and GPU joined: missing nodes: 10.210.0.11")
    assert not any(process_group.LAUNCH_SCRIPT in c for c in node.calls)  # no vLLM before the gate
    node.ray = read_fixture("ray", "sim-two-nodes.json")
    assert supervisor.look(config, node, memo) == ("starting", "vLLM runs in head", "started vLLM in head (process group 4242)")
    launch = [c for c in node.calls if process_group.LAUNCH_SCRIPT in c][0]
    assert launch[4:] == ["sh", "-c", process_group.LAUNCH_SCRIPT, "/dgx-spark/run/vllm.json", "/dgx-spark/logs/vllm.log",
                          "/dgx-spark/bin/vllm-serve", "m"]
    assert supervisor.look(config, node, memo) == ("waiting", "the endpoint answers: not answering 200 yet", None)
    node.healthy = True
    state, detail, did = supervisor.look(config, node, memo)
    assert state == "serving" and did.startswith("completion passed") and node.asked == 1
    assert supervisor.look(config, node, memo) == ("serving", "every step holds", None) and node.asked == 1  # asked once per start
    assert not any("import ray" in " ".join(c) for c in node.calls[-4:])  # while vLLM runs, Ray's client is not started


def test_a_dead_vllm_is_started_again_and_asked_again():
    node = FakeNode(files={"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt"), "/state/secrets/key": "sk-test"},
                    running={"head", "ray"}, ray=read_fixture("ray", "sim-two-nodes.json"), healthy=True)
    node.pgid = 7
    memo = {}
    assert supervisor.look(head_config(), node, memo)[0] == "serving" and node.asked == 1
    node.pgid = None  # a worker rebooted: vLLM lost a rank and ended
    assert supervisor.look(head_config(), node, memo)[0] == "starting"
    assert supervisor.look(head_config(), node, memo)[0] == "serving" and node.asked == 2


def test_pinned_memory_refuses_the_start_and_says_why():
    node = FakeNode(files={"/proc/meminfo": read_fixture("meminfo", "gb10-leaked.txt")})
    state, detail, did = supervisor.look(head_config(), node, {})
    assert (state, did) == ("refused", None)
    assert "container head runs" in detail and "pinned by a container killed hard" in detail and "reboot this node" in detail
    assert not any(c[1] == "start" for c in node.calls)


def test_memory_only_cuda_sees_pinned_refuses_the_start_naming_the_reboot():
    """Seed 002: after a hard kill nvidia-smi showed 0 MB used and free -g plenty, while CUDA saw 33.77 GiB free: the
    supervisor reads CUDA's own free beside /proc/meminfo, as the plan does, and starts nothing into it."""
    cuda = {"free_bytes": int(33.77 * boot.GIB), "total_bytes": int(119.67 * boot.GIB)}
    node = FakeNode(files={"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt")}, cuda=cuda)
    state, detail, did = supervisor.look(head_config(), node, {})
    assert (state, did) == ("refused", None) and not any(c[1] == "start" for c in node.calls)
    assert "this node: CUDA sees 33.8 GiB free of 119.7 GiB" in detail and detail.endswith("reboot this node before launching")
    idle = FakeNode(files={"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt")})
    assert supervisor.memory_problem(head_config()["memory"], idle) is None  # no driver: /proc/meminfo alone
    wedged = FakeNode(files={"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt")}, cuda={"unanswered_seconds": 10})
    state, detail, did = supervisor.look(head_config(), wedged, {})  # a driver that gave no answer: vLLM would hang on it
    assert (state, did) == ("refused", None) and not any(c[1] == "start" for c in wedged.calls)
    assert "CUDA's driver does not answer (it gave no answer within 10 s" in detail and "Look again in a minute" in detail
    assert detail.endswith("reboot this node before launching")


def test_cuda_is_not_read_beside_a_process_that_holds_the_gpu():
    """A context is made to read CUDA's free: never beside a rank still there (a worker rejoining while its Ray container
    runs) or another deployment's vLLM. nvidia-smi's compute apps say so, as the probe reads them."""
    class Busy(FakeNode):
        def run(self, argv, data=None, timeout=60):
            if argv[0] == "nvidia-smi":
                self.calls.append(list(argv))
                return 0, read_fixture("nvidia_smi", "gb10-compute-apps-serving.csv"), ""
            return FakeNode.run(self, argv, data, timeout)

        def cuda(self):
            raise AssertionError("CUDA read beside a process that holds the GPU")
    busy = Busy(files={"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt")}, cuda={"unanswered_seconds": 10})
    assert supervisor.memory_problem(head_config()["memory"], busy) is None
    assert any(c[0] == "nvidia-smi" for c in busy.calls)


def test_too_little_free_memory_refuses_and_names_the_figures():
    config = head_config()
    config["memory"]["need_available_bytes"] = int(120 * boot.GIB)
    node = FakeNode(files={"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt")})
    state, detail, did = supervisor.look(config, node, {})
    assert state == "refused" and "117.3 GiB available, the plan needs 120.0 GiB" in detail


def test_a_hold_keeps_its_hands_off():
    node = FakeNode(files={"/state/boot/hold": "serve.yml since now"})
    assert supervisor.look(head_config(), node, {})[0] == "held" and node.calls == []


def test_the_status_keeps_the_state_since_it_began_and_the_last_events():
    first = supervisor.record({}, "waiting", "join", None, 10.0, 1)
    same = supervisor.record(first, "waiting", "join", None, 15.0, 1)
    assert same["since"] == 10.0 and same["heartbeat"] == 15.0
    serving = supervisor.record(same, "serving", "ok", "completion passed", 20.0, 1)
    assert serving["serving_since"] == 20.0 and serving["events"][-2:] == [{"at": 20.0, "what": "serving: ok"},
                                                                           {"at": 20.0, "what": "completion passed"}]
    assert [e["what"] for e in serving["events"]] == ["waiting: join", "serving: ok", "completion passed"]  # changes of state only
    many = serving
    for i in range(40):
        many = supervisor.record(many, "starting", str(i), "did %d" % i, 30.0 + i, 1)
    assert len(many["events"]) == supervisor.EVENTS_KEPT and "serving_since" not in many


def test_the_supervisor_ends_when_teardown_removed_its_plan(tmp_path):
    config = dict(head_config(), steps=[], hold=str(tmp_path / "hold"), status=str(tmp_path / "status.json"))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(config))
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        if len(slept) == 2:
            path.unlink()

    assert supervisor.main([str(path)], ops=supervisor.Ops(), sleep=sleep) == 0
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["state"] == "serving" and [e["what"] for e in status["events"]] == ["supervisor started", "serving: every step holds"]
    assert len(slept) == 2


def module_boot(tmp_path):
    where = {"unit": str(tmp_path / "etc/dgx.service"), "wants": str(tmp_path / "etc/wants/dgx.service"),
             "lib": str(tmp_path / "state/boot/lib"), "config": str(tmp_path / "state/boot/plan.json"),
             "status": str(tmp_path / "state/boot/status/status.json"), "hold": str(tmp_path / "state/boot/hold"),
             "legacy_status": str(tmp_path / "state/boot/status.json")}
    config = {"cluster": "t", "node": "n", "hold": where["hold"], "status": where["status"], "interval": 1,
              "memory": {"need_available_bytes": None, "unaccounted_limit_bytes": 8 * boot.GIB}, "steps": []}
    return {"enabled": True, "unit_name": "dgx.service", "paths": where, "unit": boot.unit("t", where), "config": config}


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="the module would use this machine's systemd")
def test_the_module_installs_starts_holds_releases_and_removes_only_its_files(tmp_path):
    spec = module_boot(tmp_path)
    where = spec["paths"]
    (tmp_path / "state/boot").mkdir(parents=True)
    (tmp_path / "state/boot/other").write_text("not ours\n")
    checked = run_module("vllm_boot", {"boot": spec, "_ansible_check_mode": True, "_ansible_diff": True})
    assert checked["changed"] and not os.path.exists(where["config"]) and checked["diff"]["after"]["at_boot"] is True
    first = run_module("vllm_boot", {"boot": spec})
    try:
        assert first["changed"] and first["running"], first
        assert os.readlink(where["wants"]) == where["unit"]
        assert json.loads(open(where["config"]).read()) == spec["config"]
        copied = os.path.join(where["lib"], "ansible_collections/dgx_spark/vllm/plugins/module_utils")
        assert sorted(os.path.relpath(os.path.join(d, f), copied) for d, dummy, names in os.walk(copied) for f in names) \
            == sorted(m.replace(".", "/") + ".py" for m in boot.LIB_MODULES)
        deadline = time.time() + 15
        while time.time() < deadline and "serving" not in (open(where["status"]).read() if os.path.exists(where["status"]) else ""):
            time.sleep(0.2)
        assert json.loads(open(where["status"]).read())["state"] == "serving"  # the copied code really ran
        again = run_module("vllm_boot", {"boot": spec})
        assert not again["changed"] and again["running"] and again["written"] == []
        # What the probe reads of the installed files tells the planner that installing again changes nothing.
        assert boot.install_changes(spec, node_probe.state(boot.probe_paths(where))) == []
        other = dict(spec, config=dict(spec["config"], interval=2))
        assert boot.install_changes(other, node_probe.state(boot.probe_paths(where))) == [where["config"]]
        held = run_module("vllm_boot", {"boot": spec, "state": "held", "holder": "serve.yml"})
        assert held["changed"] and open(where["hold"]).read().startswith("serve.yml since ")
        assert boot.install_changes(spec, node_probe.state(boot.probe_paths(where))) == [where["hold"]]  # released by a commit
        deadline = time.time() + 15
        while time.time() < deadline and json.loads(open(where["status"]).read())["state"] != "held":
            time.sleep(0.2)
        probed = run_module("vllm_boot", {"boot": {"paths": where, "unit_name": "dgx.service"}, "state": "probed"})
        assert not probed["changed"] and probed["status"]["state"] == "held" and "(held now:" in probed["next_boot"]["next_boot"]
        released = run_module("vllm_boot", {"boot": spec})
        assert released["changed"] and not os.path.exists(where["hold"])
    finally:
        gone = run_module("vllm_boot", {"boot": {"paths": where, "unit_name": "dgx.service"}, "state": "absent"})
    assert gone["changed"] and not gone["running"]
    assert sorted(os.listdir(tmp_path / "state/boot")) == ["other"] and not os.path.lexists(where["wants"])
    assert len(boot.install_changes(spec, node_probe.state(boot.probe_paths(where)))) == 3 + len(boot.LIB_MODULES)
    (tmp_path / "state/boot/other").unlink()
    run_module("vllm_boot", {"boot": spec})
    run_module("vllm_boot", {"boot": {"paths": where, "unit_name": "dgx.service"}, "state": "absent"})
    assert not os.path.exists(tmp_path / "state/boot")  # its folder goes too when nothing else is in it
    assert not run_module("vllm_boot", {"boot": {"paths": where, "unit_name": "dgx.service"}, "state": "absent"})["changed"]


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="the module would use this machine's systemd")
def test_a_moved_or_removed_supervisor_takes_its_node_exporter_file_with_it(tmp_path):
    """node_exporter exports whatever its textfile folder holds: the file the supervisor wrote goes when the plan
    moves it elsewhere and when teardown.yml removes the supervisor, and nothing else in that folder is touched."""
    spec = dict(module_boot(tmp_path), enabled=False)  # installed, not started: the files alone are asked here
    folder = tmp_path / "node-exporter"
    folder.mkdir()
    first, second, theirs = folder / "dgx_spark_vllm_a.prom", folder / "dgx_spark_vllm_b.prom", folder / "their_own.prom"
    theirs.write_text("# another exporter's\n")
    spec["config"] = dict(spec["config"], textfile={"path": str(first), "labels": {"cluster": "t", "node": "n"}})
    assert run_module("vllm_boot", {"boot": spec})["changed"]
    first.write_text("figures\n")  # as the supervisor writes them
    assert not run_module("vllm_boot", {"boot": spec})["changed"] and first.exists()
    moved = dict(spec, config=dict(spec["config"], textfile={"path": str(second), "labels": {"cluster": "t", "node": "n"}}))
    assert run_module("vllm_boot", {"boot": moved})["changed"] and not first.exists()
    second.write_text("figures\n")
    assert run_module("vllm_boot", {"boot": {"paths": moved["paths"], "unit_name": "dgx.service"}, "state": "absent"})["changed"]
    assert sorted(p.name for p in folder.iterdir()) == ["their_own.prom"]


def test_a_boot_known_by_its_paths_only_is_held_without_touching_its_plan(tmp_path):
    """recover.yml holds the supervisor with the paths plan (no profile, boot.installed): the hold is written and the
    node's plan, unit and code stay as they are (it once wrote "null" for the plan, then failed on the missing unit)."""
    where = module_boot(tmp_path)["paths"]
    os.makedirs(os.path.dirname(where["config"]))
    with open(where["config"], "w") as handle:
        handle.write('{"steps": []}\n')
    paths_only = boot.installed(str(tmp_path / "state"), "t")
    paths_only["paths"] = where
    checked = run_module("vllm_boot", {"boot": paths_only, "state": "held", "holder": "recover.yml", "_ansible_check_mode": True})
    assert checked["changed"] and not os.path.exists(where["hold"])
    held = run_module("vllm_boot", {"boot": paths_only, "state": "held", "holder": "recover.yml"})
    assert held["changed"] and held["written"] == [where["hold"]], held
    assert open(where["hold"]).read().startswith("recover.yml since ") and open(where["config"]).read() == '{"steps": []}\n'
    assert not os.path.exists(where["unit"]) and not os.path.exists(where["lib"])
    assert not run_module("vllm_boot", {"boot": paths_only, "state": "held", "holder": "recover.yml"})["changed"]
    refused = run_module("vllm_boot", {"boot": paths_only, "state": "present"})
    assert refused["failed"] and "only state=held" in refused["msg"] and os.path.exists(where["hold"])


def wait_for_state(where, state, seconds=15):
    deadline = time.time() + seconds
    while time.time() < deadline:
        found = json.loads(open(where["status"]).read()) if os.path.exists(where["status"]) else {}
        if found.get("state") == state:
            return found
        time.sleep(0.1)
    return found


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="the module would use this machine's systemd")
def test_a_held_install_runs_held_and_a_release_wakes_it_at_once_without_a_restart(tmp_path):
    spec = module_boot(tmp_path)
    spec["config"]["interval"] = 60  # a release must not wait for the next look
    where = spec["paths"]
    held = run_module("vllm_boot", {"boot": spec, "state": "held", "holder": "serve.yml"})
    try:
        assert held["changed"] and held["running"] and os.path.exists(where["hold"]), held
        assert wait_for_state(where, "held")["detail"].startswith("a playbook is changing the cluster")
        pid = json.loads(open(where["status"]).read())["pid"]
        assert not run_module("vllm_boot", {"boot": spec, "state": "held", "holder": "upgrade.yml"})["changed"]
        assert open(where["hold"]).read().startswith("serve.yml since ")  # the first holder's hold is kept
        started = time.time()
        released = run_module("vllm_boot", {"boot": spec})
        assert released["changed"] and released["written"] == [] and not os.path.exists(where["hold"])
        serving = wait_for_state(where, "serving", 10)
        assert serving["state"] == "serving" and time.time() - started < 10
        assert serving["pid"] == pid  # woken, not restarted: what it serves never stopped
    finally:
        run_module("vllm_boot", {"boot": {"paths": where, "unit_name": "dgx.service"}, "state": "absent"})


def worker_config():
    return {"hold": "/state/boot/hold", "status": "/state/boot/status.json", "interval": 5,
            "memory": {"need_available_bytes": int(100 * boot.GIB), "unaccounted_limit_bytes": 8 * boot.GIB},
            "steps": [{"name": "the head's Ray answers", "kind": "tcp", "host": "10.210.0.10", "port": 6379, "rejoin": "worker"},
                      {"name": "container worker runs", "kind": "container", "container": "worker", "check_memory": True}]}


def test_a_worker_rejoins_a_head_that_went_away_and_came_back_at_once():
    node = FakeNode(files={"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt")}, running={"head", "worker"})
    memo = {}
    assert supervisor.look(worker_config(), node, memo) == ("serving", "every step holds", None)
    node.running.discard("head")  # the head reboots: its port goes; the worker's Ray would stay joined to it for minutes
    assert supervisor.look(worker_config(), node, memo)[0] == "waiting"
    node.running.add("head")
    state, detail, did = supervisor.look(worker_config(), node, memo)
    assert state == "starting" and did.startswith("restarted container worker")
    assert node.calls[-1][:2] == ["docker", "restart"]
    assert supervisor.look(worker_config(), node, memo) == ("serving", "every step holds", None)


def test_a_vllm_that_keeps_dying_is_started_three_times_then_left_with_the_reason():
    node = FakeNode(files={"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt"), "/state/secrets/key": "sk-test"},
                    running={"head", "ray"}, ray=read_fixture("ray", "sim-two-nodes.json"))
    memo = {}
    for dummy in range(supervisor.MAX_STARTS):
        assert supervisor.look(head_config(), node, memo)[0] == "starting"
        node.pgid = None  # it dies while loading
    state, detail, did = supervisor.look(head_config(), node, memo)
    assert (state, did) == ("failed", None) and "started 3 times without the node serving" in detail
    launches = [c for c in node.calls if process_group.LAUNCH_SCRIPT in c]
    assert len(launches) == supervisor.MAX_STARTS


def test_the_mp_head_asks_its_completion_once():
    config = head_config()
    config["steps"] = [config["steps"][0], config["steps"][3], config["steps"][4]]  # container, health, completion
    node = FakeNode(files={"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt"), "/state/secrets/key": "sk-test"},
                    running={"head"}, healthy=True)
    memo = {}
    assert supervisor.look(config, node, memo)[0] == "serving" and node.asked == 1
    assert supervisor.look(config, node, memo) == ("serving", "every step holds", None) and node.asked == 1


def test_after_a_boot_the_canary_is_asked_and_a_wrong_answer_fails_by_name():
    """The completion step asks the canary's prompts one at a time and compares them with the head's kept reference:
    the same tokens pass (the same basis: token for token), other tokens fail with the canary's own message."""
    answer = json.loads(read_fixture("canary", "sim-tiny-completion-token-ids.json"))
    settings = dict(canary.settings({}), garbage={"enabled": False})
    basis = {"image_id": "sha256:1", "model": "m", "revision": None, "flags": {}, "env": {}}
    kept = canary.keep({}, "m", canary.reference([{"prompt": p, "tokens": canary.tokens_of(answer)} for p in settings["prompts"]],
                                                 basis, "2026-11-24T10:00:00Z"))
    files = {"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt"), "/state/secrets/key": "sk-test",
             "/state/config/canary-reference.json": json.dumps(kept)}
    config = head_config()
    config["steps"][-1]["canary"] = {"settings": settings, "basis": basis, "reference_file": "/state/config/canary-reference.json"}
    node = FakeNode(files=files, running={"head", "ray"}, ray=read_fixture("ray", "sim-two-nodes.json"), healthy=True)
    node.pgid = 7
    state, detail, did = supervisor.look(config, node, {})
    assert state == "serving" and node.canary_asked == settings["prompts"]
    assert did.endswith("canary passed: 5 prompts agree with the reference recorded 2026-11-24T10:00:00Z token for token "
                        "(image, model revision and numerics unchanged)")
    wrong = json.loads(json.dumps(answer))
    wrong["choices"][0]["logprobs"]["tokens"][3] = "token_id:1"
    node.canary_answer, node.pgid = wrong, 8  # vLLM started again after a boot: asked again
    state, detail, did = supervisor.look(config, node, {})
    assert state == "failed" and "canary FAILED: the answers differ from the reference recorded 2026-11-24T10:00:00Z" in did
    node.metrics, node.pgid, node.canary_asked = node.metrics.replace("} 0.0", "} 3.0", 1), 10, []  # clients came back first
    state, detail, did = supervisor.look(config, node, {})
    assert state == "serving" and did.endswith("canary not asked: 3 requests were in flight") and not node.canary_asked
    del node.files["/state/config/canary-reference.json"]  # no reference kept yet: the completion alone decides
    node.pgid = 9
    assert supervisor.look(config, node, {})[0] == "serving"


def test_the_vllm_the_playbook_verified_is_not_asked_again_after_the_release_and_one_started_later_is():
    """serve.yml's release names the process it verified (the verified file): the woken supervisor does not send it
    the completion and the canary again; a vLLM started after a boot (another start time, even under the same process
    group number) is asked."""
    files = {"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt"), "/state/secrets/key": "sk-test",
             "/state/boot/verified.json": json.dumps({"pgid": 7, "started_at": 1007.0, "by": "serve.yml"})}
    config = dict(head_config(), verified="/state/boot/verified.json")
    node = FakeNode(files=files, running={"head", "ray"}, ray=read_fixture("ray", "sim-two-nodes.json"), healthy=True)
    node.pgid = 7
    state, detail, did = supervisor.look(config, node, {})
    assert state == "serving" and did == "completion passed: verified by serve.yml, not asked again" and node.asked == 0
    node.files["/state/boot/verified.json"] = json.dumps({"pgid": 7, "started_at": 900.0, "by": "serve.yml"})
    state, detail, did = supervisor.look(config, node, {})
    assert state == "serving" and node.asked == 1


def test_a_new_vllm_under_the_process_group_number_of_one_already_asked_is_asked():
    """A recreated container starts its PID numbers anew: the same process group number, another start. What the
    supervisor remembers of the old one (here a failed answer) is not this one's verdict."""
    files = {"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt"), "/state/secrets/key": "sk-test"}
    node = FakeNode(files=files, running={"head", "ray"}, ray=read_fixture("ray", "sim-two-nodes.json"), healthy=True)
    node.pgid, memo = 7, {}
    supervisor.look(head_config(), node, memo)
    assert node.asked == 1
    memo["completion_ok"], memo["completion_detail"] = False, "the old one answered wrong"
    node.read_started = 5.0  # vLLM started again in a new container: process group 7 again
    state, detail, did = supervisor.look(head_config(), node, memo)
    assert state == "serving" and node.asked == 2


def test_without_its_firewall_table_the_node_starts_nothing_and_says_why():
    """Fail closed: a table missing (nft flush ruleset, nftables.service restarted) or changed by hand refuses every
    start, naming the table and the fix; once it is loaded as recorded, the node starts as it would."""
    listing = "table inet dgx_spark_vllm_lab {\n}\n"

    class Firewalled(FakeNode):
        table = None

        def run(self, argv, data=None, timeout=60):
            if argv[1] == "list":
                self.calls.append(list(argv))
                return (0, self.table, "") if self.table is not None else (1, "", "Error: No such file or directory")
            return FakeNode.run(self, argv, data, timeout)

        def firewall(self, table, record):
            return firewall_state.judge(*self.run(firewall_state.list_argv(table))[:2], json.loads(self.files.get(record, "null")))

    node = Firewalled(files={"/proc/meminfo": read_fixture("meminfo", "gb10-idle.txt"), "/state/secrets/key": "sk-test\n",
                             "/state/config/firewall-loaded.json": firewall_state.record("dgx_spark_vllm_lab", listing)})
    config = head_config()
    config["steps"].insert(0, {"name": "the firewall's table", "kind": "firewall", "table": "dgx_spark_vllm_lab",
                               "record": "/state/config/firewall-loaded.json", "unit": "dgx-spark-vllm-firewall-lab.service"})
    state, detail, did = supervisor.look(config, node, {})
    assert (state, did) == ("refused", None)
    assert detail == ("not starting Ray or vLLM: the firewall table dgx_spark_vllm_lab is not loaded: Ray's and vLLM's ports may "
                      "answer anyone. Run serve.yml (it loads the table again), or systemctl restart dgx-spark-vllm-firewall-lab.service")
    node.table = listing + "# a rule added by hand\n"
    assert "differs from the one serve.yml loaded" in supervisor.look(config, node, {})[1]
    assert not any(c[1] in ("start", "restart") or process_group.LAUNCH_SCRIPT in c for c in node.calls)
    node.table = listing
    assert supervisor.look(config, node, {}) == ("starting", "container head runs", "started container head")


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="the module would use this machine's systemd")
def test_a_supervisor_an_earlier_release_started_is_stopped_and_its_status_removed(tmp_path):
    """Releases before the status folder kept status.json beside the plan. On a node without systemd, the supervisor
    they started still runs and writes it: the next install finds it there, restarts it (one supervisor, never two)
    and removes the old file."""
    spec = module_boot(tmp_path)
    where = spec["paths"]
    earlier = dict(spec, paths={k: v for k, v in where.items() if k != "legacy_status"})
    earlier["paths"]["status"] = where["legacy_status"]
    earlier["config"] = dict(spec["config"], status=where["legacy_status"])
    run_module("vllm_boot", {"boot": earlier})
    try:
        old_pid = json.loads(open(where["legacy_status"]).read())["pid"]
        now = run_module("vllm_boot", {"boot": spec})
        assert now["changed"] and now["running"] and not os.path.lexists(where["legacy_status"])
        assert not os.path.exists("/proc/%s" % old_pid) or "supervisor" not in open("/proc/%s/cmdline" % old_pid).read()
        new_pid = json.loads(open(where["status"]).read())["pid"]
        assert new_pid != old_pid and not run_module("vllm_boot", {"boot": spec})["changed"]
    finally:
        run_module("vllm_boot", {"boot": {"paths": where, "unit_name": "dgx.service"}, "state": "absent"})
    assert not os.path.exists(tmp_path / "state/boot")


def test_the_unit_is_sandboxed_and_writes_only_its_status_folder(tmp_path):
    """The unit's sandbox (boot.HARDENING) and its one writable folder; systemd itself parses the unit where it is
    installed (systemd-analyze verify; the simulated nodes run no systemd, so only this proves the text)."""
    made = plan(tmp_path)
    node = made["nodes"][made["head"]]["boot"]
    lines = node["unit"].splitlines()
    assert "ReadWritePaths=" + os.path.dirname(node["paths"]["status"]) in lines
    assert os.path.dirname(node["paths"]["status"]) != os.path.dirname(node["paths"]["config"])  # its plan and code stay read-only
    for line in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=read-only", "PrivateTmp=yes", "UMask=0077"):
        assert line in lines
    assert not [line for line in lines if line.startswith(("PrivateDevices", "DevicePolicy", "ProtectClock"))]  # nvidia-smi's devices
    analyze = shutil.which("systemd-analyze")
    if analyze:
        unit_file = tmp_path / "dgx-spark-vllm-serve-dgx-spark.service"
        unit_file.write_text(node["unit"])
        done = subprocess.run([analyze, "verify", "--man=no", str(unit_file)], capture_output=True, text=True, check=False)
        assert str(unit_file) not in done.stderr, done.stderr  # a line it cannot parse is named ("Failed to parse ...")


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="the module would use this machine's systemd")
def test_what_else_is_in_its_code_folder_is_removed_and_it_restarts_without_it(tmp_path):
    """The supervisor imports from its code folder as root. Releases before this one mounted that folder into the
    containers: a sitecustomize.py, a module named as the standard library's, a bytecode file or a link left there is
    removed by the next install, which restarts the supervisor; the copied sources stay, and a second install changes
    nothing (it writes no bytecode)."""
    spec = module_boot(tmp_path)
    where = spec["paths"]
    run_module("vllm_boot", {"boot": spec})
    try:
        package = os.path.join(where["lib"], "ansible_collections/dgx_spark/vllm/plugins/module_utils")
        planted = [os.path.join(where["lib"], "sitecustomize.py"), os.path.join(package, "node", "json.py"),
                   os.path.join(package, "node", "__pycache__", "supervisor.cpython-311.pyc")]
        os.makedirs(os.path.dirname(planted[2]))
        for path in planted:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("open('/tmp/planted-ran', 'w')\n")
        os.symlink("/etc", os.path.join(where["lib"], "etc"))
        old_pid = json.loads(open(where["status"]).read())["pid"]
        now = run_module("vllm_boot", {"boot": spec})
        assert now["changed"] and sorted(now["removed"]) == sorted(planted + [os.path.join(where["lib"], "etc")]), now
        assert not any(os.path.lexists(p) for p in planted) and os.path.isdir("/etc") and sorted(os.listdir("/etc"))
        assert json.loads(open(where["status"]).read())["pid"] != old_pid  # restarted: nothing planted stays imported
        assert sorted(os.path.join(d, f) for d, dummy, names in os.walk(where["lib"]) for f in names) == sorted(boot.lib_paths(where))
        assert not run_module("vllm_boot", {"boot": spec})["changed"]
    finally:
        run_module("vllm_boot", {"boot": {"paths": where, "unit_name": "dgx.service"}, "state": "absent"})
