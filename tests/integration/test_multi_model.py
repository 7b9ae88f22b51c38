"""Two models on the same two simulated nodes behind one gateway (inventories/sim-models, docs/multi-model.md): each
deployment at TP=2 with its own Ray cluster, ports and key, LiteLLM's proxy on the head at the cluster's port. Both
answer through one URL and one key; a re-run changes nothing; a changed deployment restarts alone; the teardown of one
leaves the other serving; a plan that over-commits the shared nodes is refused before any change. In
`make test-extended` (a second cluster's launches do not fit make test's budget). Leaves the nodes removed."""

import json
import os
import re
import time
import urllib.error
import urllib.request

import pytest

from load import Load
from runner import NODE_ADDRESSES, ROOT, connect_all, listening, node_docker, recap, record, run

pytestmark = [pytest.mark.slow, pytest.mark.extended]

INVENTORY = os.path.join(ROOT, "inventories", "sim-models")
GATEWAY = "http://10.209.0.10:8000"
MODELS = {"chat": "sim-tiny", "coder": "sim-tiny-ring"}
FIRST = []


def playbook(name, *extra, log=None, check=True):
    return run(log or "models-" + name, ["ansible-playbook", "-i", INVENTORY, "playbooks/%s.yml" % name] + list(extra),
               check=check, timeout=1800)


def key(name="vllm_api_key"):
    with open(os.path.join(INVENTORY, ".secrets", name), encoding="utf-8") as handle:
        return handle.read().strip()


def call(path, body=None, token=None, base=GATEWAY):
    """(status, text) of one request; errors are answers too."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    request = urllib.request.Request(base + path, data=json.dumps(body).encode() if body else None, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def chat(model, stream=False):
    return call("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "Hello there"}],
                                         "max_tokens": 8, "temperature": 0, "stream": stream}, key())


def containers(node="sim-head"):
    """The collection's containers on a node: {name: id}."""
    return {c.name: c.id for c in node_docker(node).containers.list(filters={"label": "dgx_spark.vllm.managed=true"})}


@pytest.fixture(scope="module", name="served")
def fixture_served():
    run("models-sim-up", ["ansible-playbook", "-i", INVENTORY, "playbooks/sim.yml"], timeout=1800)
    started = time.monotonic()
    dummy, out = playbook("serve", log="models-serve-first")
    with open(os.path.join(INVENTORY, ".artifacts", "plan.json"), encoding="utf-8") as handle:
        FIRST.append((out, time.monotonic() - started, json.load(handle)))
    yield out
    playbook("teardown", log="models-teardown-all", check=False)
    run("models-sim-down", ["ansible-playbook", "-i", INVENTORY, "playbooks/sim.yml", "-e", "sim_state=absent"], check=False)


def test_both_models_answer_through_one_url_and_one_key_and_each_backend_keeps_its_own(served):
    status, listed = call("/v1/models", token=key())
    assert status == 200 and sorted(m["id"] for m in json.loads(listed)["data"]) == sorted(MODELS.values())
    answers = {}
    for model in MODELS.values():
        status, text = chat(model)
        assert status == 200, text
        answers[model] = json.loads(text)["choices"][0]["message"]["content"]
        status, text = chat(model, stream=True)
        chunks = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        assert status == 200 and chunks[-1] == "[DONE]" and any(json.loads(c)["choices"] for c in chunks[:-1]), text[-300:]
    assert answers["sim-tiny"] != answers["sim-tiny-ring"], answers  # two models, not one answering twice
    # Without the key (its door: 401), or with another (LiteLLM without a database: 400/500), the gateway answers no completion.
    assert call("/v1/chat/completions", {"model": "sim-tiny", "messages": [{"role": "user", "content": "Hi"}]})[0] >= 400
    assert call("/v1/models", token="sk-not-the-key")[0] >= 400
    # Behind the gateway, each deployment's own door is the cluster's alone, and LiteLLM listens on no port: an outsider
    # on either network (this machine) trying every port either node lists (ss) at every address of either node reaches
    # SSH and the gateway's front door only...
    ports = {node: listening(node) for node in NODE_ADDRESSES}
    assert 8001 in ports["sim-head"] and 8002 in ports["sim-head"], ports
    targets = ["%s:%d" % (a, p) for node, addresses in NODE_ADDRESSES.items() for a in addresses for p in ports[node]]
    answers = connect_all(targets)
    opened = sorted(t for t, answer in answers.items() if answer == "open")
    assert opened == sorted(["10.209.0.10:22", "10.210.0.10:22", "10.209.0.11:22", "10.210.0.11:22", "10.209.0.10:8000"]), answers
    # ...and from the head, as the gateway asks them, each takes its own key, which clients never hold, and refuses theirs.
    assert backends() == {"sim-tiny": ["http://10.210.0.10:8001/v1", 200, 401, 401],
                          "sim-tiny-ring": ["http://10.210.0.10:8002/v1", 200, 401, 401]}
    print("outsider, two deployments: %d port x address pairs tried, %d answered" % (len(targets), len(opened)))
    # Without the key, no route LiteLLM serves answers through the gateway's door but its health: every GET route its
    # own /openapi.json lists (asked with the key), and its public pages.
    status, text = call("/openapi.json", token=key())
    assert status == 200, text[:300]
    routes = sorted(p for p, methods in json.loads(text)["paths"].items() if "get" in methods and "{" not in p)
    assert "/v1/models" in routes and "/health/liveliness" in routes and len(routes) > 20, routes
    keyless = {path: call(path)[0] for path in set(routes + ["/", "/ui", "/docs", "/metrics"])}
    assert {path: code for path, code in keyless.items() if code != 401} == {"/health": 200}, keyless
    print("gateway: %d routes tried without the key, none answered but /health" % len(keyless))
    out, seconds, dummy = FIRST[0]
    record("multi-model", "serve.yml, two deployments and the gateway", "both answer through one URL", seconds)
    assert "The gateway on sim-head serves sim-tiny, sim-tiny-ring at http://10.209.0.10:8000/v1" in out


def test_no_key_is_in_the_gateways_container_logs_or_output(served):
    gateway = node_docker("sim-head").containers.get("dgx-spark-gateway")
    inspected = json.dumps(gateway.attrs)
    logs = gateway.logs().decode(errors="replace")
    mode = gateway.exec_run(["stat", "-c", "%a %U", "/etc/litellm/config.yaml"]).output.decode().strip()
    assert mode == "600 root"
    for name in ("vllm_api_key", "vllm_api_key-chat", "vllm_api_key-coder"):
        secret = key(name)
        assert secret not in inspected and secret not in logs and secret not in served, name
    assert "LITELLM_OFFLINE_MODE=true" in gateway.attrs["Config"]["Env"]
    # As the door: no capability, none to gain, and no write but its /tmp and its socket's folder (tried in every folder).
    host = gateway.attrs["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"] and host["SecurityOpt"] == ["no-new-privileges"] and host["ReadonlyRootfs"], host
    status = gateway.exec_run(["sh", "-c", "grep CapEff /proc/1/status"]).output.decode().split()
    assert status == ["CapEff:", "0000000000000000"], status
    tried = "for d in $(find / -xdev -mindepth 1 -maxdepth 1 -type d) /run/dgx-spark-gateway; do " \
            "if touch \"$d/.dgx-w\" 2>/dev/null; then rm -f \"$d/.dgx-w\"; echo \"$d\"; fi; done"
    written = gateway.exec_run(["sh", "-c", tried]).output.decode().split()
    assert sorted(written) == ["/dev", "/run/dgx-spark-gateway", "/tmp"], written


def test_memory_is_summed_on_each_shared_node_and_over_commit_is_refused_before_any_change(served):
    plan = FIRST[0][2]  # the first serve's: both deployments started
    assert sorted(plan["shared_nodes"]) == ["sim-head", "sim-worker1"]
    head = plan["shared_nodes"]["sim-head"]
    assert head["deployments"] == ["chat", "coder"] and sorted(head["starting"]) == ["chat", "coder"]
    assert head["left_bytes"] == head["mem_available_bytes"] - sum(head["starting"].values())
    before = containers()
    # Two more deployments on the same nodes: each fits alone in what the two serving leave, not both together.
    greedy = [{"name": "chat", "profile": "sim_tiny", "nodes": "spark_cluster"},
              {"name": "coder", "profile": "sim_tiny_ring", "nodes": "spark_cluster", "overrides": {"tensor_parallel_size": 2}},
              {"name": "extra1", "profile": "sim_tiny", "nodes": "spark_cluster", "served_name": "extra1"},
              {"name": "extra2", "profile": "sim_tiny", "nodes": "spark_cluster", "served_name": "extra2"}]
    rc, out = playbook("serve", "-e", json.dumps({"vllm_deployments": greedy}), log="models-serve-overcommit", check=False)
    assert rc != 0 and "nothing was changed" in out
    refusal = [line for line in out.splitlines() if "sim-head: deployments extra1 (" in line]
    assert refusal and "below the" in refusal[0] and "deployment extra2" in refusal[0], out[-3000:]
    assert containers() == before  # nothing was changed
    assert chat("sim-tiny")[0] == 200


def test_a_second_run_changes_nothing_and_loses_no_request(served):
    with Load(key(), streams=4, model="sim-tiny-ring") as load:
        time.sleep(2)
        dummy, out = playbook("serve", log="models-serve-idempotent")
        time.sleep(2)
    figures = load.figures()
    assert all(h["changed"] == 0 and h["failed"] == 0 for h in recap(out).values()), recap(out)
    assert out.count("Changes: none, every container and vLLM run as planned") == 2
    # Each deployment and the gateway in front of them answered one streamed token, asked at once; the gateway's full
    # verification (every model streamed through it) is for a run that changed something.
    shown = out.split("Show each summary", 1)[1].split("TASK [", 1)[0]
    # each deployment asked where its clients ask it: through the gateway, for its model
    assert all(name in shown for name in ("chat:", "coder:", "gateway:")) and shown.count("10.209.0.10:8000/v1") == 3, shown
    assert ":8001" not in shown and ":8002" not in shown, shown
    assert len(re.findall(r"first_token_seconds: \d", shown)) == 3, shown
    assert "refused_without_key: true" in shown and "Verify every model through the gateway" not in out
    assert figures["failed"] == 0 and figures["requests"] >= 8, json.dumps(figures)  # whole, with the first errors (a dict would be cut short)
    record("load", "a no-change re-run of serve.yml with two deployments", "changes nothing, restarts nothing", load=figures)


def test_status_shows_each_deployment_and_the_gateway(served):
    dummy, out = playbook("status")
    assert "Deployment chat (head sim-head):" in out and "Deployment coder (head sim-head):" in out
    assert "Endpoint: serving sim-tiny (" in out and "Endpoint: serving sim-tiny-ring (" in out
    assert "Gateway http://10.209.0.10:8000/v1: routes sim-tiny, sim-tiny-ring" in out


def test_model_fabric_and_bench_act_on_each_deployment_on_its_own_nodes(served):
    """The playbooks that once refused vllm_deployments: model.yml and fabric.yml find each deployment complete and
    change nothing; bench.yml measures each one from its head into its own folder, or only the one named."""
    import glob  # pylint: disable=import-outside-toplevel

    before = containers()
    for name in ("model", "fabric"):
        dummy, out = playbook(name, log="models-" + name)
        assert all(h["changed"] == 0 and h["failed"] == 0 for h in recap(out).values()), (name, recap(out))
    sweep = {"vllm_bench_concurrency": [1], "vllm_bench_input_lens": [32], "vllm_bench_output_lens": [8],
             "vllm_bench_prompts_per_stream": 2, "vllm_bench_min_prompts": 2}

    def runs():
        return {name: len(glob.glob(os.path.join(INVENTORY, ".artifacts", name, "bench", "*", "bench.csv"))) for name in MODELS}

    first = runs()
    playbook("bench", "-e", json.dumps(sweep), log="models-bench")
    time.sleep(1)  # each run's folder is named by its second
    assert runs() == {name: count + 1 for name, count in first.items()}
    playbook("bench", "-e", json.dumps(sweep), "-e", "vllm_deployment=coder", log="models-bench-coder")
    assert runs() == {"chat": first["chat"] + 1, "coder": first["coder"] + 2}
    assert containers() == before


def test_a_changed_deployment_restarts_alone_while_the_other_answers(served):
    before = containers()
    changed = [{"name": "chat", "profile": "sim_tiny", "nodes": "spark_cluster"},
               {"name": "coder", "profile": "sim_tiny_ring", "nodes": "spark_cluster",
                "overrides": {"tensor_parallel_size": 2, "max_model_len": 512}}]
    with Load(key(), streams=2, model="sim-tiny") as load:
        dummy, out = playbook("serve", "-e", json.dumps({"vllm_deployments": changed}), log="models-serve-changed")
    figures = load.figures()
    after = containers()
    assert after == before  # vLLM restarts inside coder's Ray containers; chat's and the gateway stay as they were
    assert out.count("Changes: none, every container and vLLM run as planned") == 1 and "Changes: sim-head: restart vLLM" in out
    with open(os.path.join(INVENTORY, ".artifacts", "plan.json"), encoding="utf-8") as handle:
        argv = json.load(handle)["deployments"]["coder"]["nodes"]["sim-head"]["serve"]["argv"]
    assert argv[argv.index("--max-model-len") + 1] == "512"
    assert backends()["sim-tiny-ring"][1] == 200
    assert figures["failed"] == 0 and figures["requests"] >= 4, json.dumps(figures)  # whole, with the first errors (a dict would be cut short)
    # Leave the cluster as the inventory has it: the scenarios after this one (recover, upgrade and its rollback, whose
    # next serve.yml must change nothing) start from the inventory's deployments, not from this run's -e.
    with Load(key(), streams=2, model="sim-tiny") as load:
        dummy, out = playbook("serve", log="models-serve-changed-back")
    figures = load.figures()
    assert containers() == before and out.count("Changes: none, every container and vLLM run as planned") == 1
    assert "Changes: sim-head: restart vLLM" in out and figures["failed"] == 0, json.dumps(figures)


# On the head, as the gateway asks its backends: each model's door with the key the gateway holds for it, with the
# clients' key, and with none. Reads the gateway's configuration there (root's, 0600): no key in an argv.
BACKENDS = """
import json, urllib.error, urllib.request
config = json.load(open("/var/lib/dgx-spark-vllm/dgx-spark/gateway/config.yaml"))
def status(url, key):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {}), timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
print(json.dumps({m["model_name"]: [m["litellm_params"]["api_base"]] + [status(m["litellm_params"]["api_base"] + "/models", k) for k in (
    m["litellm_params"]["api_key"], config["general_settings"]["master_key"], None)] for m in config["model_list"]}))
"""


def backends():
    """{model: [its door's URL as the gateway has it, status with its own key, with the clients' key, with none]}."""
    return json.loads(node_exec("sim-head", ["python3", "-c", BACKENDS]))


def node_exec(node, argv):
    """A command on the simulated node itself (not in one of its containers)."""
    import docker  # pylint: disable=import-outside-toplevel

    return docker.from_env().containers.get(node).exec_run(argv).output.decode()


def prometheus_targets():
    """Prometheus's active targets, asked on the head (it listens on the head's loopback): (job, deployment, scrape URL,
    health). Each deployment is its own scrape pool (its own key), labelled job="vllm"."""
    script = ("import json, urllib.request; print(json.dumps([(t['labels']['job'], t['labels'].get('deployment'), t['scrapeUrl'], "
              "t['health']) for t in "
              "json.load(urllib.request.urlopen('http://127.0.0.1:9090/api/v1/targets?state=active'))['data']['activeTargets']]))")
    return sorted(tuple(t) for t in json.loads(node_exec("sim-head", ["python3", "-c", script])))


def test_one_prometheus_watches_both_deployments_and_each_node_once(served):
    targets = prometheus_targets()
    assert targets == [("spark-nodes", None, "http://10.210.0.10:9101/metrics", "up"), ("spark-nodes", None, "http://10.210.0.11:9101/metrics", "up"),
                       ("vllm", "chat", "http://10.210.0.10:8001/metrics", "up"), ("vllm", "coder", "http://10.210.0.10:8002/metrics", "up")], targets
    assert [n for n in containers() if n.endswith("prometheus")] == ["dgx-spark-prometheus"]


def vllm_pgid(deployment):
    """The process group of a deployment's vLLM on the head (its state file in the Ray container)."""
    container = node_docker("sim-head").containers.get("dgx-spark-%s-ray-sim-head" % deployment)
    return json.loads(container.exec_run(["cat", "/dgx-spark/run/vllm.json"]).output.decode())["pgid"]


def test_recover_restores_the_deployment_that_lost_its_vllm_and_leaves_the_other_alone(served):
    before, chat_pgid = containers(), vllm_pgid("chat")
    holds = ["/var/lib/dgx-spark-vllm/dgx-spark-%s/boot/hold" % d for d in ("chat", "coder")]
    node_exec("sim-head", ["touch"] + holds)  # the supervisors keep their hands off: recover.yml, not one of them, acts
    try:
        node_docker("sim-head").containers.get("dgx-spark-coder-ray-sim-head").exec_run(["kill", "-KILL", "--", "-%d" % vllm_pgid("coder")])
        with Load(key(), streams=2, model="sim-tiny") as load:
            dummy, out = playbook("recover", log="models-recover")
        figures = load.figures()
    finally:
        node_exec("sim-head", ["rm", "-f"] + holds)
    flat = " ".join(out.split())
    assert "deployment chat: Nothing to recover" in flat and "deployment coder: restart_ranks (sim-head): vLLM is not running" in flat
    assert vllm_pgid("chat") == chat_pgid and containers() == before  # chat's vLLM and every container untouched
    assert chat("sim-tiny-ring")[0] == 200 and figures["failed"] == 0 and figures["requests"] >= 4, json.dumps(figures)
    record("fault", "one deployment's vLLM killed, two deployments on the same nodes",
           "recover.yml restarts that deployment's ranks alone; the other answers throughout", load=figures)


def test_a_failed_upgrade_of_one_deployment_rolls_back_alone_while_the_other_answers(served):
    from test_faults import BROKEN  # pylint: disable=import-outside-toplevel
    import io  # pylint: disable=import-outside-toplevel

    rc, out = playbook("upgrade", "-e", "vllm_image=dgx-spark-sim/runtime:broken", log="models-upgrade-which", check=False)
    assert rc != 0 and "this playbook acts on one deployment at a time, and the inventory lists chat, coder" in " ".join(out.split())
    broken, dummy = node_docker("sim-head").images.build(fileobj=io.BytesIO(BROKEN), tag="dgx-spark-sim/runtime:broken", rm=True)
    try:
        before, chat_pgid = containers(), vllm_pgid("chat")
        with Load(key(), streams=2, model="sim-tiny") as load:
            rc, out = playbook("upgrade", "-e", "vllm_deployment=coder", "-e", "vllm_image=dgx-spark-sim/runtime:broken",
                               log="models-upgrade-broken", check=False)
        figures = load.figures()
        flat = " ".join(out.split())
        # Back to the image coder served before, by the name its last-known-good record holds: the inventory's tag, or
        # the kept tag once a recover.yml (an earlier scenario) served it again from that record; the same image ID.
        back = re.search(r"vllm: this image is broken on purpose\. Rolled back to (\S+) \(([0-9a-f]{12}), sim_tiny_ring\)", flat)
        assert rc != 0 and back, flat[-3000:]
        served_id = node_docker("sim-head").images.get("dgx-spark-sim/runtime:sim").id.split(":")[-1][:12]
        assert back.group(1) in ("dgx-spark-sim/runtime:sim", "dgx-spark-vllm-kept:dgx-spark-coder-" + served_id), back.group(0)
        assert back.group(2) == served_id, back.group(0)
        assert re.search(r"canary passed: 5 prompts agree with the reference recorded \S+ token for token", flat)  # coder's rollback verified
        assert vllm_pgid("chat") == chat_pgid  # chat was never stopped
        assert {n: i for n, i in containers().items() if "-chat-" in n} == {n: i for n, i in before.items() if "-chat-" in n}
        assert figures["failed"] == 0 and figures["requests"] >= 4, json.dumps(figures)  # whole, with the first errors (a dict would be cut short)
        assert chat("sim-tiny-ring")[0] == 200
        dummy, out = playbook("serve", log="models-serve-after-rollback")
        assert out.count("Changes: none, every container and vLLM run as planned") == 2
        record("upgrade", "a failed upgrade of one deployment of two (an image whose vLLM fails at start)",
               "that deployment rolls back to its last-known-good alone; the other answers throughout", load=figures)
    finally:
        for node in ("sim-head", "sim-worker1"):
            try:
                node_docker(node).images.remove("dgx-spark-sim/runtime:broken")
            except Exception:  # pylint: disable=broad-except
                pass
        del broken


def test_the_teardown_of_one_leaves_the_other_serving_throughout(served):
    with Load(key(), streams=2, model="sim-tiny") as load:
        time.sleep(2)
        dummy, out = playbook("teardown", "-e", "vllm_deployment=coder")
        time.sleep(2)
    figures = load.figures()
    assert figures["failed"] == 0 and figures["requests"] >= 4, json.dumps(figures)  # whole, with the first errors (a dict would be cut short)
    left = containers()
    assert not [n for n in left if "-coder-" in n] and "dgx-spark-chat-ray-sim-head" in left and "dgx-spark-gateway" in left
    assert out.count("memory back to its baseline") == 2  # the node that still serves chat is not named for a reboot
    assert chat("sim-tiny")[0] == 200 and chat("sim-tiny-ring")[0] >= 400
    record("load", "teardown.yml of one deployment of two", "the other answers throughout", load=figures)
    rc, out = playbook("teardown", "-e", "vllm_deployment=nope", check=False)
    assert rc != 0 and "vllm_deployment=nope: the inventory's deployments are chat, coder; name one of them" in out
