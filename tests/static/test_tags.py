"""The tags of docs/operations.md ("Tags") are the playbooks' tags: every tagged run opens with the plan (tagged
always), and a tag on a role's include reaches the role's tasks (``apply``)."""

import glob
import os
import re

from runner import ROOT
from test_inventory_doc import DOC

ROLE_INCLUDES = ("ansible.builtin.include_role", "include_role")
# Roles a tag does not name: the opening's (always, by its plays), the host guard and the playbooks of their own.
UNTAGGED_ROLES = ("preflight", "host_guard", "teardown", "bench", "sim_cluster")


def documented():
    with open(os.path.join(ROOT, "docs", "operations.md"), encoding="utf-8") as handle:
        section = handle.read().split("\n## Tags\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z]+)` \|", section, re.M)


def as_list(tags):
    return [tags] if isinstance(tags, str) else list(tags or [])


def tasks(node):
    """Every task and play (a dict with a name) of a YAML document, blocks and their rescues included."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from tasks(value)
    elif isinstance(node, list):
        for value in node:
            yield from tasks(value)


def playbook_files():
    return sorted(glob.glob(os.path.join(ROOT, "playbooks", "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "tasks", "*.yml")))


def test_the_documented_tags_are_the_playbooks_tags():
    found = set()
    for path in playbook_files():
        for task in tasks(DOC.load(path)):
            found.update(as_list(task.get("tags")))
            for key in ROLE_INCLUDES + ("ansible.builtin.include_tasks",):
                if isinstance(task.get(key), dict):
                    found.update(as_list((task[key].get("apply") or {}).get("tags")))
    assert documented() == ["image", "fabric", "model", "ray", "serve", "verify", "monitoring"]
    assert found - {"always"} == set(documented()), "tags in playbooks/ and docs/operations.md's Tags table differ"


def test_every_tagged_run_checks_probes_and_plans_first():
    for name in ("probe_plan.yml", "opening.yml"):
        plays = DOC.load(os.path.join(ROOT, "playbooks", name))
        assert plays and all(as_list(p.get("tags")) == ["always"] for p in plays), name
    serve = DOC.load(os.path.join(ROOT, "playbooks", "serve.yml"))
    took = [t for t in tasks(serve) if t.get("name") == "Take the plan"]
    assert len(took) == 1 and as_list(took[0].get("tags")) == ["always"]


def test_a_tag_on_a_role_include_reaches_the_roles_tasks():
    """In the playbooks the Tags section names (serve.yml, model.yml, fabric.yml and the task files they include)."""
    files = sorted({f for name in ("serve.yml", "model.yml", "fabric.yml") for f in DOC.walk_playbook(name)[1]})
    assert "playbooks/tasks/change.yml" in files
    for path in (os.path.join(ROOT, f) for f in files):
        for task in tasks(DOC.load(path)):
            args = next((task[k] for k in ROLE_INCLUDES if isinstance(task.get(k), dict)), None)
            if args is None or args["name"].split(".")[-1] in UNTAGGED_ROLES:
                continue
            where = "%s: %s" % (os.path.relpath(path, ROOT), task.get("name"))
            assert as_list(task.get("tags")), "%s: an include of a role no tag names" % where
            assert as_list((args.get("apply") or {}).get("tags")) == as_list(task["tags"]), (
                "%s: its tags must be applied to the role's tasks too (include_role: apply: tags:)" % where)
