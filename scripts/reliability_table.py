# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write docs/reliability.md from the rows the integration tests recorded (tests/output/reliability.jsonl).

Usage: scripts/reliability_table.py [ROWS] [OUT]     (make reliability, after make test or a test run)
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAD = """# Reliability

Every row is written by a test that injected the fault or trap on the simulated cluster and checked what the
collection did (`tests/integration/test_faults.py`; the traps are made by `sim.yml -e '{"sim_traps": ...}'`, see
[simulated-cluster.md](simulated-cluster.md)). Recovery is the time from the injection to a served completion, on the
2-core machine the tests run on; a dash means the collection refuses before any change and names the fix, and no
recovery was timed. Regenerate with `make reliability` after the tests.

| kind | fault or trap | what the collection does | recovery |
|---|---|---|---|
"""


LOAD_HEAD = """
## Under load

While the run in the first column ran, a load generator (`tests/integration/load.py`) kept 8 concurrent streams of
chat completions on the endpoint, half of them streaming, bounded in count and time. Outage is the longest time
between two answers.

| during | requests | streamed | failed | per second | outage |
|---|---|---|---|---|---|
"""


def main(argv):
    rows_path = argv[1] if len(argv) > 1 else os.path.join(ROOT, "tests", "output", "reliability.jsonl")
    out = argv[2] if len(argv) > 2 else os.path.join(ROOT, "docs", "reliability.md")
    rows = {}
    with open(rows_path, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            rows[(row["kind"], row["name"])] = row  # the last run of a test wins
    lines = [HEAD]
    for key in sorted(rows):
        row = rows[key]
        seconds = "-" if row["seconds"] is None else "%.0f s" % row["seconds"]
        lines.append("| %s | %s | %s | %s |\n" % (row["kind"], row["name"], row["does"].replace("|", "\\|"), seconds))
    loaded = [rows[k] for k in sorted(rows) if rows[k].get("load")]
    if loaded:
        lines.append(LOAD_HEAD)
        for row in loaded:
            load = row["load"]
            lines.append("| %s | %d | %d | %d | %.1f | %.1f s |\n"
                         % (row["name"], load["requests"], load["streaming"], load["failed"], load["per_second"], load["outage_s"]))
    with open(out, "w", encoding="utf-8") as handle:
        handle.writelines(lines)
    print("%s: %d rows" % (out, len(rows)))


if __name__ == "__main__":
    main(sys.argv)
