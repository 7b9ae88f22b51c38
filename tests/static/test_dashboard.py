"""The Grafana dashboard that ships is what Grafana's typed SDK builds from monitoring.PANELS, and imports into a
Grafana that is not ours: a datasource input, every panel's datasource a variable, every variable its queries use
declared, $__rate_interval in every rate."""

import importlib.util
import json
import os
import re
import subprocess

import yaml

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import monitoring

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRAFANA = os.path.join(ROOT, "roles", "monitoring", "files", "grafana")
SCHEMA = os.path.join(ROOT, "tests", "static", "grafana-schema")  # Grafana's published types, installed by make setup


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
    queries = [[t["expr"] for t in p["targets"]] for p in board["panels"]]  # the panels' queries, as the plan names them
    assert queries == [[q for q, dummy in panel[2]] for panel in monitoring.PANELS]
    titles = " ".join(p["title"] for p in board["panels"])
    for wanted in ("tokens/s", "Time to first token", "Inter-token", "KV cache", "queued", "memory"):
        assert wanted in titles


def test_it_imports_into_any_grafana_with_a_datasource_input_and_variables():
    with open(os.path.join(GRAFANA, "dashboards", "dgx-spark-vllm.json"), encoding="utf-8") as handle:
        board = json.load(handle)
    # Grafana's import asks for each __inputs entry, then puts the answer where ${DS_PROMETHEUS} stands
    assert [(i["name"], i["type"], i["pluginId"]) for i in board["__inputs"]] == [("DS_PROMETHEUS", "datasource", "prometheus")]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["datasource"]["current"]["value"] == "${DS_PROMETHEUS}"
    assert set(variables) == {"datasource", "cluster", "model", "node"}
    for name in ("cluster", "model", "node"):
        assert variables[name]["type"] == "query" and variables[name]["datasource"]["uid"] == "${datasource}", name
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*", name
    # no uid of ours anywhere: every panel reads the datasource variable
    assert {json.dumps(p["datasource"], sort_keys=True) for p in board["panels"]} == {'{"type": "prometheus", "uid": "${datasource}"}'}
    assert "dgx-spark-prometheus" not in json.dumps(board)
    queries = [t["expr"] for p in board["panels"] for t in p["targets"]] + [v["query"] for v in variables.values() if v["type"] == "query"]
    for query in queries:
        used = set(re.findall(r"\$(\w+)", query)) - {"__rate_interval"}
        assert used <= set(variables), (query, used)  # every variable a query uses is declared
        assert re.findall(r"\[([^\]]+)\]", query) in ([], ["$__rate_interval"]), query  # no fixed window
        assert "rate(" not in query or "[$__rate_interval]" in query, query
    for panel in board["panels"]:  # each panel filters by the cluster and by the model or the node
        for target in panel["targets"]:
            assert 'cluster=~"$cluster"' in target["expr"], target["expr"]
            assert 'model_name=~"$model"' in target["expr"] or 'node=~"$node"' in target["expr"] or 'job="vllm"' in target["expr"], target["expr"]


def test_a_panels_query_as_grafana_sends_it_names_no_variable():
    for dummy, dummy, queries in monitoring.PANELS:
        for expr, dummy in queries:
            sent = monitoring.as_evaluated(expr, node="spark1")
            assert "$" not in sent and "[1m]" in sent or "rate(" not in sent, sent
            assert 'node=~"$node"' not in expr or 'node=~"spark1"' in sent, sent


def test_the_provisioned_datasource_is_a_prometheus():
    with open(os.path.join(GRAFANA, "provisioning", "datasources", "dgx-spark-vllm.yml"), encoding="utf-8") as handle:
        provisioned = yaml.safe_load(handle)["datasources"][0]
    assert provisioned["type"] == "prometheus"


def type_errors(board, folder):
    """What TypeScript says of ``board`` (its import inputs aside, which Grafana's import consumes) as Grafana's own
    Dashboard type, from the @grafana/schema package Grafana publishes (generated from its dashboard schema). Object
    literals are checked strictly: a key the schema does not know is an error, as a wrong type or a null is."""
    source = os.path.join(folder, "board.ts")
    with open(source, "w", encoding="utf-8") as handle:
        handle.write('import type { Dashboard } from "%s";\nconst board: Dashboard = %s;\nexport default board;\n'
                     % (os.path.join(SCHEMA, "node_modules", "@grafana", "schema", "dist", "types", "raw", "dashboard", "x", "types.gen"),
                        json.dumps({k: v for k, v in board.items() if not k.startswith("__")}, indent=1)))
    compiler = os.path.join(SCHEMA, "node_modules", ".bin", "tsc")
    assert os.path.exists(compiler), "Grafana's dashboard types are missing from %s: run make setup" % SCHEMA
    done = subprocess.run([compiler, "--noEmit", "--strict", "--skipLibCheck", source], capture_output=True, text=True, check=False,
                          cwd=folder)
    return done.stdout + done.stderr


def test_the_dashboard_is_a_dashboard_by_the_schema_grafana_publishes(tmp_path):
    with open(os.path.join(GRAFANA, "dashboards", "dgx-spark-vllm.json"), encoding="utf-8") as handle:
        board = json.load(handle)
    assert type_errors(board, str(tmp_path)) == ""
    # The same check refuses what Grafana's schema does not know, and a wrong type.
    wrong = json.loads(json.dumps(board))
    wrong["panels"][0]["datasourceUid"] = "dgx-spark-prometheus"
    assert "'\"datasourceUid\"' does not exist in type 'Panel'" in type_errors(wrong, str(tmp_path))
    wrong = json.loads(json.dumps(board))
    wrong["refresh"] = 30
    assert "error TS2322" in type_errors(wrong, str(tmp_path))
