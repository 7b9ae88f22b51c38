"""The Grafana dashboard that ships is what Grafana's typed SDK builds from monitoring.PANELS, and names the
provisioned datasource."""

import importlib.util
import json
import os

import yaml

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import monitoring

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRAFANA = os.path.join(ROOT, "roles", "monitoring", "files", "grafana")


def load_script():
    spec = importlib.util.spec_from_file_location("make_dashboard", os.path.join(ROOT, "scripts", "make_dashboard.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_dashboard_is_what_the_sdk_builds_from_the_panels():
    with open(os.path.join(GRAFANA, "dashboards", "dgx-spark-vllm.json"), encoding="utf-8") as handle:
        shipped = handle.read()
    assert shipped == load_script().build(), "run scripts/make_dashboard.py and commit the dashboard"
    board = json.loads(shipped)
    queries = [[t["expr"] for t in p["targets"]] for p in board["panels"]]
    assert queries == [[q for q, dummy in panel[2]] for panel in monitoring.PANELS]
    titles = " ".join(p["title"] for p in board["panels"])
    for wanted in ("tokens/s", "Time to first token", "Inter-token", "KV cache", "queued", "memory"):
        assert wanted in titles


def test_every_panel_reads_the_provisioned_datasource():
    with open(os.path.join(GRAFANA, "provisioning", "datasources", "dgx-spark-vllm.yml"), encoding="utf-8") as handle:
        provisioned = yaml.safe_load(handle)["datasources"][0]
    with open(os.path.join(GRAFANA, "dashboards", "dgx-spark-vllm.json"), encoding="utf-8") as handle:
        board = json.load(handle)
    assert {p["datasource"]["uid"] for p in board["panels"]} == {provisioned["uid"]}
    assert provisioned["type"] == "prometheus"
