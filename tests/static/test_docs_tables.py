"""docs/design.md and docs/development.md draw the layout: every file and role their tables name exists, and every
module_utils file, plugin, role and playbook that exists is named in docs/design.md's tables (a newcomer reads the
flow there, so a file added without its row, or a row left for a file gone, fails here)."""

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A table row's first cell: a file (backquoted) or a role name.
ROW = re.compile(r"^\| `([^`]+)` \|", re.M)
# The section a module_utils table is under: its folder.
SECTION = re.compile(r"^### `plugins/module_utils/(\w+)/`", re.M)


def rows(doc):
    """(folder of the section or None, first cell) of every table row of ``doc``."""
    with open(os.path.join(ROOT, "docs", doc), encoding="utf-8") as handle:
        text = handle.read()
    found, folder = [], None
    for line in text.splitlines():
        section = SECTION.match(line)
        if line.startswith("### "):
            folder = section.group(1) if section else None
        cell = ROW.match(line)
        if cell:
            found.append((folder, cell.group(1)))
    return found


def named(doc):
    """The paths (relative to the checkout) and roles a doc's tables name."""
    paths, roles = set(), set()
    for folder, cell in rows(doc):
        if folder:
            paths.add("plugins/module_utils/%s/%s" % (folder, cell))
        elif "/" in cell or cell.endswith((".py", ".yml")):
            paths.add(cell)
        elif os.path.isdir(os.path.join(ROOT, "roles", cell)):
            roles.add(cell)
    return paths, roles


def existing():
    found = set()
    for pattern in ("plugins/module_utils/*/*.py", "plugins/modules/*.py", "plugins/action/*.py", "plugins/filter/*.py",
                    "plugins/callback/*.py", "plugins/doc_fragments/*.py", "plugins/plugin_utils/*.py", "playbooks/*.yml", "playbooks/tasks/*.yml"):
        found.update(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))
    return found


def test_every_file_and_role_the_tables_name_exists():
    for doc in ("design.md", "development.md"):
        paths, roles = named(doc)
        missing = sorted(p for p in paths if not os.path.exists(os.path.join(ROOT, p)))
        assert not missing, "docs/%s names files that do not exist: %s" % (doc, ", ".join(missing))
        assert all(os.path.isdir(os.path.join(ROOT, "roles", r)) for r in roles)


def test_every_file_and_role_that_exists_is_in_the_design_tables():
    paths, roles = named("design.md")
    unnamed = sorted(existing() - paths)
    assert not unnamed, "docs/design.md's tables lack: %s" % ", ".join(unnamed)
    every_role = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")) if os.path.isdir(p)}
    assert every_role == roles, "roles not in docs/design.md's table: %s" % ", ".join(sorted(every_role - roles))


def test_the_check_sees_a_row_left_behind_and_a_file_without_one():
    paths, dummy = named("design.md")
    assert "plugins/module_utils/plan/planner.py" in paths and "plugins/module_utils/node/supervisor.py" in paths
    assert "plugins/module_utils/plan/fleet.py" not in paths  # gone, and not named
    assert len(existing()) > 100


def test_each_module_utils_file_holds_one_concern_under_350_lines():
    for path in glob.glob(os.path.join(ROOT, "plugins", "module_utils", "*", "*.py")):
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().count("\n")
        assert lines < 350, "%s has %d lines: split it by concern" % (os.path.relpath(path, ROOT), lines)
    assert not glob.glob(os.path.join(ROOT, "plugins", "module_utils", "*.py")), "module_utils files belong in a stage's folder"


# A module_utils file named anywhere in the checkout (a comment, a doc, a link): `module_utils/<stage>/<name>.py`.
MENTION = re.compile(r"module_utils/[a-z_]+/[a-z_]+\.py")
THIS = os.path.relpath(os.path.abspath(__file__), ROOT)  # names a gone file on purpose


def mentions():
    """(file, path named) for every module_utils file a tracked source, doc or task file names."""
    found = []
    for pattern in ("*.md", "docs/*.md", "roles/*/*/*.yml", "roles/*/*/*.j2", "playbooks/*.yml", "playbooks/tasks/*.yml",
                    "plugins/*/*.py", "plugins/module_utils/*/*.py", "scripts/*.py", "tests/*/*.py", "tests/*/*/*.py"):
        for path in glob.glob(os.path.join(ROOT, pattern)):
            with open(path, encoding="utf-8") as handle:
                found += [(os.path.relpath(path, ROOT), m) for m in MENTION.findall(handle.read())]
    return found


def test_every_module_utils_file_a_comment_or_doc_names_exists():
    gone = sorted({"%s: %s" % (where, name) for where, name in mentions()
                   if not os.path.isfile(os.path.join(ROOT, "plugins", name)) and where != THIS})
    assert not gone, "named but not there (moved or renamed?):\n" + "\n".join(gone)
