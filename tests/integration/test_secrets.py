"""No secret leaks, at -vvv: serve.yml (which fetches a gated model on the head with the token and copies it to the
worker with the rsync secret), model.yml and teardown.yml run at -vvv with a known API key, Hugging Face token and
rsync secret, and Ray's token made by the run. Every byte they print, every file under the inventory's .artifacts, `docker
inspect` of every container and `ps` on every node are searched: none of the four appears. Each secret is really used in
the same run (Ray's nodes join only with the token)."""

import base64
import glob
import json
import os
import urllib.request

import docker
import pytest
import yaml

from runner import PULLED, ROOT, node_docker, push_to_registry, registry_login, run, untag_pulled

pytestmark = pytest.mark.slow

SIM = os.path.join(ROOT, "inventories", "sim")
NODES = ("sim-head", "sim-worker1")
MODELS = "/var/lib/dgx-spark-sim/nodes/%s/var/models"
GATED = "huggingface/hub/models--dgx-spark-sim--sim-tiny-gated"
SECRETS = {"vllm_api_key": "sk-known-endpoint-key-5f1e9c", "vllm_hf_token": "sim-hub-token",
           "model_rsync_secret": "known-rsync-secret-8d2a41"}


def playbook(name, extra_vars, log):
    return run(log, ["ansible-playbook", "-vvv", "playbooks/%s.yml" % name, "-e", "@" + extra_vars], timeout=1800)


def node_ps(node):
    import docker  # pylint: disable=import-outside-toplevel

    result = docker.from_env().containers.get(node).exec_run(["ps", "-e", "-ww", "-o", "args"])
    assert result.exit_code == 0
    return result.output.decode()


def leaks(text, where):
    return ["%s in %s" % (name, where) for name, value in SECRETS.items() if value in text]


@pytest.fixture(name="extra_vars")
def fixture_extra_vars(tmp_path):
    with open(os.path.join(ROOT, "profiles", "sim_tiny.yml"), encoding="utf-8") as handle:
        profile = yaml.safe_load(handle)
    profile["model"]["id"] = "dgx-spark-sim/sim-tiny-gated"  # the simulated hub answers 401 without the token
    (tmp_path / "gated.yml").write_text(yaml.safe_dump(profile))
    run("secrets-sim-up", ["ansible-playbook", "playbooks/sim.yml"], timeout=1800)
    # Each node pulls the image from the simulation's registry with its login (image_source: pull), which is one more secret.
    SECRETS["image_registry_password"] = registry_login()["password"]
    SECRETS["image_registry_login"] = base64.b64encode(("sim-puller:" + SECRETS["image_registry_password"]).encode()).decode()
    path = tmp_path / "secrets.yml"
    path.write_text(yaml.safe_dump(dict(SECRETS, vllm_profile="", vllm_profile_file=str(tmp_path / "gated.yml"), image_source="pull",
                                        vllm_image=PULLED, image_registry_username="sim-puller")))
    path.chmod(0o600)
    push_to_registry()
    run("secrets-teardown-before", ["ansible-playbook", "playbooks/teardown.yml"], timeout=900)
    untag_pulled(*NODES)  # both nodes must pull with the login
    for node in NODES:  # the head must fetch with the token and the worker must copy with the rsync secret
        for folder in glob.glob(os.path.join(MODELS % node, GATED)):
            run("secrets-empty-" + node, ["rm", "-rf", folder])
    yield str(path)
    run("secrets-teardown-after", ["ansible-playbook", "playbooks/teardown.yml"], timeout=900)


def test_no_secret_appears_in_output_artifacts_containers_or_processes(extra_vars):
    found = []
    rc, out = playbook("serve", extra_vars, log="secrets-serve-vvv")
    with open(os.path.join(SIM, ".secrets", "ray_auth_token"), encoding="utf-8") as handle:  # made once; Ray's nodes ask for it
        SECRETS["ray_auth_token"] = handle.read().strip()
    assert len(SECRETS["ray_auth_token"]) >= 32
    found += leaks(out, "serve.yml -vvv")
    # Every secret was used: the token fetched the gated model, the rsync secret copied it, the key opens the endpoint.
    for node in NODES:
        assert glob.glob(os.path.join(MODELS % node, GATED, "snapshots", "*", "config.json")), node
    assert "sim-worker1 <- sim-head" in out
    assert all(PULLED in [t for i in node_docker(n).images.list() for t in i.tags] for n in NODES)  # and the login pulled it
    request = urllib.request.Request("http://10.209.0.10:8000/v1/models", headers={"Authorization": "Bearer " + SECRETS["vllm_api_key"]})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200
    for node in NODES:
        found += leaks(node_ps(node), "ps on " + node)
        kept = docker.from_env().containers.get(node).exec_run(  # the pull gave the daemon the login in its request: no file has it
            ["sh", "-c", "cat ~nvidia/.docker/config.json /root/.docker/config.json 2>/dev/null"])
        found += leaks(kept.output.decode(), "the docker configurations on " + node)
        client = node_docker(node)
        for container in client.containers.list(all=True):
            found += leaks(json.dumps(client.api.inspect_container(container.id)), "docker inspect %s on %s" % (container.name, node))
    rc, out = playbook("model", extra_vars, log="secrets-model-vvv")
    found += leaks(out, "model.yml -vvv")
    rc, out = playbook("teardown", extra_vars, log="secrets-teardown-vvv")
    found += leaks(out, "teardown.yml -vvv")
    for path in glob.glob(os.path.join(SIM, ".artifacts", "**"), recursive=True):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as handle:
                found += leaks(handle.read(), os.path.relpath(path, ROOT))
    assert found == []
