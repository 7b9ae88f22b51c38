"""The collection as users get it: usable by FQCN from the checkout (the built, installed tarball:
test_release_tarball.py)."""

import glob
import json
import os

import yaml

from runner import ROOT, run


def modules():
    return sorted(os.path.splitext(os.path.basename(p))[0]
                  for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))


def test_every_module_is_in_the_action_group():
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as handle:
        runtime = yaml.safe_load(handle)
    assert sorted(runtime["action_groups"]["vllm"]) == modules()


def test_the_lowest_ansible_core_claimed_is_the_one_tested():
    """meta/runtime.yml claims no release older than the ansible-core the tests run (ansible-core 2.17 and 2.18 render
    None as 'None' where the roles test for none: docs/release.md)."""
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as handle:
        claimed = yaml.safe_load(handle)["requires_ansible"]
    with open(os.path.join(ROOT, "requirements-dev.txt"), encoding="utf-8") as handle:
        tested = [line.split("==")[1].split()[0] for line in handle if line.startswith("ansible-core==")][0]
    assert claimed == ">=%s.0" % ".".join(tested.split(".")[:2])


def test_checkout_resolves_fqcn_without_install():
    rc, out = run("fqcn-checkout", ["ansible-doc", "--json", "dgx_spark.vllm.unified_memory_info"])
    doc = json.loads(out)["dgx_spark.vllm.unified_memory_info"]["doc"]
    assert doc["filename"].startswith(ROOT)
    rc, out = run("fqcn-run", ["ansible", "localhost", "-m", "dgx_spark.vllm.unified_memory_info"])
    assert "mem_total_bytes" in out


def test_every_trap_of_the_simulation_is_documented_and_tested():
    """sim_cluster's traps (defaults) are each described in docs/simulated-cluster.md and injected by a test."""
    with open(os.path.join(ROOT, "roles", "sim_cluster", "defaults", "main.yml"), encoding="utf-8") as handle:
        traps = yaml.safe_load(handle)["sim_cluster_trap_names"]
    with open(os.path.join(ROOT, "docs", "simulated-cluster.md"), encoding="utf-8") as handle:
        doc = handle.read()
    tests = ""
    for name in ("test_faults.py", "test_sim_ring.py"):
        with open(os.path.join(ROOT, "tests", "integration", name), encoding="utf-8") as handle:
            tests += handle.read()
    assert len(traps) >= 8
    assert [t for t in traps if "| `%s:" % t not in doc] == []
    assert [t for t in traps if '"%s"' % t not in tests] == []


def test_no_two_test_files_share_a_name():
    """pytest imports test files by their basename (no packages under tests/): two files of one name stop `make test`
    at collection, though each layer alone collects fine."""
    seen = {}
    for folder, dummy, files in os.walk(os.path.join(ROOT, "tests")):
        if "output" in folder.split(os.sep):
            continue
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                seen.setdefault(name, []).append(os.path.relpath(os.path.join(folder, name), ROOT))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_ansible_doc_shows_every_filter_the_plugins_export():
    """Each name a FilterModule of plugins/filter/ exports, shown by ansible-doc from the checkout with its description,
    an example and what it returns (plugins/filter/<name>.yml beside the file that registers it)."""
    from ansible_collections.dgx_spark.vllm.plugins.filter import bench, door, gateway, host_guard, model, records, ring, serve, state, verify

    names = sorted(n for f in (bench, door, gateway, host_guard, model, records, ring, serve, state, verify) for n in f.FilterModule().filters())
    exported = {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(ROOT, "plugins", "filter", "*.py"))}
    assert exported == {"bench", "door", "gateway", "host_guard", "model", "records", "ring", "serve", "state", "verify"}, "a filter file to add above"
    rc, out = run("doc-filters", ["ansible-doc", "-t", "filter", "--json"] + ["dgx_spark.vllm." + n for n in names])
    shown = json.loads(out)
    for name in names:
        entry = shown.get("dgx_spark.vllm." + name) or {}
        doc = entry.get("doc") or {}
        assert doc.get("description") and doc.get("version_added") == "1.0.0", "ansible-doc -t filter dgx_spark.vllm.%s: no documentation" % name
        assert entry.get("examples") and "_value" in (entry.get("return") or {}), name
