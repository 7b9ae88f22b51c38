# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the monitoring role runs: Prometheus on the head, scraping vLLM and every node, with the cluster's alert rules.

Why these targets:
- vLLM's `/metrics` is served by the API server only, that is the head (ranks under Ray and `--headless` ranks serve
  no HTTP), and reached through the deployment's front door like every route: Prometheus sends the deployment's key,
  from a file of its own (0400, its user's; module_utils/plan/door.py). Outsiders get 401 there.
- A node's memory is the GB10's unified memory, which the kernel's MemAvailable describes only in part: memory pinned
  by a rank killed hard is used and explained by nothing (fact 3), and the node exporter cannot tell it apart. So each
  node's supervisor (module_utils/plan/boot.py, already running on every node) serves the unified-memory probe's figures
  (module_utils/probe/unified_memory.py) on the node's fabric address, a port the collection's firewall keeps to the
  cluster's nodes. Prometheus on the head reaches them over the fabric.
- Prometheus itself listens on the head's 127.0.0.1 by default: nothing listens beyond where it must. Reach it with
  `ssh -L 9090:127.0.0.1:9090 <head>`, or set vllm_monitoring_listen to the management address.
- An organisation's central Prometheus gets the cluster's series by remote write, outbound from the head
  (``remote_write_url``, with a bearer token from a file when it asks for one): the head opens no port for it. Every
  series carries the cluster's name as its ``cluster`` label.

Pure: the role writes the files and runs the container this plans; each node's supervisor serves the
figures module_utils/node/metrics.py writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node.metrics import PREFIX
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import labels as container_labels

GIB = 1024 ** 3
DEFAULTS = {
    "enabled": False,
    # Prometheus 3.13, a long-term support release (supported until July 2027); the flags and files are those of
    # 2.x and 3.x alike. The simulated cluster runs Debian's 2.42 (docs/simulated-cluster.md lists the gap).
    "image": "prom/prometheus:v3.13.2",
    "listen": "127.0.0.1:9090",
    "node_port": 9101,                    # each node's supervisor serves the node's figures here, on the fabric
    "scrape_interval": "15s",
    "alert_for": "1m",                    # how long a condition holds before its alert fires
    "retention": "15d",
    "kv_cache_full": 0.95,                # vllm:kv_cache_usage_perc at or above which the KV cache counts as full
    "remote_write_url": "",               # a central Prometheus's remote-write receiver; empty: none
    "remote_write_token_file": "",        # on the controller: the bearer token that receiver asks for; empty: none
    "textfile_dir": "",                   # each node's node_exporter textfile folder: the supervisor writes the figures there
}
REMOTE_WRITE_KEY = "remote-write"
DURATION = re.compile(r"^[0-9]+(ms|s|m|h|d)$")
JOB_VLLM = "vllm"
JOB_NODES = "spark-nodes"
CONFIG_MOUNT = "/etc/prometheus"
DATA_MOUNT = "/prometheus"
DATA_UID = 65534   # Prometheus's images run as nobody


# Folders node_exporter's textfile collector may not be: the system's own, which the supervisor's sandbox keeps
# read-only (a folder given becomes writable to it), and Docker's data. The collection's state and models folders are
# added by the caller.
SYSTEM_FOLDERS = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/proc", "/sys", "/dev", "/run", "/root", "/home",
                  "/var/lib/docker", "/var/run", "/opt")
SAFE_FOLDER = re.compile(r"^/[A-Za-z0-9._/+-]+$")  # no space, %, backslash or control character: a unit line takes it as is


def settings(given, reserved=()):
    """The monitoring settings: the defaults overlaid with the given ones (null keeps the default), and the errors.
    ``reserved``: (folder, what it is) pairs the textfile folder may not hold or be held by (the state, the models)."""
    config = dict(DEFAULTS)
    config.update({k: v for k, v in (given or {}).items() if v is not None and v != ""})
    errors = []
    config["enabled"] = str(config["enabled"]).lower() in ("1", "true", "yes", "on")
    for key in ("scrape_interval", "alert_for", "retention"):
        if not DURATION.match(str(config[key])):
            errors.append("vllm_monitoring_%s must be a Prometheus duration such as 15s, 1m or 15d, got %r" % (key, config[key]))
    host, dummy, port = str(config["listen"]).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        errors.append("vllm_monitoring_listen must be ADDRESS:PORT (127.0.0.1:9090 keeps it to the head), got %r" % config["listen"])
    try:
        config["node_port"] = int(config["node_port"])
        config["kv_cache_full"] = float(config["kv_cache_full"])
    except (TypeError, ValueError):
        errors.append("vllm_monitoring_node_port must be a port number and vllm_monitoring_kv_cache_full a fraction, got %r and %r"
                      % (config["node_port"], config["kv_cache_full"]))
    else:
        if not 0 < config["node_port"] < 65536:
            errors.append("vllm_monitoring_node_port must be between 1 and 65535, got %r" % config["node_port"])
        if not 0 < config["kv_cache_full"] <= 1:
            errors.append("vllm_monitoring_kv_cache_full is a fraction of the KV cache (0.95), got %r" % config["kv_cache_full"])
    url = str(config["remote_write_url"])
    if url and not re.match(r"^https?://[^/\s]+(/\S*)?$", url):
        errors.append("vllm_monitoring_remote_write_url must be the receiver's http:// or https:// URL (a central Prometheus's "
                      "/api/v1/write), got %r" % url)
    if config["remote_write_token_file"] and not url:
        errors.append("vllm_monitoring_remote_write_token_file is set but vllm_monitoring_remote_write_url is not: set the "
                      "receiver's URL, or leave the token file out")
    folder = str(config["textfile_dir"])
    if folder and (not SAFE_FOLDER.match(folder) or folder != os.path.normpath(folder) or folder == "/"):
        errors.append("vllm_monitoring_textfile_dir must be the absolute folder node_exporter's --collector.textfile.directory names "
                      "on every node, in letters, digits and ._+- (Ubuntu's prometheus-node-exporter: /var/lib/prometheus/node-exporter), "
                      "got %r" % folder)
    elif folder:
        def inside(one, other):
            return one == other or one.startswith(other.rstrip("/") + "/")
        # In a system folder, or holding or held by a reserved one: the supervisor, root, could write there.
        clash = [(other, what) for other, what in [(f, "a system folder") for f in SYSTEM_FOLDERS] + list(reserved)
                 if other and (inside(folder, other) or (what != "a system folder" and inside(other, folder)))]
        if clash:
            errors.append("vllm_monitoring_textfile_dir %r overlaps %s (%s): the supervisor, root, writes there; give node_exporter's "
                          "own textfile folder (Ubuntu's: /var/lib/prometheus/node-exporter)" % ((folder,) + clash[0]))
    return config, errors


def textfile(settings, node):
    """Where ``node``'s supervisor writes the node's figures for a node_exporter (its textfile collector), or None: a
    folder given (vllm_monitoring_textfile_dir), the supervisor running, and the node one of those this deployment
    serves figures for (figures_nodes), whether or not the collection's own Prometheus runs. The file is the
    deployment's, so deployments sharing a node never write each other's."""
    watched = settings.get("monitoring") or {}
    served = watched.get("figures_nodes")
    if not watched.get("textfile_dir") or not settings.get("boot_start", True) or (served is not None and node not in served):
        return None
    return {"path": "%s/dgx_spark_vllm_%s.prom" % (watched["textfile_dir"], settings["cluster_name"]),
            "labels": {"cluster": settings["cluster_name"], "node": node}}


def reserved(settings):
    """The collection's own folders the textfile folder may not overlap: (folder, what it is)."""
    return [(str(settings.get(key) or "").split("{node}", maxsplit=1)[0].rstrip("/"), what)
            for key, what in (("state_dir", "the collection's state folder"), ("models_dir", "the models folder"))]


def check_textfile(name, facts, settings, findings):
    """Refuse, before any change, a node where node_exporter's textfile folder (vllm_monitoring_textfile_dir) is not a
    folder: the supervisor's sandbox takes the folder as it is when it starts, and never makes it."""
    folder = (settings.get("monitoring") or {}).get("textfile_dir")
    found = facts.get("state")
    if folder and found is not None and settings.get("boot_start", True) and found.get(folder) != "dir":
        findings.error(name, folder, "%s: vllm_monitoring_textfile_dir %s is not a folder there; install node_exporter with its textfile "
                       "collector (Ubuntu: apt install prometheus-node-exporter makes /var/lib/prometheus/node-exporter), or give the "
                       "folder it reads" % (name, folder))


def nodes_served(settings):
    """Whether each node serves its figures: monitoring on, and the supervisor that serves them running
    (vllm_boot_start). The planner, the firewall and the supervisor's plan all ask this."""
    watched = settings.get("monitoring") or {}
    return bool(watched.get("enabled")) and bool(settings.get("boot_start", True))


def serves_figures(settings, node):
    """Whether ``node``'s supervisor of this deployment serves the node's figures: monitoring on, the supervisor running,
    and the node one of those this deployment serves (``figures_nodes``, set by the planner: on a node that deployments
    share, only the first deployment placed there serves them, so none is scraped twice; unset, every node of it)."""
    watched = settings.get("monitoring") or {}
    served = watched.get("figures_nodes")
    return nodes_served(settings) and (served is None or node in served)


def key_file(deployment):
    """Where Prometheus reads a deployment's key (in its configuration folder, mounted read-only)."""
    return "%s/keys/%s" % (CONFIG_MOUNT, deployment)


def scrape_config(config, cluster, targets, nodes):
    """Prometheus's configuration: every deployment's vLLM (its API server through its front door, with its key;
    ``targets``: [{address, deployment}]), every node's figures, the rules file. One job a deployment, as each has its
    own key; each is labelled job="vllm" (the rules and the dashboard ask that) and with its deployment. Every series
    carries the cluster's name as a label (the dashboard's $cluster), and as an external label for a central one."""
    remote = {"url": config["remote_write_url"]}
    if config["remote_write_token_file"]:
        remote["authorization"] = {"type": "Bearer", "credentials_file": key_file(REMOTE_WRITE_KEY)}
    return dict({
        "global": {"scrape_interval": config["scrape_interval"], "evaluation_interval": config["scrape_interval"],
                   "external_labels": {"cluster": cluster}},
        "rule_files": [CONFIG_MOUNT + "/rules.yml"],
        "scrape_configs": [
            {"job_name": "%s-%s" % (JOB_VLLM, t["deployment"]), "metrics_path": "/metrics",
             "authorization": {"type": "Bearer", "credentials_file": key_file(t["deployment"])},
             "static_configs": [{"targets": [t["address"]], "labels": {"deployment": t["deployment"], "cluster": cluster}}],
             "relabel_configs": [{"target_label": "job", "replacement": JOB_VLLM}]} for t in targets
        ] + [
            {"job_name": JOB_NODES, "metrics_path": "/metrics",
             "static_configs": [{"targets": ["%s:%d" % (ip, config["node_port"])], "labels": {"node": name, "cluster": cluster}}
                                for name, ip in nodes]},
        ]}, **({"remote_write": [remote]} if config["remote_write_url"] else {}))


def rules(config, headroom_floor_bytes, unaccounted_limit_bytes):
    """The alert rules: endpoint down, a node's figures missing, KV cache full, MemAvailable under the floor, pinned memory,
    a supervisor that refused to start the model or gave up (it then starts nothing until a playbook or an operator acts)."""
    wait = config["alert_for"]

    def rule(name, expr, summary, fix, severity=None):
        return {"alert": name, "expr": expr, "for": wait, "labels": {"severity": severity or ("critical" if "Down" in name else "warning")},
                "annotations": {"summary": summary, "description": fix}}

    return {"groups": [{"name": "dgx-spark-vllm", "rules": [
        rule("VllmEndpointDown", 'up{job="%s"} == 0' % JOB_VLLM,
             "The vLLM endpoint {{ $labels.instance }} does not answer /metrics",
             "status.yml names what stopped; the supervisor brings vLLM back after a boot, recover.yml after a crash"),
        rule("SparkNodeMetricsDown", 'up{job="%s"} == 0' % JOB_NODES,
             "Node {{ $labels.node }} does not answer: its supervisor or the node is down",
             "status.yml shows the node and its supervisor; a node that rebooted starts it again"),
        rule("VllmKvCacheFull", "vllm:kv_cache_usage_perc >= %s" % config["kv_cache_full"],
             "vLLM's KV cache is {{ $value | humanizePercentage }} full: requests queue and are preempted",
             "lower the concurrency, or plan a larger gpu_memory_utilization or a shorter vllm_max_model_len"),
        rule("SparkMemAvailableLow", "%smemory_available_bytes < %d" % (PREFIX, headroom_floor_bytes),
             "Node {{ $labels.node }} has {{ $value | humanize1024 }}B available, under the headroom floor (%.1f GiB)"
             % (headroom_floor_bytes / GIB),
             "a starved Spark stops answering (fact 21); stop what else runs there, or lower gpu_memory_utilization"),
        rule("SparkPinnedMemory", "%smemory_unaccounted_bytes >= %d" % (PREFIX, unaccounted_limit_bytes),
             "Node {{ $labels.node }} has {{ $value | humanize1024 }}B used that nothing explains: memory pinned by a rank "
             "killed hard",
             "only a reboot frees it (fact 3); reboot the node, the supervisor brings the model back"),
        rule("SparkSupervisorStopped", '%ssupervisor_state{state=~"refused|failed"} == 1' % PREFIX,
             "The supervisor of node {{ $labels.node }} is {{ $labels.state }}: it will not bring the model back by itself",
             "status.yml shows its reason (a missing firewall table, memory still pinned, a start that kept failing); "
             "fix that, then run serve.yml or recover.yml", "critical"),
    ]}]}


def container_name(cluster):
    return "%s-prometheus" % cluster


def plan(config, cluster, folder, targets, nodes, floor, limit, labels, token_digest=None):
    """The monitoring section of the plan: the files on its host (in ``folder``), the container, what verify waits for.
    ``targets`` are the addresses of every deployment's vLLM as Prometheus reaches them; ``nodes`` is [(name,
    fabric_ip)] of the nodes whose figures are served, in the cluster's order; ``floor`` the headroom floor and
    ``limit`` the unaccounted memory above which the planner refuses a node, in bytes; ``labels`` the collection's
    labels of the container (the config hash is added: a changed file or flag recreates the container, which reads its
    files when it starts); ``token_digest`` a digest of the central Prometheus's token (a new one is written again)."""
    if not config["enabled"]:
        return {"enabled": False, "container": {"name": container_name(cluster), "labels": dict(labels)}}
    files = {"prometheus.yml": scrape_config(config, cluster, targets, nodes), "rules.yml": rules(config, floor, limit)}
    container = {"name": container_name(cluster), "image": config["image"], "network_mode": "host",
                 "command": ["--config.file=%s/prometheus.yml" % CONFIG_MOUNT, "--storage.tsdb.path=" + DATA_MOUNT,
                             "--storage.tsdb.retention.time=" + config["retention"], "--web.listen-address=" + config["listen"]],
                 "volumes": ["%s/config:%s:ro" % (folder, CONFIG_MOUNT), "%s/data:%s" % (folder, DATA_MOUNT)],
                 "restart_policy": "unless-stopped", "labels": dict(labels)}
    # A new key is a new file to write: the hash covers each key's digest (never a key).
    container["labels"][container_labels.CONFIG_HASH] = hashlib.sha256(
        json.dumps([files, container, [t.get("key_digest") for t in targets]] + ([token_digest] if token_digest else []),
                   sort_keys=True).encode("utf-8")).hexdigest()[:16]
    url = "http://%s" % config["listen"]
    # Prometheus reads YAML, and JSON is YAML: each file as the plan has it, written as it is.
    writes = [{"path": "%s/config/%s" % (folder, name), "content": json.dumps(content, indent=2, sort_keys=True) + "\n",
               "mode": "0644"} for name, content in sorted(files.items())]
    keys_folder = folder + "/config/keys"
    # Root's, but the data: the image's user (nobody) writes it.
    folders = [{"path": folder, "owner": "0", "mode": "0755"}, {"path": folder + "/config", "owner": "0", "mode": "0755"},
               # root's: another process of Prometheus's user (nobody) could otherwise swap a link in while root writes
               # and chowns a key there; the files themselves are nobody's, 0400
               {"path": keys_folder, "owner": "0", "mode": "0755"},
               {"path": folder + "/data", "owner": str(DATA_UID), "mode": "0700"}]
    # Each deployment's key, read by Prometheus's user alone; the role reads them on the controller (no_log).
    keys = [{"path": "%s/%s" % (keys_folder, t["deployment"]), "owner": str(DATA_UID), "mode": "0400",
             "key_file": t["api_key_file"]} for t in targets]
    if config["remote_write_token_file"]:  # the central receiver's token, as each deployment's key
        keys.append({"path": "%s/%s" % (keys_folder, REMOTE_WRITE_KEY), "owner": str(DATA_UID), "mode": "0400",
                     "key_file": config["remote_write_token_file"]})
    return {"enabled": True, "url": url, "targets_url": url + "/api/v1/targets?state=active", "listen": config["listen"],
            "node_port": config["node_port"], "folder": folder, "keys_folder": keys_folder,
            "files": files, "folders": folders, "writes": writes, "keys": keys, "jobs": {JOB_VLLM: len(targets), JOB_NODES: len(nodes)},
            "container": container}


# The dashboard's panels as data: scripts/make_dashboard.py builds the Grafana dashboard from them (Grafana's typed
# SDK), the integration test evaluates every query through the cluster's Prometheus (``as_evaluated``).
# (title, unit, [(query, legend)]). The queries use the dashboard's variables: $cluster (every series carries its
# cluster's name, a label the scrape configuration sets), $model (vLLM's model_name), $node (the node figures' node),
# and Grafana's $__rate_interval for every rate, so a central Prometheus holding several clusters draws each apart.
VLLM_SELECTOR = 'cluster=~"$cluster", model_name=~"$model"'
NODE_SELECTOR = 'cluster=~"$cluster", node=~"$node"'
DASHBOARD_VARIABLES = (  # (name, label, the query that lists its values: Prometheus's label_values)
    ("cluster", "Cluster", 'label_values(up{job=~"%s|%s"}, cluster)' % (JOB_VLLM, JOB_NODES)),
    ("model", "Model", 'label_values(vllm:num_requests_running{cluster=~"$cluster"}, model_name)'),
    ("node", "Node", 'label_values(%smemory_total_bytes{cluster=~"$cluster"}, node)' % PREFIX),
)


def _quantiles(metric):
    return [("histogram_quantile(%s, sum by (le) (rate(%s{%s}[$__rate_interval])))" % (q, metric, VLLM_SELECTOR), "p%s" % q[2:])
            for q in ("0.50", "0.90", "0.99")]


PANELS = (
    ("Output tokens/s", "short", [("sum(rate(vllm:generation_tokens_total{%s}[$__rate_interval]))" % VLLM_SELECTOR, "generated")]),
    ("Prompt tokens/s", "short", [("sum(rate(vllm:prompt_tokens_total{%s}[$__rate_interval]))" % VLLM_SELECTOR, "prompt")]),
    ("Time to first token", "s", _quantiles("vllm:time_to_first_token_seconds_bucket")),
    ("Inter-token latency", "s", _quantiles("vllm:inter_token_latency_seconds_bucket")),
    ("KV cache usage", "percentunit", [("vllm:kv_cache_usage_perc{%s}" % VLLM_SELECTOR, "{{instance}}")]),
    ("Requests running and queued", "short", [("sum(vllm:num_requests_running{%s})" % VLLM_SELECTOR, "running"),
                                              ("sum(vllm:num_requests_waiting{%s})" % VLLM_SELECTOR, "queued")]),
    ("Requests finished/s", "reqps", [("sum by (finished_reason) (rate(vllm:request_success_total{%s}[$__rate_interval]))" % VLLM_SELECTOR,
                                       "{{finished_reason}}")]),
    ("Endpoint and nodes up", "short", [('up{job="%s", cluster=~"$cluster"}' % JOB_VLLM, "vLLM"),
                                        ('up{job="%s", %s}' % (JOB_NODES, NODE_SELECTOR), "{{node}}")]),
    ("Node memory available", "bytes", [(PREFIX + "memory_available_bytes{%s}" % NODE_SELECTOR, "{{node}}")]),
    ("Pinned memory (used, explained by nothing)", "bytes", [(PREFIX + "memory_unaccounted_bytes{%s}" % NODE_SELECTOR, "{{node}}")]),
    ("Page cache", "bytes", [(PREFIX + "memory_page_cache_bytes{%s}" % NODE_SELECTOR, "{{node}}")]),
)


def as_evaluated(expr, rate_interval="1m", **values):
    """A panel's query as Grafana sends it to Prometheus: its variables replaced (each unset one by ".*", the
    dashboard's "All"), $__rate_interval by ``rate_interval``."""
    expr = expr.replace("$__rate_interval", rate_interval)
    for name, dummy, dummy in DASHBOARD_VARIABLES:
        expr = expr.replace("$" + name, values.get(name, ".*"))
    return expr
