"""The playbooks run as an AWX job runs them, on the simulated cluster: ansible_runner.run() in a private data
directory of its own per job, holding a copy of the project, an inventory script printing what AWX imports from the
project's inventory source, AWX's collection paths in the environment (so dgx_spark.vllm must resolve from the
project itself), the survey's answers and the credential's API key as extra variables. Asserts what a job view shows."""

import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import urllib.request

import ansible_runner
import docker
import pytest
import yaml

from runner import ROOT, VENV_BIN, environment, node_docker, run

pytestmark = pytest.mark.slow

API_KEY = "awx-" + secrets.token_hex(16)
SURVEY = {"vllm_max_model_len": 2048}  # profile and backend unanswered: the inventory's (sim_tiny, ray) stand
SWEEP = {"vllm_bench_concurrency": [1], "vllm_bench_min_prompts": 2, "vllm_bench_max_prompts": 2}
CONFIG = "/var/lib/dgx-spark-vllm/dgx-spark/config/"  # inventories/sim's state folder
RECORDS = {name: CONFIG + name + ".json" for name in ("last-known-good", "canary-reference", "bench-last")}


def launch(playbook, answers=None, extra=None):
    """The extra variables AWX gives a job launched from the playbook's template (awx/job_templates.yml): each survey
    answer, refused outside its choices; an unanswered question nothing (or its default, as AWX sends it); then what
    the operator typed as extra variables, which the template must ask for at launch."""
    with open(os.path.join(ROOT, "awx", "job_templates.yml"), encoding="utf-8") as handle:
        template = next(t for t in yaml.safe_load(handle)["dgx_spark_awx_job_templates"] if t["playbook"] == playbook)
    questions = template["survey_spec"]["spec"] if template["survey_enabled"] else []
    answers, variables = dict(answers or {}), {}
    assert not set(answers) - {q["variable"] for q in questions}, "no such question in %s's survey" % playbook
    for question in questions:
        if question["variable"] in answers:
            assert not question.get("choices") or answers[question["variable"]] in question["choices"], question
            variables[question["variable"]] = answers[question["variable"]]
        elif "default" in question:
            variables[question["variable"]] = question["default"]
        else:
            assert not question.get("required"), question
    if extra:
        assert template.get("ask_variables_on_launch"), "%s does not ask for extra variables" % template["name"]
        variables.update(extra)
    return dict(variables, vllm_api_key=API_KEY)  # the endpoint credential injects the key into every job


def awx_environment(private_data_dir):
    """What AWX puts in a job's environment: its own collection and role paths before the defaults."""
    collections = ":".join([os.path.join(private_data_dir, "requirements_collections"), "~/.ansible/collections",
                            "/usr/share/ansible/collections"])
    roles = ":".join([os.path.join(private_data_dir, "requirements_roles"), "~/.ansible/roles", "/usr/share/ansible/roles"])
    return {"PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", ""), "ANSIBLE_COLLECTIONS_PATH": collections,
            "ANSIBLE_COLLECTIONS_PATHS": collections, "ANSIBLE_ROLES_PATH": roles, "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_CONFIG": ""}


def awx_job_dir(base, name):
    """A job's private data directory, as AWX makes one for every job: the project, the inventory script, the key."""
    private = base / name
    shutil.copytree(ROOT, private / "project", symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".cache", ".pytest_cache", "__pycache__", "tests", "build", ".secrets", ".artifacts"))
    # AWX imported the project's inventory source into its database and hands the job a script printing it.
    exported = subprocess.run(["ansible-inventory", "-i", "inventories/sim", "--list", "--export"], cwd=ROOT,
                              env=environment(), capture_output=True, text=True, check=True).stdout
    script = private / "inventory" / "hosts"
    script.parent.mkdir()
    script.write_text("#!/usr/bin/env python3\nprint(%r)\n" % exported)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    # The machine credential: AWX gives a job the key in env/ssh_key and ansible-runner loads it into an ssh-agent.
    (private / "env").mkdir()
    shutil.copy(os.path.join(ROOT, "inventories", "sim", ".secrets", "sim_ssh_ed25519"), private / "env" / "ssh_key")
    (private / "env" / "ssh_key").chmod(0o600)
    return private, script


def awx_job(base, name, playbook, extravars):
    """One job: a fresh private data directory, as AWX makes for every job."""
    private, script = awx_job_dir(base, name)
    env = awx_environment(str(private))
    del env["ANSIBLE_CONFIG"]  # AWX runs in the project folder: the project's ansible.cfg applies, its collections_path not
    result = ansible_runner.run(private_data_dir=str(private), playbook=playbook, inventory=str(script),
                                extravars=extravars, envvars=env, quiet=True, timeout=1800)
    events = list(result.events)
    log = os.path.join(ROOT, "tests", "output", "logs", "awx-%s.log" % name)
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "w", encoding="utf-8") as handle:
        handle.write(result.stdout.read())
    return result, events, log


def failures(events):
    return [e for e in events if e["event"] in ("runner_on_failed", "runner_on_unreachable")
            and not e["event_data"].get("ignore_errors")]


def task_result(events, task):
    found = [e["event_data"]["res"] for e in events if e["event"] == "runner_on_ok" and e["event_data"].get("task") == task]
    assert found, "no job event for the task %r" % task
    return found[0]


def job_output(events):
    """What the job's output view shows, as one line: each event's text, its colours taken out, spaces collapsed."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", " ".join(e.get("stdout", "") for e in events)).split())


def assert_successful(result, events, log):
    assert (result.status, result.rc) == ("successful", 0), "job %s (rc %s), see %s" % (result.status, result.rc, log)
    assert not failures(events), [e["event_data"].get("res", {}).get("msg") for e in failures(events)]


def chat():
    body = json.dumps({"model": "sim-tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}).encode()
    request = urllib.request.Request("http://10.209.0.10:8000/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, json.loads(response.read())


@pytest.fixture(scope="module", name="base")
def fixture_simulated_cluster(tmp_path_factory):
    run("awx-sim-up", ["ansible-playbook", "playbooks/sim.yml"], timeout=1800)
    yield tmp_path_factory.mktemp("awx-jobs")


def test_plan_serve_status_upgrade_recover_teardown_as_awx_jobs(base):
    result, events, log = awx_job(base, "plan", "playbooks/plan.yml", launch("playbooks/plan.yml", SURVEY))
    assert_successful(result, events, log)
    plan_text = task_result(events, "Show the plan")["msg"]
    assert "sim-head" in plan_text and "sim-worker1" in plan_text and "--max-model-len 2048" in plan_text

    result, events, log = awx_job(base, "serve", "playbooks/serve.yml", launch("playbooks/serve.yml", SURVEY))
    assert_successful(result, events, log)
    summary = task_result(events, "Show the summary")["msg"]
    assert summary["endpoint"] == "http://10.209.0.10:8000/v1" and summary["model"] == "sim-tiny"
    assert summary["profile"] == "sim_tiny" and summary["backend"] == "ray"
    assert all(passed for name, passed in summary["smoke_tests"])
    # The key the credential injected is the endpoint's key.
    status, answer = chat()
    assert status == 200 and answer["choices"][0]["message"]["content"]

    # Bench twice, each job in a fresh copy (no bench folder on the controller): the second compares with the first,
    # which only the cluster's record of it names. One short point each is enough to compare.
    # Launched bare, bench plans the inventory's context length, not the one that serves: refused, naming what serves.
    result, events, log = awx_job(base, "bench-bare", "playbooks/bench.yml", launch("playbooks/bench.yml", extra=SWEEP))
    refused = job_output(events)
    assert result.status == "failed" and "bench.yml measures what serves" in refused, log
    assert "This plan is not the last-known-good deployment (verified " in refused, log
    assert "give bench.yml what it was served with (-e, or the AWX job's extra variables): vllm_profile=sim_tiny " \
        "vllm_backend=ray vllm_max_model_len=2048." in refused, log
    taken = []
    for name in ("bench", "bench-again"):
        result, events, log = awx_job(base, name, "playbooks/bench.yml", launch("playbooks/bench.yml", extra=dict(SWEEP, **SURVEY)))
        assert_successful(result, events, log)
        summary = " ".join(" ".join(task_result(events, "Show the summary")["msg"]).split())
        taken.append(re.search(r"taken (\d{8}T\d{6}Z)", summary).group(1))
    assert "Compared with the previous run of this profile (%s)" % taken[0] in summary, summary

    # Day two, each job in a fresh copy of the project (no .artifacts from the serve job): what to fall back to and
    # what to restore come from the cluster (the head's last-known-good record), not from a controller that kept files.
    # The upgrade's survey asks for the image; the context length the serve job chose is typed as an extra variable.
    result, events, log = awx_job(base, "upgrade", "playbooks/upgrade.yml",
                                  launch("playbooks/upgrade.yml", {"vllm_image": "dgx-spark-sim/runtime:sim"}, SURVEY))
    assert_successful(result, events, log)
    assert task_result(events, "Show the change")["msg"] == "Nothing to upgrade: the plan is the last-known-good deployment"
    # The head's state folder loses its records (a reinstall, a new disk): the next node's copies are the way back.
    nodes = docker.from_env().containers
    copies = {name: nodes.get("sim-worker1").exec_run(["cat", path]) for name, path in RECORDS.items()}
    assert all(c.exit_code == 0 for c in copies.values()), copies
    assert json.loads(copies["last-known-good"].output)["overrides"]["max_model_len"] in (2048, "2048")
    assert nodes.get("sim-head").exec_run(["rm"] + list(RECORDS.values())).exit_code == 0
    result, events, log = awx_job(base, "recover", "playbooks/recover.yml", launch("playbooks/recover.yml"))  # no survey
    assert_successful(result, events, log)
    restored = task_result(events, "Restore each deployment's last-known-good deployment (its record) instead of the "
                           "inventory's choices")["results"][-1]["ansible_facts"]["preflight_restore"]  # the survey's 2048
    assert [int(r["overrides"]["max_model_len"]) for r in restored.values()] == [2048], restored
    assert task_result(events, "Show the decision")["msg"] == ["Nothing to recover: every node, Ray and the endpoint serve"]
    # A job of its own, without the plan serve wrote: status finds the model and the key on its own, and lists bench's
    # last run from the copy.
    result, events, log = awx_job(base, "status", "playbooks/status.yml", launch("playbooks/status.yml"))
    assert_successful(result, events, log)
    lines = task_result(events, "Show what runs where")["msg"]
    assert any("sim-tiny" in line for line in lines), lines
    assert any(line.startswith("Bench, last run of sim_tiny: %s, 1 point(s)" % taken[1]) for line in lines), lines
    # The logs job, as the operator's next look: each rank's last lines, read on its node, with the answer's request.
    result, events, log = awx_job(base, "logs", "playbooks/logs.yml", launch("playbooks/logs.yml", extra={"logs_lines": 200}))
    assert_successful(result, events, log)
    shown = job_output(events)
    assert "sim-head: docker logs dgx-spark-ray-sim-head" in shown and "sim-worker1: docker logs dgx-spark-ray-sim-worker1" in shown, log
    assert "POST /v1/chat/completions HTTP/1.1" in shown, log
    # The next serve job writes the head's record and the canary's references again from the copies (the commit step:
    # the head has none); bench's record comes back with the next bench.
    result, events, log = awx_job(base, "serve-again", "playbooks/serve.yml", launch("playbooks/serve.yml", SURVEY))
    assert_successful(result, events, log)
    for name in ("last-known-good", "canary-reference"):
        again = json.loads(nodes.get("sim-head").exec_run(["cat", RECORDS[name]]).output)
        assert dict(again, verified_at=None) == dict(json.loads(copies[name].output), verified_at=None), (name, again)

    result, events, log = awx_job(base, "teardown", "playbooks/teardown.yml", launch("playbooks/teardown.yml"))
    assert_successful(result, events, log)
    left = [c.name for node in ("sim-head", "sim-worker1")
            for c in node_docker(node).containers.list(all=True, filters={"label": "dgx_spark.vllm.managed=true"})]
    assert not left, left
    for node in ("sim-head", "sim-worker1"):  # the firewall's table and the units (firewall, supervisor) went too
        sim_node = docker.from_env().containers.get(node)
        tables = sim_node.exec_run(["nft", "list", "tables"]).output.decode()
        units = [u for u in sim_node.exec_run(["find", "/etc/systemd/system", "-name", "dgx-spark-vllm-*"]).output.decode().split()
                 if "/dgx-spark-vllm-.service.d" not in u]  # the node image's own drop-in (the simulation's /proc/meminfo), not ours
        assert "dgx_spark_vllm" not in tables and not units, (node, tables, units)


def playbook_failure(extra):
    """The message an ansible-playbook user gets for the same bad answer (the JSON callback's failed task)."""
    env = environment({"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"})
    proc = subprocess.run(["ansible-playbook", "playbooks/plan.yml", "-e", json.dumps(extra)], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    report = json.loads(proc.stdout)
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                if res.get("failed"):
                    return host, res["msg"]
    raise AssertionError("no failed task in:\n" + proc.stdout[-3000:])


@pytest.mark.parametrize("answer, says", [
    ({"vllm_backend": "tcp"}, "value of vllm_backend must be one of: ray, mp, got: tcp"),
    ({"vllm_max_model_len": "long"}, "vllm_max_model_len"),
    ({"vllm_gpu_memory_utilization": 1.5}, "1.5"),
    ({"vllm_profile": "no_such_profile"}, "no_such_profile"),
], ids=["backend", "max_model_len", "utilization", "profile"])
def test_an_answer_outside_the_survey_is_refused_as_ansible_playbook_refuses_it(base, answer, says):
    result, events, log = awx_job(base, "bad-" + next(iter(answer)), "playbooks/plan.yml", dict(SURVEY, **answer))
    assert result.status == "failed"
    failed = failures(events)
    assert len(failed) == 1, log
    host, message = failed[0]["event_data"]["host"], failed[0]["event_data"]["res"]["msg"]
    assert says in message
    assert (host, message) == playbook_failure(dict(SURVEY, **answer))
    # Refused on the controller before any node was touched.
    assert host == "localhost"
    assert not [e for e in events if e["event"] == "runner_on_ok" and e["event_data"].get("host") != "localhost"]


BROKEN = b"""FROM dgx-spark-sim/runtime:sim
RUN printf '#!/bin/sh\\necho "vllm: this image is broken on purpose" >&2\\nexit 1\\n' > /opt/vllm/bin/vllm
"""


@pytest.mark.extended  # about 8 minutes: a serve job, an image built and streamed, a failed launch and its rollback
def test_a_broken_upgrade_job_rolls_back_and_its_canary_compares_with_the_first_jobs_answers(base):
    """upgrade.yml as an AWX job, in a fresh project copy, to an image whose vLLM fails at start: the job fails naming
    the failure, the rollback plans the last-known-good deployment from the head's record (the survey's context length
    with it) and its canary compares with the reference the serve job recorded on the head, not a new one."""
    import io  # pylint: disable=import-outside-toplevel

    result, events, log = awx_job(base, "serve-before-upgrade", "playbooks/serve.yml", launch("playbooks/serve.yml", SURVEY))
    assert_successful(result, events, log)
    head = docker.from_env().containers.get("sim-head")
    reference = json.loads(head.exec_run(["cat", RECORDS["canary-reference"]]).output)
    recorded_at = next(iter(reference["models"].values()))["recorded_at"]
    node_docker("sim-head").images.build(fileobj=io.BytesIO(BROKEN), tag="dgx-spark-sim/runtime:broken", rm=True)
    try:
        result, events, log = awx_job(base, "upgrade-broken", "playbooks/upgrade.yml",
                                      launch("playbooks/upgrade.yml", {"vllm_image": "dgx-spark-sim/runtime:broken"}, SURVEY))
        shown = job_output(events)
        assert (result.status, result.rc) == ("failed", 2), "job %s (rc %s), see %s" % (result.status, result.rc, log)
        assert "vllm: this image is broken on purpose. Rolled back to dgx-spark-sim/runtime:sim" in shown, log
        assert ("canary passed: 5 prompts agree with the reference recorded %s token for token" % recorded_at) in shown, log
        status, answer = chat()
        assert status == 200 and answer["choices"][0]["message"]["content"]
        request = urllib.request.Request("http://10.209.0.10:8000/v1/models", headers={"Authorization": "Bearer " + API_KEY})
        with urllib.request.urlopen(request, timeout=60) as response:  # the rollback planned the record's context length
            assert json.loads(response.read())["data"][0]["max_model_len"] == 2048
        after = json.loads(head.exec_run(["cat", RECORDS["canary-reference"]]).output)
        assert after == reference  # the reference stands: a rollback records no new one
    finally:
        for node in ("sim-head", "sim-worker1"):
            try:
                node_docker(node).images.remove("dgx-spark-sim/runtime:broken")
            except docker.errors.ImageNotFound:
                pass
        result, events, log = awx_job(base, "teardown-after-upgrade", "playbooks/teardown.yml", launch("playbooks/teardown.yml"))
        assert_successful(result, events, log)
