"""Every inventory variable is in a role's argument spec, typed, and docs/inventory.md is those specs
(scripts/inventory_doc.py); every value the shipped inventories and the profiles' restores give passes its spec, as
Ansible checks it when the role starts."""

import glob
import importlib.util
import os
import re

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from runner import ROOT

SKIPPED = ("roles/sim_cluster/",)
# Names the collection reads with a default that are no inventory variable's: the simulated cluster's own switches
# (playbooks/sim.yml, docs/simulated-cluster.md) and what plays define for the plays after them.
PREFIXES = ("vllm_", "spark_", "dgx_spark_", "image_", "preflight_", "model_")


def script():
    spec = importlib.util.spec_from_file_location("inventory_doc", os.path.join(ROOT, "scripts", "inventory_doc.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DOC = script()


def options():
    """{variable: [(role, entry point, spec)]} over every argument spec."""
    found = {}
    for role, entries in DOC.specs().items():
        for entry, opts in entries.items():
            for name, spec in opts.items():
                found.setdefault(name, []).append((role, entry, spec))
    return found


def test_docs_inventory_md_is_what_the_specs_say():
    with open(DOC.DOC, encoding="utf-8") as handle:
        current = handle.read()
    assert DOC.render(current) == current, (
        "docs/inventory.md differs from the roles' argument specs: run `make docs` (python scripts/inventory_doc.py) and commit it")


def test_each_variable_is_documented_once_and_typed_alike_in_every_spec():
    with open(DOC.DOC, encoding="utf-8") as handle:
        rows = re.findall(r"^\|(?: [a-z_]+ \|)? `([a-z][a-z0-9_]*)` \|", handle.read(), re.M)
    assert len(rows) == len(set(rows)), sorted(n for n in rows if rows.count(n) > 1)
    for name, places in options().items():
        assert name in rows, name
        first = places[0][2]
        for role, entry, spec in places:
            assert spec.get("description"), "%s (roles/%s, entry point %s) has no description" % (name, role, entry)
            for key in ("type", "elements", "default", "choices", "no_log"):
                assert spec.get(key) == first.get(key), "%s: %s differs between roles/%s (%s) and roles/%s (%s)" % (
                    name, key, places[0][0], places[0][1], role, entry)


def read_with_default():
    """The inventory variables the collection reads: what a role or playbook reads with ``| default(...)`` and nothing
    defines (role defaults, play vars, registers, facts), and what the planner reads from each host's variables."""
    from test_plan_values import walk_definitions

    read, defined = set(), set()
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "*", "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "*.yml")) \
            + glob.glob(os.path.join(ROOT, "playbooks", "tasks", "*.yml")) + glob.glob(os.path.join(ROOT, "roles", "*", "templates", "*.j2")):
        if os.path.relpath(path, ROOT).startswith(SKIPPED) or "/meta/" in path:
            continue
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        read.update(re.findall(r"\b([a-z][a-z0-9_]*)\s*\|\s*default\(", text))
        if "/defaults/" in path:
            defined.update(re.findall(r"^([a-z][a-z0-9_]*):", text, re.M))
        if path.endswith(".yml"):
            walk_definitions(DOC.load(path), defined)
    read.update(DOC.per_host())
    return {n for n in read - defined if n.startswith(PREFIXES)}


def test_every_inventory_variable_the_collection_reads_is_in_an_argument_spec():
    read = read_with_default()
    assert {"vllm_bind_address", "vllm_firewall", "vllm_boot_start", "vllm_canary", "spark_fabric_ip", "spark_fabric_interfaces",
            "spark_container_gpus", "spark_probe_proc_root", "image_ssh_user"} <= read
    missing = sorted(read - set(options()))
    assert not missing, "read by the collection and in no roles/*/meta/argument_specs.yml: %s" % ", ".join(missing)


def test_every_preflight_setting_is_specced_where_the_paths_step_reads_it():
    settings = re.findall(r"\{\{ (\w+) \| default\(none\) \}\}",
                          str(DOC.load(os.path.join(ROOT, "roles", "preflight", "defaults", "main.yml"))["preflight_settings"]))
    assert "vllm_bind_address" in settings
    specs = DOC.specs()["preflight"]
    for entry in ("inventory", "probe", "plan", "paths"):
        assert set(settings) <= set(specs[entry]), (entry, sorted(set(settings) - set(specs[entry])))


def shipped_values():
    """(where, {variable: value}) of every inventory's group and host variables, and every profile deviation's restore."""
    for folder in sorted(glob.glob(os.path.join(ROOT, "inventories", "*"))):
        name = os.path.basename(folder)
        group = {}
        for path in sorted(glob.glob(os.path.join(folder, "group_vars", "*", "*.yml"))):
            group.update(DOC.load(path) or {})
        yield name + " group_vars", group

        def hosts(node):
            if isinstance(node, dict):
                for host, values in (node.get("hosts") or {}).items():
                    yield host, values or {}
                for child in (node.get("children") or {}).values():
                    yield from hosts(child)
                group.update(node.get("vars") or {})

        for top in (DOC.load(os.path.join(folder, "hosts.yml")) or {}).values():
            for host, values in hosts(top):
                yield "%s host %s" % (name, host), dict(group, **values)
    for path in sorted(glob.glob(os.path.join(ROOT, "profiles", "*.yml"))):
        for deviation in (DOC.load(path) or {}).get("deviations") or []:
            yield os.path.basename(path) + " restore", deviation.get("restore") or {}


@pytest.mark.parametrize("where,values", list(shipped_values()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_shipped_value_passes_its_spec(where, values):
    checked = 0
    for role, entries in DOC.specs().items():
        for entry, opts in entries.items():
            given = {k: v for k, v in values.items() if k in opts}
            if not given:
                continue
            result = ArgumentSpecValidator(opts).validate(given)
            assert not result.error_messages, "%s against roles/%s entry point %s: %s" % (where, role, entry, result.error_messages)
            checked += 1
    assert checked or not values, "%s: none of %s is in a spec" % (where, sorted(values))


# Role defaults that are no one's choice: what upgrade.yml and recover.yml set for the preflight role (the deployment
# to restore, one deployment at a time) and plan.yml's plan.json written whatever the plan.
SET_BY_PLAYBOOKS = ("preflight_restore", "preflight_one", "preflight_plan_always_written")


def test_every_role_default_a_person_may_set_is_in_the_roles_spec():
    """A default that is a value (not derived from the plan or another variable) is a choice: its role's spec lists it."""
    every = DOC.specs()
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "defaults", "main.yml"))):
        role = path.split(os.sep)[-3]
        if os.path.relpath(path, ROOT).startswith(SKIPPED):
            continue
        listed = {name for entry in every.get(role, {}).values() for name in entry}
        for name, value in (DOC.load(path) or {}).items():
            if "{{" in str(value) or name in SET_BY_PLAYBOOKS:
                continue
            assert name in listed, "roles/%s/defaults/main.yml: %s is in no entry point of roles/%s/meta/argument_specs.yml" % (role, name, role)
