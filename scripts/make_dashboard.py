# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the Grafana dashboard from the panels module_utils/plan/monitoring.py names, with Grafana's own typed SDK
(grafana-foundation-sdk, in requirements-dev.txt), so the JSON that ships is a dashboard Grafana's schema accepts.

It imports into any Grafana as vLLM's own dashboards do: a datasource input (``__inputs``: DS_PROMETHEUS, which
Grafana's import asks for) that the ``datasource`` variable starts from, every panel and variable reading
``${datasource}``; variables for the cluster, the model and the node (monitoring.DASHBOARD_VARIABLES), and
$__rate_interval in every rate. The provisioned copy (files/grafana/provisioning) picks the datasource by type.

Usage: scripts/make_dashboard.py [OUT]   (default roles/monitoring/files/grafana/dashboards/dgx-spark-vllm.json;
tests/static/test_dashboard.py fails when the shipped file is not what this builds)
"""

import json
import os
import sys

from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableOption, VariableRefresh, VariableSort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "roles", "monitoring", "files", "grafana", "dashboards", "dgx-spark-vllm.json")
INPUT = "DS_PROMETHEUS"  # the datasource input Grafana's import asks for
# What Grafana's import asks, as vLLM's exported dashboards declare it
INPUTS = [{"name": INPUT, "label": "Prometheus", "description": "The Prometheus that scrapes the cluster (its own on the head, or a central one)",
           "type": "datasource", "pluginId": "prometheus", "pluginName": "Prometheus"}]


def monitoring_module():
    sys.path.insert(0, os.path.join(ROOT, ".collections"))  # the checkout as the collection (ansible.cfg)
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import monitoring  # noqa: E402
    return monitoring


def build():
    monitoring = monitoring_module()
    source = DataSourceRef(type_val="prometheus", uid="${datasource}")
    board = (dashboard.Dashboard("DGX Spark vLLM").uid("dgx-spark-vllm").tags(["dgx-spark", "vllm"])
             .description("dgx_spark.vllm: the endpoint's throughput, latency, KV cache and queue, and each node's unified memory")
             .refresh("30s").time("now-1h", "now")
             .with_variable(dashboard.DatasourceVariable("datasource").label("Datasource").type("prometheus")
                            .current(VariableOption(text=INPUT, value="${%s}" % INPUT))))
    for name, label, query in monitoring.DASHBOARD_VARIABLES:
        board = board.with_variable(dashboard.QueryVariable(name).label(label).query(query).datasource(source)
                                    .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
                                    .multi(True).include_all(True).all_value(".*")
                                    .current(VariableOption(text="All", value="$__all")))
    for title, unit, queries in monitoring.PANELS:
        panel = timeseries.Panel().title(title).unit(unit).datasource(source).height(8).span(12)
        for index, (expr, legend) in enumerate(queries):
            panel = panel.with_target(prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + index)))
        board = board.with_panel(panel)
    built = json.loads(JSONEncoder().encode(board.build()))
    built["__inputs"] = INPUTS
    for variable in built["templating"]["list"]:
        variable.pop("id", None)  # the SDK gives every variable the same zero id; Grafana names them by name
        for key in ("auto", "auto_count", "auto_min"):  # an interval variable's; Grafana's schema has none of them here
            variable.pop(key, None)
    built.pop("style", None)  # the theme Grafana dropped from its dashboards (the user's preference now)
    for panel in built["panels"]:  # the SDK writes options it was given none of as null, which Grafana's schema refuses
        for key in [k for k, v in panel.items() if v is None]:
            del panel[key]
    return json.dumps(built, sort_keys=True, indent=2) + "\n"


def main(argv):
    out = argv[0] if argv else OUT
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(build())
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
