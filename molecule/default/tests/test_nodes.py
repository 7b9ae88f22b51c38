"""Molecule's verifier for the default scenario: each simulated node checked as a host over SSH against the plan
serve.yml wrote, then the endpoint as a user calls it, then teardown. The order of the tests is the order here."""

import json
import os
import re
import subprocess
import urllib.error
import urllib.request


def inspect(host, name):
    return json.loads(host.check_output("docker inspect %s" % name))[0]


def test_containers_carry_the_plans_spec(node, plan):
    """The production spec, unchanged: host network and IPC, the RDMA devices, all GPUs, IPC_LOCK, our labels."""
    name, host = node
    for spec in plan["nodes"][name]["containers"]:
        found = inspect(host, spec["name"])
        config, hostconfig = found["Config"], found["HostConfig"]
        assert found["State"]["Running"]
        assert hostconfig["NetworkMode"] == spec["network_mode"] == "host"
        assert hostconfig["IpcMode"] == spec["ipc_mode"] == "host"
        assert ["%s:%s" % (d["PathOnHost"], d["PathInContainer"]) for d in hostconfig["Devices"]] == spec["devices"]
        assert [r["Count"] for r in hostconfig["DeviceRequests"]] == [-1]  # --gpus all
        assert sorted(hostconfig["CapAdd"]) == sorted(spec["capabilities"])
        assert hostconfig["RestartPolicy"]["Name"] == spec["restart_policy"]
        assert {k: config["Labels"].get(k) for k in spec["labels"]} == spec["labels"]
        assert sorted(b[:-len(":rw")] if b.endswith(":rw") else b for b in hostconfig["Binds"]) == sorted(spec["volumes"])
        env = dict(e.split("=", 1) for e in config["Env"])
        assert {k: env.get(k) for k in spec["env"]} == spec["env"]


def test_the_node_has_its_own_docker_daemon(node):
    name, host = node
    assert host.check_output("docker info --format '{{.Name}}'") == name
    assert "nvidia" in host.check_output("docker info --format '{{json .Runtimes}}'")
    assert host.process.filter(comm="dockerd")  # in the node's own process list, as on a Spark


def test_listening_sockets_are_where_the_plan_puts_them(node, plan):
    """The endpoint on the head only, at the address vLLM is given; Ray's GCS on the head."""
    name, host = node
    port = plan["cluster"]["endpoint"]["port"]
    argv = plan["nodes"][plan["head"]]["serve"]["argv"]
    bind = argv[argv.index("--host") + 1]
    listening = host.socket.get_listening_sockets()
    if name == plan["head"]:
        assert host.socket("tcp://%s:%d" % (bind, port)).is_listening
        assert any(s.startswith("tcp://") and s.endswith(":6379") for s in listening), listening  # Ray's GCS
    else:
        assert not any(s.endswith(":%d" % port) for s in listening), listening


def test_state_folders_and_secrets_have_their_modes(node, plan):
    name, host = node
    paths = plan["nodes"][name]["paths"]
    for folder in paths["folders"]:
        found = host.file(folder["path"])
        assert found.is_directory and found.user == "root" and found.mode == int(folder["mode"], 8), folder
    if name == plan["head"]:
        key = host.file(paths["api_key_file"])
        assert key.is_file and key.user == "root" and key.mode == 0o600
    launcher = host.file(paths["launcher"])
    assert launcher.is_file and launcher.mode == 0o755


def test_a_rank_runs_on_each_node_with_its_own_address_and_gid_index(node, plan):
    name, host = node
    spec = plan["nodes"][name]["containers"][0]
    pattern = "^ray::RayWorker" if plan["backend"] == "ray" else "vllm serve"
    dump = host.check_output("docker exec %s sh -c 'for p in $(pgrep -f \"%s\"); do tr \"\\0\" \"\\n\" < /proc/$p/environ; "
                             "echo ---; done'" % (spec["name"], pattern))
    envs = [dict(line.split("=", 1) for line in block.strip().splitlines() if "=" in line) for block in dump.split("---") if block.strip()]
    assert envs
    assert {e.get("VLLM_HOST_IP") for e in envs} == {plan["nodes"][name]["fabric_ip"]}
    assert {e.get("NCCL_IB_GID_INDEX") for e in envs} == {plan["nodes"][name]["env_node"]["NCCL_IB_GID_INDEX"]}
    assert {e.get("VLLM_CPU_KVCACHE_SPACE") for e in envs} == {"1"}
    assert not any("VLLM_API_KEY" in e for e in envs)  # with Ray, only the driver needs the key


def test_the_ray_cluster_has_every_node_with_one_gpu(head, plan):
    name, host = head
    status = host.check_output("docker exec %s ray status" % plan["nodes"][name]["containers"][0]["name"])
    count = len(plan["nodes_order"])
    assert re.search(r"[0-9.]+/%d\.0 GPU" % count, status), status
    assert status.count("node_") >= count


def test_the_kv_capacity_is_the_plans_within_5_percent(head, plan):
    name, host = head
    log = host.check_output("cat %s/container/logs/vllm.log" % plan["nodes"][name]["state_dir"])
    logged = int(re.search(r"KV cache size: ([0-9,]+) tokens", log).group(1).replace(",", ""))
    planned = int(plan["cluster"]["memory"]["nodes"][name]["kv_tokens"])
    assert abs(logged - planned) <= 0.05 * logged, (planned, logged)


def chat(plan, key=None, max_tokens=16):
    body = json.dumps({"model": plan["cluster"]["endpoint"]["served_model_name"], "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "Hello, how are you?"}]}).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    request = urllib.request.Request(plan["cluster"]["endpoint"]["url"] + "/v1/chat/completions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def test_the_endpoint_answers_with_the_key_and_refuses_without(plan, api_key, paths):
    status, answer = chat(plan, api_key)
    assert status == 200
    assert answer["model"] == plan["cluster"]["endpoint"]["served_model_name"]
    assert answer["choices"][0]["message"]["content"]
    assert answer["usage"]["completion_tokens"] == 16
    assert "tp2" in answer["system_fingerprint"]
    assert chat(plan)[0] == 401
    assert os.stat(plan["cluster"]["endpoint"]["api_key_file"]).st_mode & 0o777 == 0o600


def test_teardown_leaves_no_container_of_ours(hosts, paths):
    done = subprocess.run(["ansible-playbook", "-i", paths["inventory"], "playbooks/teardown.yml"], cwd=paths["project"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    for name, host in hosts.items():
        left = host.check_output("docker ps --all --quiet --filter label=dgx_spark.vllm.managed=true")
        assert left == "", (name, left)
