# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the Grafana dashboard from the panels module_utils/plan/monitoring.py names, with Grafana's own typed SDK
(grafana-foundation-sdk, in requirements-dev.txt), so the JSON that ships is a dashboard Grafana's schema accepts.

Usage: scripts/make_dashboard.py [OUT]   (default roles/monitoring/files/grafana/dashboards/dgx-spark-vllm.json;
tests/static/test_dashboard.py fails when the shipped file is not what this builds)
"""

import os
import sys

from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "roles", "monitoring", "files", "grafana", "dashboards", "dgx-spark-vllm.json")
DATASOURCE_UID = "dgx-spark-prometheus"  # the provisioned datasource's uid (files/grafana/provisioning)


def monitoring_module():
    sys.path.insert(0, os.path.join(ROOT, ".collections"))  # the checkout as the collection (ansible.cfg)
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import monitoring  # noqa: E402
    return monitoring


def build():
    panels = monitoring_module().PANELS
    source = DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)
    board = (dashboard.Dashboard("DGX Spark vLLM").uid("dgx-spark-vllm").tags(["dgx-spark", "vllm"])
             .description("dgx_spark.vllm: the endpoint's throughput, latency, KV cache and queue, and each node's unified memory")
             .refresh("30s").time("now-1h", "now"))
    for title, unit, queries in panels:
        panel = timeseries.Panel().title(title).unit(unit).datasource(source).height(8).span(12)
        for index, (expr, legend) in enumerate(queries):
            panel = panel.with_target(prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + index)))
        board = board.with_panel(panel)
    return JSONEncoder(sort_keys=True, indent=2).encode(board.build()) + "\n"


def main(argv):
    out = argv[0] if argv else OUT
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(build())
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
