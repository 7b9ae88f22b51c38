"""docs/inventory.md's tables, from the roles' argument specs.

Every variable a role takes is in its meta/argument_specs.yml, typed, with its default and why it exists; Ansible checks
the types when the role starts. This script writes those specs as the tables of docs/inventory.md (between its
markers; the prose around them is written by hand), each variable once, with the playbooks that read it: those that run
an entry point whose spec lists it and whose files (the playbook's, the task files it includes, the role's) name it.
``python scripts/inventory_doc.py`` (``make docs``) rewrites the tables; tests/static/test_inventory_doc.py fails when
the committed document differs.
"""

import glob
import json
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "inventory.md")
BEGIN, END = "<!-- variable tables: begin (scripts/inventory_doc.py writes this part) -->", "<!-- variable tables: end -->"
# The roles in the order a run meets them; a variable several specs list is shown with the first. The simulated
# cluster's role makes the nodes, it is not part of the collection.
ROLES = ("preflight", "host_guard", "fabric", "image", "model", "ray_cluster", "vllm_serve", "gateway", "monitoring", "bench",
         "teardown")
# The openings other playbooks import; they are not run alone.
OPENINGS = ("opening.yml", "probe_plan.yml")
# The planner reads these from each host's variables (plugins/action/vllm_cluster_plan.py): the per-host table.
PLANNER = os.path.join(ROOT, "plugins", "action", "vllm_cluster_plan.py")
OPENED, PLANNING = "every playbook", "every playbook that plans"


class Loader(yaml.SafeLoader):
    """YAML with Ansible's !unsafe tag (AWX injector templates)."""


Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=Loader)  # noqa: S506 - a SafeLoader subclass


def walk_playbook(playbook, folder="playbooks", found=None, files=None):
    """(role, entry point) for every role a playbook runs (roles: lists, include_role and import_role, also in the
    playbooks and task files it imports or includes: a task file's own includes are relative to its folder), and the
    files it reads, relative to ROOT."""
    found = [] if found is None else found
    files = [] if files is None else files
    path = os.path.normpath(os.path.join(folder, playbook))
    files.append(path)
    here = os.path.dirname(path)

    def walk(node):
        if isinstance(node, dict):
            for key in ("ansible.builtin.import_playbook", "import_playbook", "ansible.builtin.import_tasks", "import_tasks",
                        "ansible.builtin.include_tasks", "include_tasks"):
                target = node.get(key)
                target = target.get("file") if isinstance(target, dict) else target
                if target and "{{" not in str(target):
                    walk_playbook(os.path.basename(target), os.path.join(here, os.path.dirname(target)), found, files)
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
                if key in node:
                    args = node[key]
                    # Ansible names the entry point exactly as tasks_from says ('inventory.yml' would validate nothing).
                    found.append((args["name"].split(".")[-1], args.get("tasks_from", "main")))
            for role in node.get("roles") or []:
                found.append(((role if isinstance(role, str) else role["role"]).split(".")[-1], "main"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(load(os.path.join(ROOT, path)))
    return found, files


def role_entry_points(playbook, folder="playbooks"):
    return walk_playbook(playbook, folder)[0]


def specs():
    """{role: {entry point: {option: spec}}} of every role that has an argument spec."""
    found = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml"))):
        role = path.split(os.sep)[-3]
        found[role] = {entry: spec.get("options") or {} for entry, spec in (load(path)["argument_specs"] or {}).items()}
    return found


def playbooks_reading():
    """{variable: [playbook, ...]}: the playbooks an operator runs that read it; under the keys OPENED and PLANNING, those
    that open with the preflight role and those that plan."""
    every = specs()
    reading = {OPENED: set(), PLANNING: set()}
    for path in sorted(glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))):
        name = os.path.basename(path)
        if name in OPENINGS:
            continue
        entries, files = walk_playbook(name)
        texts = []
        for role in {r for r, e in entries}:
            files += [os.path.relpath(f, ROOT) for f in glob.glob(os.path.join(ROOT, "roles", role, "tasks", "*.yml"))
                      + glob.glob(os.path.join(ROOT, "roles", role, "defaults", "*.yml"))]
        if any(r == "preflight" for r, e in entries):  # the planner reads each host's variables itself
            files.append(os.path.relpath(PLANNER, ROOT))
        for file in set(files):
            with open(os.path.join(ROOT, file), encoding="utf-8") as handle:
                texts.append(handle.read())
        text = "\n".join(texts)
        for role, entry in entries:
            if role == "preflight":
                reading[OPENED].add(name)
                if entry == "plan":
                    reading[PLANNING].add(name)
            for option in every.get(role, {}).get(entry, {}):
                if re.search(r"\b%s\b" % option, text):
                    reading.setdefault(option, set()).add(name)
    return {k: sorted(v) for k, v in reading.items()}


def given_by_playbooks():
    """The role options a playbook or task file under playbooks/ gives in the vars of a role include: the plan's parts."""
    given = set()

    def walk(node):
        if isinstance(node, dict):
            if any(k in node for k in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role")):
                given.update((node.get("vars") or {}).keys())
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in glob.glob(os.path.join(ROOT, "playbooks", "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "tasks", "*.yml")):
        walk(load(path))
    return given


def per_host():
    with open(PLANNER, encoding="utf-8") as handle:
        return re.findall(r'values\.get\("(\w+)"\)', handle.read())


def text(value):
    """Ansible's doc markup as Markdown, one line, safe in a table cell."""
    value = " ".join(value) if isinstance(value, list) else str(value)
    value = re.sub(r"\b[CO]\(([^()]*(?:\([^()]*\)[^()]*)*)\)", r"`\1`", value)
    value = re.sub(r"\bI\(([^)]*)\)", r"*\1*", value)
    return " ".join(value.split()).replace("|", "\\|")


def type_of(spec):
    kind = spec.get("type", "str")
    return "%s of %s" % (kind, spec["elements"]) if spec.get("elements") else kind


def default_of(spec):
    if "default" not in spec or spec["default"] is None:
        return "—"
    value = spec["default"]
    shown = value if isinstance(value, str) and value else json.dumps(value)
    return "`%s`" % shown.replace("|", "\\|")


def rows():
    """[(section, role, variable, spec)], each variable once: the first role of ROLES that lists it."""
    every = specs()
    unknown = set(every) - set(ROLES)
    if unknown:
        raise SystemExit("roles with an argument spec that ROLES does not order: %s" % ", ".join(sorted(unknown)))
    hosts, given, seen, found = per_host(), given_by_playbooks(), set(), []
    for role in ROLES:
        for entry in every.get(role, {}).values():
            for name, spec in entry.items():
                if name in seen:
                    continue
                seen.add(name)
                section = "host" if name in hosts else "given" if name in given else "role"
                found.append((section, role, name, spec))
    return found


def playbooks(reading, name):
    mine = reading.get(name, [])
    for group in (OPENED, PLANNING):
        if mine and mine == reading[group]:
            return "*%s*" % group
    return ", ".join("`%s`" % p for p in mine) or "—"


def table(entries, reading, with_role=False):
    head = "| variable | type | default | read by | meaning |\n|---|---|---|---|---|\n"
    if with_role:
        head = "| role | variable | type | default | meaning |\n|---|---|---|---|---|\n"
    lines = []
    for section, role, name, spec in entries:
        cells = [role] if with_role else []
        cells += ["`%s`" % name, type_of(spec), default_of(spec)]
        if not with_role:
            cells.append(playbooks(reading, name))
        cells.append(text(spec.get("description", "")))
        lines.append("| %s |" % " | ".join(cells))
    return head + "\n".join(lines) + "\n"


def render_tables():
    found, reading = rows(), playbooks_reading()
    named = {group: ", ".join("`%s`" % p for p in reading[group]) for group in (OPENED, PLANNING)}
    legend = "*%s*: %s. *%s*: %s.\n\n" % (OPENED, named[OPENED], PLANNING, named[PLANNING])
    parts = [legend, "## Per host\n\nSet on each host (the planner reads them from every node's variables).\n\n",
             table([r for r in found if r[0] == "host"], reading)]
    for role in ROLES:
        mine = [r for r in found if r[0] == "role" and r[1] == role]
        if mine:
            parts.append("\n## Read by the %s role\n\n" % role)
            parts.append(table(mine, reading))
    parts.append("\n## What the playbooks give the roles\n\nNot inventory variables: each playbook hands a role its part "
                 "of the plan (and a few choices of its own) in the include's `vars`; a role run alone takes the first "
                 "deployment's.\n\n")
    parts.append(table([r for r in found if r[0] == "given"], reading, with_role=True))
    return "".join(parts)


def render(current):
    """The document with its tables written anew."""
    if BEGIN not in current or END not in current:
        raise SystemExit("%s lacks the markers %s ... %s" % (DOC, BEGIN, END))
    before, rest = current.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    return before + BEGIN + "\n" + render_tables() + END + after


def main():
    with open(DOC, encoding="utf-8") as handle:
        current = handle.read()
    wanted = render(current)
    if wanted != current:
        with open(DOC, "w", encoding="utf-8") as handle:
            handle.write(wanted)
        print("rewrote %s" % os.path.relpath(DOC, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
