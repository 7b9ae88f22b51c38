"""placement: several deployments on one cluster, each planned on its own, then checked across (ports, memory, names)."""

import copy
import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import gateway, planner, profiles

from helpers import ROOT, spark_inputs

GIB = 1024 ** 3


def tiny(served="sim-tiny"):
    profile = profiles.load(profiles.find("sim_tiny", [os.path.join(ROOT, "profiles")]))
    profile["model"]["served_name"] = served
    return profile


def cluster(tmp_path, **settings):
    inputs = spark_inputs(tiny(), tmp_path, settings=dict({"simulated": True, "offline": True}, **settings))
    inputs["groups"] = {"spark_cluster": ["spark1", "spark2"], "spark_head": ["spark1"], "spark_workers": ["spark2"]}
    return inputs


TWO = [{"name": "chat", "profile": "sim_tiny", "nodes": "spark_cluster"},
       {"name": "coder", "profile": "sim_tiny", "nodes": ["spark1", "spark2"]}]


def several_plan(tmp_path, deployments=None, served=("sim-tiny", "sim-tiny-coder"), **settings):
    deployments = copy.deepcopy(deployments or TWO)
    known = {d.get("name"): tiny(s) for d, s in zip(deployments, served)}
    return planner.make_plan(cluster(tmp_path, **settings), listed=deployments, profiles_of=known)


def messages(plan):
    return [e["message"] for e in plan["errors"]]


def test_two_deployments_on_the_same_two_nodes_each_get_their_own_names_ports_and_ray(tmp_path):
    plan = several_plan(tmp_path)
    assert plan["ok"], messages(plan)
    chat, coder = plan["deployments"]["chat"], plan["deployments"]["coder"]
    assert chat["nodes"]["spark1"]["containers"][0]["name"] == "dgx-spark-chat-ray-spark1"
    assert coder["nodes"]["spark2"]["containers"][0]["name"] == "dgx-spark-coder-ray-spark2"
    assert chat["nodes"]["spark1"]["state_dir"] != coder["nodes"]["spark1"]["state_dir"]
    # the gateway keeps the cluster's port; the deployments take the next ones
    assert (chat["cluster"]["endpoint"]["port"], coder["cluster"]["endpoint"]["port"]) == (8001, 8002)
    assert plan["gateway"]["port"] == 8000 and plan["gateway"]["host"] == "spark1"
    head = {name: plan["deployments"][name]["nodes"]["spark1"]["containers"][0]["command"] for name in ("chat", "coder")}
    assert head["chat"][head["chat"].index("--port") + 1] == "6379"
    assert head["coder"][head["coder"].index("--port") + 1] == "7379"
    assert head["coder"][head["coder"].index("--node-manager-port") + 1] == "7800"
    assert head["coder"][head["coder"].index("--max-worker-port") + 1] == "11101"
    assert coder["nodes"]["spark2"]["firewall"]["table"] == "dgx_spark_vllm_dgx_spark_coder"
    # both tables admit the same: the cluster's nodes, SSH, and on the head the gateway's port; not the deployments'
    # doors, which listen on the head's fabric address for the gateway and the cluster's nodes alone
    chat_table = plan["deployments"]["chat"]["nodes"]["spark1"]["firewall"]
    assert chat_table["opened_tcp"] == coder["nodes"]["spark1"]["firewall"]["opened_tcp"] == ["22", "8000"]
    assert (chat["cluster"]["door"]["listen"], coder["cluster"]["door"]["listen"]) == ("192.168.100.10:8001", "192.168.100.10:8002")
    assert chat["cluster"]["endpoint"]["behind_gateway"] and chat["cluster"]["endpoint"]["url"] == "http://192.168.100.10:8001"
    assert chat_table["addresses"] == coder["nodes"]["spark2"]["firewall"]["addresses"]
    routes = {r["model"]: r for r in plan["gateway"]["routes"]}
    assert sorted(routes) == ["sim-tiny", "sim-tiny-coder"]
    assert routes["sim-tiny-coder"]["api_base"] == "http://192.168.100.10:8002/v1"  # its door on the same head
    assert routes["sim-tiny-coder"]["api_key_file"].endswith("/.secrets/vllm_api_key-coder")  # its own key, on the controller
    # every key file made once on the controller: the clients', each deployment's own, and Ray's token (one for all),
    # which an offline plan does not make (the head may hold one, taken back when the nodes answer)
    secrets = plan["key_files"]["folder"]
    keys = [secrets + "/vllm_api_key", secrets + "/vllm_api_key-chat", secrets + "/vllm_api_key-coder"]
    assert plan["key_files"]["generated"] == keys and plan["key_files"]["ray_token"] is None
    assert chat["cluster"]["ray_token_file"] == coder["cluster"]["ray_token_file"] == secrets + "/ray_auth_token"
    online = several_plan(tmp_path, offline=False)["key_files"]
    assert online["generated"] == keys + [secrets + "/ray_auth_token"]
    assert online["ray_token"] == {"file": secrets + "/ray_auth_token", "host": "spark1",
                                   "node_file": "/var/lib/dgx-spark-vllm/dgx-spark-chat/container/keys/ray_auth_token"}
    # memory is summed on both shared nodes: each asks its pool and processes of the same MemAvailable
    shared = plan["shared_nodes"]["spark2"]
    assert shared["deployments"] == ["chat", "coder"] and set(shared["starting"]) == {"chat", "coder"}
    assert shared["left_bytes"] == shared["mem_available_bytes"] - sum(shared["starting"].values())


def test_deployments_that_together_overcommit_a_shared_node_are_refused_with_the_utilization_that_fits(tmp_path):
    deployments = copy.deepcopy(TWO)
    for d in deployments:
        d["overrides"] = {"gpu_memory_utilization": 0.6}  # each fits alone (71.8 of 117.3 GiB), not both
    plan = several_plan(tmp_path, deployments)
    assert not plan["ok"]
    found = [m for m in messages(plan) if "together ask for" in m]
    assert len(found) == 2 and found[0].startswith("spark1: deployments chat (")
    assert "set overrides: {gpu_memory_utilization: 0.35} in deployment coder's entry, or place it on other nodes" in found[0], found[0]
    deployments[1]["overrides"]["gpu_memory_utilization"] = 0.35  # the fix the message names is enough
    plan = several_plan(tmp_path, deployments)
    assert plan["ok"], messages(plan)
    assert plan["shared_nodes"]["spark1"]["left_bytes"] >= GIB
    deployments[0]["overrides"]["gpu_memory_utilization"] = 0.93  # alone it fits; beside it nothing does
    found = [m for m in messages(several_plan(tmp_path, deployments)) if "together ask for" in m]
    assert found and found[0].endswith("the others leave deployment coder no room there: place it on other nodes, or lower "
                                       "the others' gpu_memory_utilization"), found


def test_a_run_that_acts_on_one_deployment_sums_only_its_start_on_a_shared_node(tmp_path):
    """upgrade.yml -e vllm_deployment=coder -e vllm_image=<new>: the new image changes every deployment's plan, but the
    run starts coder alone; chat keeps the pool it holds (MemAvailable counts it out already), so it is not summed."""
    deployments = copy.deepcopy(TWO)
    for d in deployments:
        d["overrides"] = {"gpu_memory_utilization": 0.6}  # each fits alone, not both
    known = {d["name"]: tiny(s) for d, s in zip(deployments, ("sim-tiny", "sim-tiny-coder"))}
    plan = planner.make_plan(cluster(tmp_path), listed=copy.deepcopy(deployments), profiles_of=known, chosen="coder")
    assert plan["ok"], messages(plan)
    assert list(plan["shared_nodes"]["spark1"]["starting"]) == ["coder"]
    plan = planner.make_plan(cluster(tmp_path), listed=copy.deepcopy(deployments), profiles_of=known)
    assert any("together ask for" in m for m in messages(plan))  # every deployment starts: both are summed


def test_colliding_ports_and_served_names_are_refused_naming_both(tmp_path):
    deployments = copy.deepcopy(TWO)
    deployments[1]["port"] = 8001
    plan = several_plan(tmp_path, deployments)
    assert ("spark1: deployment chat's API port 8001 and deployment coder's API port 8001 collide; set deployment coder's "
            "port in vllm_deployments to move it") in messages(plan), messages(plan)
    deployments[1].update(port=None, ray_ports_offset=0, ray_port=6379)
    plan = several_plan(tmp_path, deployments)
    assert ("spark2: deployment chat's Ray ports 6800-6805 and deployment coder's Ray ports 6800-6805 collide; set deployment "
            "coder's ray_ports_offset in vllm_deployments to move it") in messages(plan), messages(plan)
    assert any("deployment chat's Ray GCS port 6379 and deployment coder's Ray GCS port 6379" in m for m in messages(plan))
    plan = several_plan(tmp_path, served=("sim-tiny", "sim-tiny"))
    assert messages(plan) == ["deployments chat and coder all serve the model name sim-tiny; the gateway routes by name, so "
                              "give each its own served_name (in vllm_deployments, or its profile's model.served_name)"]
    deployments[1]["served_name"] = "coder"  # the deployment's own name for the gateway wins over its profile's
    plan = several_plan(tmp_path, deployments, served=("sim-tiny", "sim-tiny"))
    assert "deployments chat and coder all serve" not in " ".join(messages(plan))
    assert plan["deployments"]["coder"]["cluster"]["endpoint"]["served_model_name"] == "coder"
    deployments[1].update(ray_port=None, ray_ports_offset=None, port=8000)
    plan = several_plan(tmp_path, deployments)
    assert any(m.startswith("spark1: the gateway's port (vllm_port) 8000 and deployment coder's API port 8000 collide")
               for m in messages(plan))


def test_bad_deployment_entries_are_refused_before_any_plan(tmp_path):
    bad = [{"name": "Chat_1", "profile": "sim_tiny", "nodes": "spark_cluster"},
           {"name": "b", "nodes": ["spark1", "spark9"], "profle": "sim_tiny"},
           {"name": "c", "profile": "sim_tiny", "nodes": "no_such_group"},
           {"name": "c", "profile": "sim_tiny", "nodes": ["spark1", "spark1"]},
           {"name": "d", "profile": "sim_tiny", "nodes": "spark_cluster", "overrides": ["gpu_memory_utilization", 0.5]}]
    plan = several_plan(tmp_path, bad, served=("a", "b", "c", "d", "e"))
    found = messages(plan)
    assert plan["deployments"] == {} and not plan["ok"]
    assert "deployment Chat_1: name 'Chat_1' must be 1-16 characters of a-z, 0-9 and '-'" in found[0]
    assert "deployment b: unknown key(s) profle; a deployment takes name, profile, profile_file, nodes" in found[1]
    assert "deployment b has no profile: set its profile (a name) or profile_file" in found
    assert "deployment b: spark9 not in spark_cluster; a deployment runs on the cluster's nodes only" in found
    assert any(m.startswith("deployment c: nodes 'no_such_group' is not a group of the inventory") for m in found)
    assert "deployments 2 and 3 are both named c; give each its own name" in found
    assert "deployment c lists spark1 more than once; each node holds one rank" in found
    assert "deployment d: overrides must be a mapping, got ['gpu_memory_utilization', 0.5]" in found


def test_a_deployment_error_names_its_deployment(tmp_path):
    deployments = copy.deepcopy(TWO)
    deployments[1]["overrides"] = {"max_model_len": 100000}
    plan = several_plan(tmp_path, deployments)
    assert [m for m in messages(plan) if m.startswith("deployment coder: max_model_len 100000 exceeds the model's 4096 tokens")]
    assert not [m for m in messages(plan) if m.startswith("deployment chat:")]


def test_one_prometheus_watches_every_deployment_and_each_node_is_scraped_once(tmp_path):
    plan = several_plan(tmp_path, monitoring={"enabled": True})
    assert plan["ok"], messages(plan)
    watched = plan["monitoring"]
    assert watched["host"] == "spark1" and watched["container"]["name"] == "dgx-spark-prometheus"
    jobs = {job["job_name"]: job for job in watched["files"]["prometheus.yml"]["scrape_configs"]}
    chat, coder = (plan["deployments"][n]["cluster"]["endpoint"] for n in ("chat", "coder"))
    assert [jobs["vllm-" + n]["static_configs"][0]["targets"] for n in ("chat", "coder")] == [[chat["local_address"]], [coder["local_address"]]]
    assert [k["key_file"] for k in watched["keys"]] == [chat["api_key_file"], coder["api_key_file"]]
    assert watched["jobs"] == {"vllm": 2, "spark-nodes": 2}
    # the two deployments share both nodes: the first placed there serves each node's figures, the other does not
    for name in ("spark1", "spark2"):
        assert plan["deployments"]["chat"]["nodes"][name]["boot"]["config"]["metrics"]["port"] == 9101
        assert plan["deployments"]["coder"]["nodes"][name]["boot"]["config"]["metrics"] is None
    paths = planner.paths(cluster(tmp_path, monitoring={"enabled": True}), copy.deepcopy(TWO))
    assert paths["ok"] and paths["deployment_order"] == ["chat", "coder"]
    assert paths["shared"]["containers"] == ["dgx-spark-gateway", "dgx-spark-gateway-door", "dgx-spark-prometheus"]


def test_a_new_key_for_one_deployment_recreates_only_its_front_door_and_the_gateway(tmp_path):
    def planned(coder_key):
        inputs = cluster(tmp_path)
        inputs["api_key_digest"] = "client"
        return planner.make_plan(inputs, listed=copy.deepcopy(TWO), profiles_of={"chat": tiny(), "coder": tiny("sim-tiny-coder")},
                                 key_digests={"chat": "chat-1", "coder": coder_key})

    def hashes(plan):
        return ({name: p["cluster"]["serve_config_hash"] for name, p in plan["deployments"].items()},
                {name: p["cluster"]["door"]["container"]["labels"]["dgx_spark.vllm.config_hash"] for name, p in plan["deployments"].items()},
                plan["gateway"]["container"]["labels"]["dgx_spark.vllm.config_hash"])

    before, after = hashes(planned("coder-1")), hashes(planned("coder-2"))
    assert before[0] == after[0]  # vLLM holds no key: neither deployment's vLLM restarts
    assert before[1]["chat"] == after[1]["chat"] and before[1]["coder"] != after[1]["coder"]
    assert before[2] != after[2]  # the gateway holds the coder's key: it is recreated with it
    assert hashes(planned("coder-1")) == before  # and nothing changes when nothing did


def test_the_gateway_serves_every_route_on_the_clusters_port_and_holds_the_keys_only_in_its_file(tmp_path):
    plan = several_plan(tmp_path)
    planned = plan["gateway"]
    assert planned["enabled"] and planned["url"] == "http://192.168.1.101:8000"
    spec = planned["container"]
    assert spec["name"] == "dgx-spark-gateway" and spec["network_mode"] == "host"
    # LiteLLM listens on no port: a Unix socket in a root-only folder, which its front door alone mounts
    assert spec["command"][spec["command"].index("--uds") + 1] == "/run/dgx-spark-gateway/gateway.sock" and "--port" not in spec["command"]
    assert spec["env"]["LITELLM_OFFLINE_MODE"] == "true"  # it fetches its cost map from the internet otherwise
    # as the door: no capability, none to gain, a read-only file system but its /tmp (LiteLLM's token store)
    assert (spec["cap_drop"], spec["security_opts"], spec["read_only"], spec["tmpfs"]) == (["ALL"], ["no-new-privileges"], True, ["/tmp"])
    assert spec["env"]["CONFIG_FILE_PATH"] == "/etc/litellm/config.yaml"
    assert spec["volumes"] == ["/var/lib/dgx-spark-vllm/dgx-spark/gateway/config.yaml:/etc/litellm/config.yaml:ro",
                               "/var/lib/dgx-spark-vllm/dgx-spark/gateway/socket:/run/dgx-spark-gateway"]
    # its front door listens where clients reach it, with the clients' key, and passes that key on to LiteLLM
    front = planned["door"]
    assert front["listen"] == "192.168.1.101:8000" and front["container"]["name"] == "dgx-spark-gateway-door"
    assert front["socket_folder"] == "/var/lib/dgx-spark-vllm/dgx-spark/gateway/socket" and front["change"] == "create"
    assert front["key_file"] == planned["client_key_file"] and planned["apply_needed"]
    config = front["files"][0]["content"]
    assert "server unix:/run/dgx-spark-door/gateway.sock;" in config and "proxy_pass http://behind/health/liveliness;" in config
    assert 'proxy_set_header Authorization "";' not in config
    assert planned["health_path"] == "/health" and "/openapi.json" in planned["keyless_checked"] and planned["keyless_status"] == 401
    keys = {"chat": "chat-key-4711", "coder": "coder-key-4712"}
    text = gateway.config_text(planned["routes"], keys, "client-key-4713", planned["health_check_interval"])
    config = gateway.config(planned["routes"], keys, "client-key-4713", 30)
    assert [(m["model_name"], m["litellm_params"]["model"], m["litellm_params"]["api_base"], m["litellm_params"]["api_key"])
            for m in config["model_list"]] == [
        ("sim-tiny", "hosted_vllm/sim-tiny", "http://192.168.100.10:8001/v1", "chat-key-4711"),
        ("sim-tiny-coder", "hosted_vllm/sim-tiny-coder", "http://192.168.100.10:8002/v1", "coder-key-4712")]
    assert config["general_settings"]["master_key"] == "client-key-4713" and "chat-key-4711" in text
    for secret in ("chat-key-4711", "coder-key-4712", "client-key-4713"):  # the plan names the key files, never a key
        assert secret not in str(plan)


def test_the_gateway_appears_with_two_deployments_or_when_asked():
    assert (gateway.enabled(None, 1), gateway.enabled(None, 2), gateway.enabled(True, 1), gateway.enabled("false", 3)) == \
        (False, True, True, False)


def test_the_printed_plan_shows_each_deployment_the_routes_and_what_each_shared_node_keeps(tmp_path):
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import render
    lines = render.render(several_plan(tmp_path))
    assert "== deployment chat ==" in lines and "== deployment coder ==" in lines
    assert "  sim-tiny-coder -> deployment coder at http://192.168.100.10:8002/v1" in lines
    assert "Gateway's front door on spark1: create dgx-spark-gateway-door" in lines
    assert ("Endpoint: http://192.168.1.101:8000/v1 serving sim-tiny-coder (API key from inventories/sparks/.secrets/vllm_api_key); "
            "behind the gateway, its own front door at http://192.168.100.10:8002 answers the cluster's nodes alone") in lines
    assert ("Shared node spark2: chat 36.9 GiB + coder 36.9 GiB start with 73.8 GiB of 117.3 GiB available, leaving 43.5 GiB "
            "(floor 1.0 GiB)") in lines
    assert lines[-1] == "Verdict: ready to apply"
    assert not [line for line in lines if line.startswith("Verdict") and line != lines[-1]]  # one verdict, the whole's


def test_teardown_and_status_name_each_deployment_and_the_gateway_without_profiles(tmp_path):
    inputs = cluster(tmp_path)
    paths = planner.paths(inputs, copy.deepcopy(TWO))
    assert paths["ok"] and paths["deployment_order"] == ["chat", "coder"]
    coder = paths["deployments"]["coder"]
    assert coder["cluster"]["name"] == "dgx-spark-coder" and coder["nodes"]["spark2"]["containers"]["ray"] == "dgx-spark-coder-ray-spark2"
    assert coder["cluster"]["endpoint"]["url"].endswith(":8002")
    assert paths["shared"]["containers"][0] == "dgx-spark-gateway" and paths["shared"]["host"] == "spark1"
    assert paths["shared"]["gateway"]["url"].endswith(":8000") and paths["shared"]["gateway"]["enabled"]
    # the same names the full plan gives
    full = several_plan(tmp_path)
    assert full["deployments"]["coder"]["nodes"]["spark2"]["containers"][0]["name"] == "dgx-spark-coder-ray-spark2"
    assert full["gateway"]["container"]["name"] == paths["shared"]["containers"][0]
    assert full["gateway"]["folder"] == paths["shared"]["folders"][0]
    # status.yml asks each deployment where its clients do (the gateway, with their key), as the full plan's checks do;
    # a recovery's health look asks its own door, where the full plan puts it
    for name in ("chat", "coder"):
        endpoint, planned = paths["deployments"][name]["cluster"]["endpoint"], full["deployments"][name]["cluster"]["endpoint"]
        assert endpoint["client"]["url"] == planned["client"]["url"] == full["gateway"]["url"]
        assert endpoint["client"]["api_key_file"] == planned["client"]["api_key_file"] == full["gateway"]["client_key_file"]
        assert endpoint["client"]["health_path"] == planned["client"]["health_path"] == full["gateway"]["health_path"]
        assert endpoint["url"] == planned["url"] and endpoint["health_url"] == planned["health_url"]
    bad = planner.paths(inputs, [{"name": "Bad_Name", "profile": "sim_tiny", "nodes": "spark_cluster"}])
    assert not bad["ok"] and "Bad_Name" in bad["errors"][0]["message"]


def test_the_gateways_background_health_checks_are_off_unless_asked_for_and_a_bad_interval_is_refused(tmp_path):
    keys = {"chat": "chat-key-4711", "coder": "coder-key-4712"}
    off = several_plan(tmp_path)["gateway"]
    settings = gateway.config(off["routes"], keys, "client-key", off["health_check_interval"])["general_settings"]
    assert off["health_check_interval"] == 0 and settings["background_health_checks"] is False and "health_check_interval" not in settings
    on = several_plan(tmp_path, gateway={"health_check_interval": "60"})["gateway"]
    settings = gateway.config(on["routes"], keys, "client-key", on["health_check_interval"])["general_settings"]
    assert (settings["background_health_checks"], settings["health_check_interval"]) == (True, 60)
    # a changed interval is a changed configuration: the gateway is recreated with it
    assert on["container"]["labels"] != off["container"]["labels"]
    bad = several_plan(tmp_path, gateway={"health_check_interval": "-5"})
    assert not bad["ok"] and any("vllm_gateway_health_check_interval '-5' is not a number of seconds" in m for m in messages(bad)), messages(bad)


def test_a_gateway_asked_for_without_deployments_is_refused_and_one_deployment_may_have_it(tmp_path):
    inputs = cluster(tmp_path, gateway={"enabled": True})
    inputs["profile"] = tiny()
    plan = planner.make_plan(inputs)
    assert "vllm_gateway: true puts the gateway in front of vllm_deployments, and this inventory has none" in messages(plan)[0]
    one = several_plan(tmp_path, deployments=TWO[:1], gateway={"enabled": True})
    assert one["ok"] and one["gateway"]["enabled"] and [r["model"] for r in one["gateway"]["routes"]] == ["sim-tiny"]


def test_an_unchanged_gateway_is_asked_with_the_deployments_only_when_nothing_launches_behind_it(tmp_path):
    plan = several_plan(tmp_path)
    gate = plan["gateway"]
    # A first run creates it: verified once every deployment is (tasks/shared_verify.yml), not asked with them.
    assert gate["change"] == "create" and gate["verify"] and gate["with_unchanged"] == []
    assert gate["check"] == {"name": "gateway", "url": gate["url"], "health_path": gate["health_path"], "api_key_file": gate["client_key_file"],
                             "ca_file": None,
                             "model": "sim-tiny", "models": ["sim-tiny", "sim-tiny-coder"], "refused_without_key": True,
                             "keyless_paths": gate["keyless_checked"], "keyless_status": 401}
    # Each deployment is asked where its clients ask it: through the gateway, for its model, with the clients' key.
    for name, model in (("chat", "sim-tiny"), ("coder", "sim-tiny-coder")):
        endpoint = plan["deployments"][name]["cluster"]["endpoint"]
        assert endpoint["check"] == {"name": "dgx-spark-" + name, "url": gate["url"], "api_key_file": gate["client_key_file"],
                                     "health_path": gate["health_path"], "model": model, "ready_probe": True, "ca_file": None}
        assert endpoint["client"]["url"] == gate["url"] and endpoint["client"]["api_key_file"] == gate["client_key_file"]
    running = dict(gate, change="none", apply_needed=False)
    assert planner.gateway_checks(running, ["chat", "coder"], ["chat", "coder"]) == {"with_unchanged": [gate["check"]], "verify": False}
    assert planner.gateway_checks(running, ["chat"], ["chat", "coder"]) == {"with_unchanged": [], "verify": True}  # coder launches
    assert planner.gateway_checks(dict(running, enabled=False), ["chat"], ["chat"]) == {"with_unchanged": [], "verify": False}
