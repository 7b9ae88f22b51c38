"""Molecule's verifier for the default scenario: each simulated node checked as a host over SSH against the plan
serve.yml wrote, then the endpoint as a user calls it, then teardown. The order of the tests is the order here."""

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests"))
from runner import keyless_answers  # noqa: E402  # pylint: disable=wrong-import-position


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
    """The front door on the head only, at the endpoint's address; vLLM on no TCP port at all (its socket is the door's);
    Ray's GCS on the head."""
    name, host = node
    port = plan["cluster"]["endpoint"]["port"]
    listening = host.socket.get_listening_sockets()
    if name == plan["head"]:
        assert host.socket("tcp://%s" % plan["cluster"]["door"]["listen"]).is_listening
        owners = host.check_output("ss -Hltnp 'sport = :%d'" % port)
        assert "nginx" in owners and "python" not in owners and "vllm" not in owners.lower(), owners
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
    assert not any("VLLM_API_KEY" in e for e in envs)  # vLLM holds no key: the front door does


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


def test_no_route_but_health_answers_without_the_key(plan, api_key):
    """Every route the image's vLLM lists (its /openapi.json, read through the door with the key), with every method
    it lists, and the routes it serves unlisted, asked without the key and with a wrong one: 401, but GET /health."""
    asked, answered = keyless_answers(plan["cluster"]["endpoint"]["url"], api_key)
    assert answered == []
    print("front door: %d routes and methods asked without the key and with a wrong one; only GET /health answered" % asked)


def test_vllm_is_reachable_only_through_its_socket(head, plan):
    """vLLM's socket: root reaches it on the head; another user of the head does not (its folder is root's, 0700)."""
    name, host = head
    socket_path = plan["nodes"][name]["paths"]["door_socket_dir"] + "/vllm.sock"
    probe = ("import os, socket, sys\n"
             "if sys.argv[1] != '0':\n    os.setgid(65534); os.setuid(65534)\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "try:\n    s.connect(sys.argv[2]); print('connected')\nexcept OSError as e:\n    print(type(e).__name__)\n")
    assert host.check_output("python3 -c %s 0 %s" % (shquote(probe), socket_path)) == "connected"
    assert host.check_output("python3 -c %s 65534 %s" % (shquote(probe), socket_path)) == "PermissionError"
    folder = host.file(plan["nodes"][name]["paths"]["door_socket_dir"])
    assert folder.user == "root" and folder.mode == 0o700


def test_the_key_is_in_no_serving_process_or_container(head, plan, api_key):
    """The key is in the front door's root-only file: no container's configuration and no process on the head holds it
    in its environment or argv."""
    name, host = head
    for container in host.check_output("docker ps --quiet --filter label=dgx_spark.vllm.managed=true").split():
        assert api_key not in host.check_output("docker inspect %s" % container)
    environs = host.run("sh -c 'cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr \"\\0\" \"\\n\"'").stdout
    assert environs and api_key not in environs and "VLLM_API_KEY=" not in environs


def shquote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def test_teardown_leaves_no_container_of_ours(hosts, paths):
    done = subprocess.run(["ansible-playbook", "-i", paths["inventory"], "playbooks/teardown.yml"], cwd=paths["project"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    for name, host in hosts.items():
        left = host.check_output("docker ps --all --quiet --filter label=dgx_spark.vllm.managed=true")
        assert left == "", (name, left)
