"""The plan is the only source of derived values: no role or playbook builds a port, a container name or a path
that the plan holds. A grep over every task, default, template and playbook; the simulated cluster's own role
(which makes the nodes the plan is made for) and the image build's Dockerfile are not plan values."""

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What a role would write if it recomputed the plan: the ports, the names of the containers, the state folders.
RECOMPUTED = {
    "port": re.compile(r"(?<![\d.])(6379|8000|29501|8730)(?![\d.])"),
    "container name": re.compile(r"-(ray|vllm|model-fetch)-|-model-fetch\b|'dgx-spark'"),
    "path": re.compile(r"(state_dir|models_dir)\s*(~|\}\}/)|(\}\}|~\s*['\"])/(run|logs|secrets|bin|config|models)\b"
                       r"|replace\('\{node\}'|[\s'\"=]/dgx-spark/|\.artifacts/"),
}
SOURCES = ("roles/sim_cluster/", "roles/image/templates/")


def files():
    found = []
    for pattern in ("roles/**/*.yml", "roles/**/*.j2", "playbooks/*.yml"):
        found += [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)]
    return sorted(p for p in found if not p.startswith(SOURCES) and "/meta/" not in p)


def offending(path):
    hits = []
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            code = line.split(" #", 1)[0]
            if code.lstrip().startswith(("#", "- name:", "name:")):  # comments and task names say what, they build nothing
                continue
            for what, pattern in RECOMPUTED.items():
                if pattern.search(code):
                    hits.append("%s:%d: %s built here, not taken from the plan: %s" % (path, number, what, line.strip()))
    return hits


def test_the_scan_sees_what_it_looks_for():
    assert RECOMPUTED["port"].search("argv: [ss, --port, 8000]")
    assert RECOMPUTED["container name"].search("name: \"{{ cluster }}-ray-{{ inventory_hostname }}\"")
    assert RECOMPUTED["path"].search("dest: \"{{ node.state_dir }}/run/baseline.json\"")
    assert RECOMPUTED["path"].search("key_file=/dgx-spark/secrets/vllm_api_key")
    assert not RECOMPUTED["path"].search("dest: \"{{ node.paths.baseline_file }}\"")
    assert not RECOMPUTED["path"].search("executable: /bin/bash")


@pytest.mark.parametrize("path", files())
def test_no_role_recomputes_a_value_of_the_plan(path):
    assert offending(path) == []


def test_the_documented_defaults_are_the_planners():
    """One set of defaults: preflight passes null for what the inventory leaves unset, the planner fills it in; the
    argument specs (and the AWX surveys made from them) document the same values."""
    import yaml

    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import DEFAULT_SETTINGS

    with open(os.path.join(ROOT, "roles", "preflight", "defaults", "main.yml"), encoding="utf-8") as handle:
        settings = yaml.safe_load(handle)["preflight_inventory_settings"]
    with open(os.path.join(ROOT, "roles", "preflight", "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    checked = 0
    for key, template in settings.items():
        match = re.match(r"\{\{ (\w+) \| default\(none\) \}\}$", str(template))
        if not match:
            continue
        assert key in DEFAULT_SETTINGS, key
        documented = (options.get(match.group(1)) or {}).get("default")
        if documented is not None:
            assert documented == DEFAULT_SETTINGS[key], "%s: documented %r, the planner uses %r" % (match.group(1), documented, DEFAULT_SETTINGS[key])
            checked += 1
    assert checked >= 5
