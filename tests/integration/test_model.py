"""The model on every node, on the simulated cluster: fetched once on the head from the simulated hub through
huggingface_hub, copied head -> worker by rsync over the nodes' network, checked; a truncated shard is found and
only its missing tail is sent; a second run changes nothing; bad input is refused with the host and the fix, and
nothing half-fetched counts as complete."""

import glob
import os
import re
import shutil
import time

import docker
import pytest
import yaml

from runner import ROOT, node_docker, recap, run

pytestmark = pytest.mark.slow

SIM = "/var/lib/dgx-spark-sim"
HUB = os.path.join(SIM, "hub", "dgx-spark-sim")
REPO_DIR = "huggingface/hub/models--dgx-spark-sim--sim-tiny"
NODES = {"sim-head": "10.209.0.10", "sim-worker1": "10.209.0.11"}  # management addresses: the hub is on that network
HUB_CONTAINER = "dgx-spark-sim-hub"


def models(node):
    return os.path.join(SIM, "nodes", node, "var", "models")  # /var/lib/dgx-spark-vllm/models on the node


def empty(folder):
    """Remove what a models folder holds, keeping the folder itself (a running container keeps seeing it)."""
    for entry in glob.glob(os.path.join(folder, "*")) + glob.glob(os.path.join(folder, ".*")):
        if os.path.isdir(entry) and not os.path.islink(entry):
            shutil.rmtree(entry)
        else:
            os.remove(entry)


def model_yml(*extra, log="model", check=False):
    return run(log, ["ansible-playbook", "playbooks/model.yml"] + list(extra), check=check, timeout=1800)


def hub_requests(since):
    """The nodes' addresses that asked the hub for files since a moment (the hub logs one line per request)."""
    logs = docker.from_env().containers.get(HUB_CONTAINER).logs(since=since).decode()
    return sorted(set(line.split()[0] for line in logs.splitlines() if "/resolve/" in line or "/api/models" in line))


def profile_with(tmp_path, **model):
    with open(os.path.join(ROOT, "profiles", "sim_tiny.yml"), encoding="utf-8") as handle:
        profile = yaml.safe_load(handle)
    profile["model"].update(model)
    path = tmp_path / "profile.yml"
    path.write_text(yaml.safe_dump(profile))
    return str(path)


def shard_blob(node, name):
    return os.path.realpath(glob.glob(os.path.join(models(node), REPO_DIR, "snapshots", "*", name))[0])


@pytest.fixture(scope="module", autouse=True)
def fixture_simulated_cluster():
    run("model-sim-up", ["ansible-playbook", "playbooks/sim.yml"], timeout=1800)
    yield
    model_yml(log="model-final", check=True)  # leave every node complete for the tests after these


def test_only_the_head_fetches_and_the_worker_copies_from_it():
    for node in NODES:
        empty(models(node))
    since = int(time.time())
    rc, out = model_yml(log="model-fresh", check=True)
    asked = [address for address in hub_requests(since) if address in NODES.values()]
    assert asked == [NODES["sim-head"]], "only the head may ask the hub"
    assert "sim-worker1 <- sim-head" in out and "now complete" in " ".join(out.split())
    for node in NODES:
        manifest = glob.glob(os.path.join(models(node), REPO_DIR, "snapshots", "*", "model.safetensors.index.json"))
        assert manifest, node
    # The cache layout survives the copy: the worker's snapshot links into its own blobs.
    link = glob.glob(os.path.join(models("sim-worker1"), REPO_DIR, "snapshots", "*", "config.json"))[0]
    assert os.path.islink(link) and os.path.realpath(link).startswith(os.path.join(models("sim-worker1"), REPO_DIR, "blobs"))


def test_second_run_changes_nothing_and_asks_no_one():
    client = docker.from_env()
    marker = client.containers.get(HUB_CONTAINER).logs().count(b"\n")
    rc, out = model_yml(log="model-second", check=True)
    assert all(host["changed"] == 0 for host in recap(out).values()), recap(out)
    assert client.containers.get(HUB_CONTAINER).logs().count(b"\n") == marker


def test_truncated_shard_on_the_worker_is_found_and_only_its_tail_is_sent():
    blob = shard_blob("sim-worker1", "model-00002-of-00003.safetensors")
    full = os.path.getsize(shard_blob("sim-head", "model-00002-of-00003.safetensors"))
    os.truncate(blob, 100000)  # as an interrupted copy leaves it
    # Shards here are tiny: pull every file on its own, as a real model's multi-GB shards are.
    rc, out = model_yml("-e", "model_pull_each_min_bytes=0", log="model-truncated", check=True)
    assert re.search(r"model-00002-of-00003.safetensors is 100.0\s+KB, should be 363.1 KB", out)
    moved = int(re.search(r"sim-worker1 <- sim-head: (\d+) bytes", out).group(1))
    assert moved == full - 100000
    assert os.path.getsize(blob) == full


def test_small_files_short_or_gone_come_back_with_the_rest():
    tokenizer = shard_blob("sim-worker1", "tokenizer.json")
    size = os.path.getsize(tokenizer)
    os.truncate(tokenizer, 10)
    os.remove(shard_blob("sim-worker1", "config.json"))
    rc, out = model_yml(log="model-small", check=True)
    flat = " ".join(out.split())
    assert "missing config.json" in flat and "tokenizer.json is 10 B, should be 22.4 KB" in flat
    assert os.path.getsize(tokenizer) == size
    assert "now complete" in flat


@pytest.mark.parametrize("case", ["unknown_repo", "unknown_revision", "gated_without_token", "wrong_token",
                                  "no_disk", "broken_index"])
def test_bad_input_is_refused_and_nothing_half_fetched_counts(tmp_path, case):
    empty(models("sim-head"))  # the head must fetch
    extra, says = [], None
    if case == "unknown_repo":
        extra = ["-e", "vllm_profile=", "-e", "vllm_profile_file=" + profile_with(tmp_path, id="dgx-spark-sim/no-such-model")]
        says = "has no repository 'dgx-spark-sim/no-such-model'"
    elif case == "unknown_revision":
        extra = ["-e", "vllm_model_revision=v9"]
        says = "dgx-spark-sim/sim-tiny has no revision 'v9'"
    elif case == "gated_without_token":
        extra = ["-e", "vllm_profile=", "-e", "vllm_profile_file=" + profile_with(tmp_path, id="dgx-spark-sim/sim-tiny-gated")]
        says = "is gated or private at http://10.209.0.5:8090 (HTTP 401) and no token was given: set vllm_hf_token"
    elif case == "wrong_token":
        extra = ["-e", "vllm_profile=", "-e", "vllm_profile_file=" + profile_with(tmp_path, id="dgx-spark-sim/sim-tiny-gated"),
                 "-e", "vllm_hf_token=not-the-token-4711"]
        says = "refused the token given (vllm_hf_token)"
    elif case == "no_disk":
        extra = ["-e", "vllm_model_disk_reserve_gb=1000000"]
        says = "not enough disk on sim-head for dgx-spark-sim/sim-tiny: the fetch needs 880.9 KB more"
    elif case == "broken_index":
        broken = os.path.join(HUB, "sim-tiny-broken")
        shutil.rmtree(broken, ignore_errors=True)
        shutil.copytree(os.path.join(HUB, "sim-tiny"), broken)
        os.remove(os.path.join(broken, "model-00003-of-00003.safetensors"))
        extra = ["-e", "vllm_profile=", "-e", "vllm_profile_file=" + profile_with(tmp_path, id="dgx-spark-sim/sim-tiny-broken")]
        says = "model.safetensors.index.json names model-00003-of-00003.safetensors, which the repository does not have"
    rc, out = model_yml(*extra, log="model-bad-" + case)
    assert rc != 0
    flat = " ".join(out.split())
    assert "sim-head: " in flat and says in flat, out[-3000:]
    assert "not-the-token-4711" not in out and "sim-hub-token" not in out
    # Nothing was recorded as fetched, and the worker was not touched.
    assert not glob.glob(os.path.join(models("sim-head"), ".dgx-spark", "manifests", "*"))
    assert "Pull each file" not in out or "changed: [sim-worker1]" not in out
    if case == "broken_index":
        shutil.rmtree(os.path.join(HUB, "sim-tiny-broken"))


def test_a_worker_without_the_disk_for_the_copy_is_refused_before_it_starts():
    model_yml(log="model-complete-head", check=True)
    empty(models("sim-worker1"))
    rc, out = model_yml("-e", "vllm_model_disk_reserve_gb=1000000", log="model-bad-worker-disk")
    assert rc != 0
    flat = " ".join(out.split())
    assert "sim-worker1: not enough disk on sim-worker1 for dgx-spark-sim/sim-tiny: the copy needs 880.9 KB more" in flat
    assert "Pull each large file" not in out and "Start the head's rsync daemon" not in out
    assert not os.path.exists(os.path.join(models("sim-worker1"), REPO_DIR))


def test_the_right_token_fetches_a_gated_model_and_is_never_shown(tmp_path):
    profile = profile_with(tmp_path, id="dgx-spark-sim/sim-tiny-gated")
    rc, out = model_yml("-e", "vllm_profile=", "-e", "vllm_profile_file=" + profile, "-e", "vllm_hf_token=sim-hub-token", log="model-gated", check=True)
    assert "sim-hub-token" not in out
    assert glob.glob(os.path.join(models("sim-worker1"), "huggingface/hub/models--dgx-spark-sim--sim-tiny-gated/snapshots/*/config.json"))
    # The token file lived only for the fetch.
    assert not os.path.exists(os.path.join(SIM, "nodes", "sim-head", "var", "dgx-spark", "container", "fetch", "hf_token"))
    shutil.rmtree(os.path.join(models("sim-head"), "huggingface/hub/models--dgx-spark-sim--sim-tiny-gated"))
    shutil.rmtree(os.path.join(models("sim-worker1"), "huggingface/hub/models--dgx-spark-sim--sim-tiny-gated"))


def test_check_mode_reports_and_changes_nothing():
    empty(models("sim-worker1"))
    rc, out = model_yml("--check", "--diff", log="model-check", check=True)
    assert "not on this node" in out
    assert not os.path.exists(os.path.join(models("sim-worker1"), REPO_DIR))  # the final fixture run restores it


def test_a_running_container_that_sees_a_replaced_models_folder_is_named():
    client = node_docker("sim-head")  # the head's own daemon, where the node's models folder is /var/lib/dgx-spark-vllm/models
    watcher = client.containers.run(
        "dgx-spark-sim/runtime:sim", ["sleep", "infinity"], name="dgx-spark-model-watcher", detach=True, network_mode="host",
        volumes={"/var/lib/dgx-spark-vllm/models": {"bind": "/models", "mode": "ro"}},
        labels={"dgx_spark.vllm.cluster": "dgx-spark", "dgx_spark.vllm.node": "sim-head", "dgx_spark.vllm.managed": "true"})
    try:
        rc, out = model_yml(log="model-watcher-same", check=True)  # the same folder: nothing to say
        os.rename(models("sim-head"), models("sim-head") + ".old")
        shutil.copytree(models("sim-head") + ".old", models("sim-head"), symlinks=True)
        shutil.rmtree(models("sim-head") + ".old")
        rc, out = model_yml(log="model-watcher-replaced")
        assert rc != 0
        flat = " ".join(out.split())
        assert "sim-head: dgx-spark-model-watcher still see the models folder" in flat and "teardown.yml" in flat
    finally:
        watcher.remove(force=True)
