"""monitoring: Prometheus's plan (targets, rules, container), the settings it refuses, and each node's figures as the
supervisor serves them (captured GB10 meminfo and nvidia-smi output)."""

import http.client
import os

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import metrics
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import monitoring, planner, profiles
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import unified_memory

from helpers import read_fixture, spark_inputs
from test_planner import PROFILES

GIB = 1024 ** 3


def plan_with(tmp_path, probes=None, settings=None, **given):
    """The whole plan of a plain inventory (one deployment) with monitoring on."""
    profile = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [PROFILES]))
    return planner.make_plan(spark_inputs(profile, tmp_path, settings=dict({"monitoring": dict({"enabled": True}, **given)},
                                                                           **(settings or {}))), probes=probes)


def only(whole):
    """The one deployment of a plain inventory's plan."""
    return whole["deployments"][whole["deployment_order"][0]]


def test_prometheus_scrapes_vllm_on_the_head_and_each_nodes_figures_on_the_fabric(tmp_path):
    whole = plan_with(tmp_path)
    assert whole["ok"], whole["errors"]
    plan, watched = only(whole), whole["monitoring"]
    assert watched["host"] == plan["head"] == "spark1"
    jobs = {job["job_name"]: job for job in watched["files"]["prometheus.yml"]["scrape_configs"]}
    # vLLM's /metrics through its front door, with the deployment's key from Prometheus's own file; labelled job="vllm"
    name = plan["cluster"]["name"]
    cluster = watched["files"]["prometheus.yml"]["global"]["external_labels"]["cluster"]  # every series carries it (the dashboard's $cluster)
    assert jobs["vllm-" + name]["static_configs"] == [{"targets": [plan["cluster"]["endpoint"]["local_address"]],
                                                       "labels": {"deployment": name, "cluster": cluster}}]
    assert jobs["vllm-" + name]["authorization"] == {"type": "Bearer", "credentials_file": "/etc/prometheus/keys/" + name}
    assert jobs["vllm-" + name]["relabel_configs"] == [{"target_label": "job", "replacement": "vllm"}]
    assert watched["keys"] == [{"path": "/var/lib/dgx-spark-vllm/dgx-spark/monitoring/config/keys/" + name, "owner": "65534", "mode": "0400",
                                "key_file": plan["cluster"]["endpoint"]["api_key_file"]}]
    assert [(c["targets"], c["labels"]) for c in jobs["spark-nodes"]["static_configs"]] == [
        (["192.168.100.10:9101"], {"node": "spark1", "cluster": cluster}), (["192.168.100.11:9101"], {"node": "spark2", "cluster": cluster})]
    assert watched["jobs"] == {"vllm": 1, "spark-nodes": 2}
    # Prometheus listens on the head's loopback only unless the inventory says otherwise
    assert "--web.listen-address=127.0.0.1:9090" in watched["container"]["command"]
    assert watched["container"]["labels"]["dgx_spark.vllm.managed"] == "true"
    assert watched["container"]["labels"]["dgx_spark.vllm.node"] == "spark1"
    for name, node in plan["nodes"].items():
        # each node's supervisor serves its figures on its fabric address, and only the cluster's nodes reach the port
        # (the Prometheus host among them): the firewall opens it to no other host
        assert node["boot"]["config"]["metrics"] == {"address": node["fabric_ip"], "port": 9101,
                                                     "labels": {"cluster": "dgx-spark", "node": name}}
        assert "9101" not in node["firewall"]["opened_tcp"] and plan["nodes"]["spark1"]["fabric_ip"] in node["firewall"]["addresses"]


def test_the_rules_name_the_plans_floor_and_limit_and_fire_after_alert_for(tmp_path):
    whole = plan_with(tmp_path, alert_for="2m", kv_cache_full=0.9)
    plan = only(whole)
    rules = {r["alert"]: r for r in whole["monitoring"]["files"]["rules.yml"]["groups"][0]["rules"]}
    assert set(rules) == {"VllmEndpointDown", "SparkNodeMetricsDown", "VllmKvCacheFull", "SparkMemAvailableLow", "SparkPinnedMemory",
                          "SparkSupervisorStopped"}
    assert {r["for"] for r in rules.values()} == {"2m"}
    assert rules["VllmEndpointDown"]["expr"] == 'up{job="vllm"} == 0'
    assert rules["VllmKvCacheFull"]["expr"] == "vllm:kv_cache_usage_perc >= 0.9"
    floor = plan["cluster"]["memory"]["headroom_floor_bytes"]
    assert floor > 0 and rules["SparkMemAvailableLow"]["expr"] == "dgx_spark_memory_available_bytes < %d" % floor
    assert rules["SparkPinnedMemory"]["expr"] == "dgx_spark_memory_unaccounted_bytes >= %d" % (8 * GIB)
    # the supervisor's own states, as its figures name them (module_utils/node/metrics.py), those it stops in
    stopped = rules["SparkSupervisorStopped"]
    assert stopped["expr"] == 'dgx_spark_supervisor_state{state=~"refused|failed"} == 1' and stopped["labels"]["severity"] == "critical"


def test_a_changed_setting_moves_the_containers_hash(tmp_path):
    first = plan_with(tmp_path)["monitoring"]["container"]["labels"]["dgx_spark.vllm.config_hash"]
    again = plan_with(tmp_path)["monitoring"]["container"]["labels"]["dgx_spark.vllm.config_hash"]
    other = plan_with(tmp_path, scrape_interval="5s")["monitoring"]["container"]["labels"]["dgx_spark.vllm.config_hash"]
    assert first == again != other


def test_monitoring_off_plans_nothing_and_opens_no_port(tmp_path):
    whole = plan_with(tmp_path, enabled=False)
    assert whole["ok"] and not whole["monitoring"]["enabled"] and whole["monitoring"]["change"] == "none"
    for node in only(whole)["nodes"].values():
        assert node["boot"]["config"]["metrics"] is None
        assert "9101" not in node["firewall"]["opened_tcp"]


def test_a_central_prometheus_gets_every_series_by_remote_write_with_its_token_from_a_file(tmp_path):
    plain = plan_with(tmp_path)["monitoring"]
    assert "remote_write" not in plain["files"]["prometheus.yml"]  # none asked: nothing leaves the head
    token = tmp_path / "central.token"
    token.write_text("s3cret\n")
    watched = plan_with(tmp_path, remote_write_url="https://prometheus.example.org/api/v1/write", remote_write_token_file=str(token))["monitoring"]
    assert watched["files"]["prometheus.yml"]["remote_write"] == [
        {"url": "https://prometheus.example.org/api/v1/write",
         "authorization": {"type": "Bearer", "credentials_file": "/etc/prometheus/keys/remote-write"}}]
    kept = [k for k in watched["keys"] if k["path"].endswith("/keys/remote-write")]
    assert kept == [{"path": "/var/lib/dgx-spark-vllm/dgx-spark/monitoring/config/keys/remote-write", "owner": "65534", "mode": "0400",
                     "key_file": str(token)}]
    assert "s3cret" not in str(watched)  # the plan names the file, never the token
    keyless = plan_with(tmp_path, remote_write_url="http://10.209.0.99:9090/api/v1/write")["monitoring"]
    assert keyless["files"]["prometheus.yml"]["remote_write"] == [{"url": "http://10.209.0.99:9090/api/v1/write"}]
    assert not [k for k in keyless["keys"] if k["path"].endswith("/keys/remote-write")]


def test_a_node_exporter_already_on_the_nodes_gets_their_figures_in_its_textfile_folder(tmp_path):
    folder = "/var/lib/prometheus/node-exporter"
    for enabled in (True, False):  # the collection's own Prometheus on or off: the textfile is the node_exporter's
        plan = only(plan_with(tmp_path, enabled=enabled, textfile_dir=folder))
        for name, node in plan["nodes"].items():
            assert node["boot"]["config"]["textfile"] == {"path": folder + "/dgx_spark_vllm_dgx-spark.prom",
                                                          "labels": {"cluster": "dgx-spark", "node": name}}
            # Its sandbox may write there (a folder missing does not stop the unit: "-"), and nowhere else new.
            assert "ReadWritePaths=%s -%s" % (os.path.dirname(node["boot"]["paths"]["status"]), folder) in node["boot"]["unit"].splitlines()
    for node in only(plan_with(tmp_path))["nodes"].values():
        assert node["boot"]["config"]["textfile"] is None  # none asked
    # The probe reads the folder on every node; a node where it is not a folder is refused, named, before any change.
    probes = {"dgx-spark": {"spark1": {"state": {folder: "dir"}, "containers": []}, "spark2": {"state": {folder: None}, "containers": []}}}
    refused = plan_with(tmp_path, probes, textfile_dir=folder)
    assert not refused["ok"] and any(e["message"].startswith("spark2: vllm_monitoring_textfile_dir %s is not a folder there" % folder)
                                     for e in refused["errors"]), refused["errors"]
    assert not any(e["message"].startswith("spark1:") and "textfile" in e["message"] for e in refused["errors"])
    off = only(plan_with(tmp_path, textfile_dir=folder, settings={"boot_start": False}))
    assert all(node["boot"]["config"]["textfile"] is None for node in off["nodes"].values())  # no supervisor to write it


@pytest.mark.parametrize("given,named", [
    ({"scrape_interval": "15"}, "vllm_monitoring_scrape_interval must be a Prometheus duration"),
    ({"listen": "9090"}, "vllm_monitoring_listen must be ADDRESS:PORT"),
    ({"node_port": 70000}, "vllm_monitoring_node_port must be between 1 and 65535, got 70000"),
    ({"kv_cache_full": 95}, "vllm_monitoring_kv_cache_full is a fraction"),
    ({"remote_write_url": "central:9090/api/v1/write"}, "vllm_monitoring_remote_write_url must be the receiver's http:// or https:// URL"),
    ({"remote_write_token_file": "/etc/central.token"}, "vllm_monitoring_remote_write_token_file is set but vllm_monitoring_remote_write_url is not"),
    ({"textfile_dir": "node-exporter"}, "vllm_monitoring_textfile_dir must be the absolute folder node_exporter's --collector.textfile.directory"),
    ({"textfile_dir": "/var/lib/prometheus/../node-exporter"}, "got '/var/lib/prometheus/../node-exporter'"),
    ({"textfile_dir": "/var/lib/node exporter"}, "in letters, digits and ._+-"),
    ({"textfile_dir": "/etc/node-exporter"}, "'/etc/node-exporter' overlaps /etc (a system folder)"),
    ({"textfile_dir": "/var/lib/dgx-spark-vllm/metrics"}, "overlaps /var/lib/dgx-spark-vllm (the collection's state folder)"),
    ({"textfile_dir": "/var/lib"}, "'/var/lib' overlaps /var/lib/dgx-spark-vllm (the collection's state folder)"),
])
def test_bad_settings_are_refused_by_name(tmp_path, given, named):
    plan = plan_with(tmp_path, **given)
    assert not plan["ok"]
    assert any(named in e["message"] for e in plan["errors"]), plan["errors"]


def parse(text):
    """{(name, labels): value} of Prometheus's text format (what the scrape reads)."""
    samples = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        key, value = line.rsplit(" ", 1)
        samples[key] = float(value)
    return samples


def test_a_nodes_figures_show_pinned_memory_and_the_ranks_memory():
    apps = unified_memory.parse_compute_apps(read_fixture("nvidia_smi", "gb10-compute-apps-serving.csv"))
    serving = unified_memory.summarize(unified_memory.parse_meminfo(read_fixture("meminfo", "gb10-serving.txt")), compute_apps=apps)
    leaked = unified_memory.summarize(unified_memory.parse_meminfo(read_fixture("meminfo", "gb10-leaked.txt")))
    labels = {"cluster": "lab", "node": "spark2"}
    now = parse(metrics.node_metrics(serving, "serving", labels))
    where = '{cluster="lab",node="spark2"}'
    assert now["dgx_spark_memory_available_bytes" + where] == serving["mem_available_bytes"]
    assert now["dgx_spark_memory_gpu_process_bytes" + where] == serving["gpu_process_bytes"] > 0
    assert now["dgx_spark_vllm_ranks" + where] == len(apps) >= 1
    assert now['dgx_spark_supervisor_state{cluster="lab",node="spark2",state="serving"}'] == 1
    pinned = parse(metrics.node_metrics(leaked, None, labels))
    assert pinned["dgx_spark_memory_unaccounted_bytes" + where] == leaked["unaccounted_bytes"] > 8 * GIB
    assert pinned['dgx_spark_supervisor_state{cluster="lab",node="spark2",state="unknown"}'] == 1


class FakeOps:
    def memory(self):
        return unified_memory.summarize(unified_memory.parse_meminfo(read_fixture("meminfo", "gb10-idle.txt")))


def get(port, path):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, answer.read().decode()
    finally:
        connection.close()


def test_the_supervisor_serves_metrics_where_the_plan_says_and_stops_when_it_no_longer_does():
    config = {"metrics": {"address": "127.0.0.1", "port": 0, "labels": {"cluster": "lab", "node": "spark1"}}}
    shared = {"state": "waiting"}
    server = metrics.serve_metrics(config, FakeOps(), shared)
    try:
        port = server.server_address[1]
        status, text = get(port, "/metrics")
        assert status == 200 and 'dgx_spark_supervisor_state{cluster="lab",node="spark1",state="waiting"} 1' in text
        assert get(port, "/")[0] == 404
        config["metrics"]["port"] = port  # the same place: the same server
        assert metrics.serve_metrics(config, FakeOps(), shared, server) is server
        taken = metrics.serve_metrics(dict(config), FakeOps(), shared)  # a second server cannot take the port: said, not raised
        assert taken is None and "cannot serve /metrics on 127.0.0.1:%d" % port in shared["metrics_error"]
    finally:
        assert metrics.serve_metrics({"metrics": None}, FakeOps(), shared, server) is None
    with pytest.raises(OSError):
        get(port, "/metrics")


def test_with_the_supervisor_off_prometheus_scrapes_vllm_only_and_says_so(tmp_path):
    whole = plan_with(tmp_path, settings={"boot_start": False})
    plan = only(whole)
    assert whole["ok"], whole["errors"]
    assert whole["monitoring"]["jobs"] == {"vllm": 1, "spark-nodes": 0}
    assert any("Prometheus scrapes vLLM only" in w for w in plan["warnings"])
    for node in plan["nodes"].values():
        assert node["boot"]["config"]["metrics"] is None and "9101" not in node["firewall"]["opened_tcp"]


def test_the_plan_says_whether_the_head_needs_prometheus_applied_or_removed(tmp_path):
    planned = plan_with(tmp_path)["monitoring"]
    assert planned["change"] == "create"  # the head was not probed: what a first run does

    def head_runs(*containers):
        return {"dgx-spark": {"spark1": {"containers": list(containers)}}}

    running = {"name": "dgx-spark-prometheus", "state": "running", "labels": dict(planned["container"]["labels"])}
    assert plan_with(tmp_path, head_runs())["monitoring"]["change"] == "create"
    assert plan_with(tmp_path, head_runs(running))["monitoring"]["change"] == "none"
    assert plan_with(tmp_path, head_runs(dict(running, state="exited")))["monitoring"]["change"] == "start"
    moved = dict(running, labels=dict(running["labels"], **{"dgx_spark.vllm.config_hash": "other"}))
    assert plan_with(tmp_path, head_runs(moved))["monitoring"]["change"] == "recreate"
    assert plan_with(tmp_path, head_runs(running), enabled=False)["monitoring"]["change"] == "remove"
    foreign = {"name": "dgx-spark-prometheus", "state": "running", "labels": {}}
    refused = plan_with(tmp_path, head_runs(foreign))  # not ours: never touched, and the plan says why
    assert not refused["ok"] and "a container named dgx-spark-prometheus runs here but was not made by this collection" \
        in refused["errors"][0]["message"]
    left = plan_with(tmp_path, head_runs(foreign), enabled=False)  # off: nothing of ours to run there, so nothing to refuse
    assert left["ok"] and left["monitoring"]["change"] == "none"


def test_a_new_token_for_the_central_prometheus_is_written_again():
    config, errors = monitoring.settings({"enabled": True, "remote_write_url": "http://10.209.0.1:19090/api/v1/write",
                                          "remote_write_token_file": "/etc/dgx-spark/central.token"})
    assert not errors

    def config_hash(token_digest):
        return monitoring.plan(config, "lab", "/f", [], [], 0, 0, {}, token_digest)["container"]["labels"]["dgx_spark.vllm.config_hash"]

    assert config_hash("aaaa") == config_hash("aaaa") != config_hash("bbbb")


def test_the_supervisor_writes_the_figures_whole_where_node_exporter_reads_them_never_through_a_link(tmp_path):
    folder = tmp_path / "node-exporter"
    config = {"textfile": {"path": str(folder / "dgx_spark_vllm_lab.prom"), "labels": {"cluster": "lab", "node": "spark1"}}}
    said = metrics.write_textfile(config, FakeOps(), {"state": "serving"})
    assert "the folder is missing (is node_exporter's textfile collector set up?)" in said and not folder.exists()
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("untouched\n")
    os.symlink(elsewhere, config["textfile"]["path"])  # planted where the file goes: replaced, never written through
    assert metrics.write_textfile(config, FakeOps(), {"state": "serving"}) is None
    written = folder / "dgx_spark_vllm_lab.prom"
    assert not written.is_symlink() and elsewhere.read_text() == "untouched\n"
    assert (written.stat().st_mode & 0o777) == 0o644 and [p.name for p in folder.iterdir()] == [written.name]
    figures = parse(written.read_text())
    assert figures['dgx_spark_supervisor_state{cluster="lab",node="spark1",state="serving"}'] == 1
    assert figures['dgx_spark_memory_total_bytes{cluster="lab",node="spark1"}'] > 0  # the captured GB10's meminfo
    # The plan moved the file (or dropped it): the one this supervisor wrote goes at its next look.
    memo = {}
    assert metrics.write_textfile(config, FakeOps(), {"state": "serving"}, memo) is None
    assert metrics.write_textfile({"textfile": None}, FakeOps(), {}, memo) is None
    assert not written.exists() and list(folder.iterdir()) == []
    # A folder others can write (they could race root's writes there), or a link in its place, is refused by name.
    os.chmod(folder, 0o777)
    said = metrics.write_textfile(config, FakeOps(), {"state": "serving"})
    assert "can be written by its group or by others: make it 0755" in said and list(folder.iterdir()) == []
    os.chmod(folder, 0o755)
    moved = tmp_path / "moved"
    folder.rename(moved)
    folder.symlink_to(moved)
    assert "cannot write the node's figures" in metrics.write_textfile(config, FakeOps(), {"state": "serving"})
    assert list(moved.iterdir()) == []
