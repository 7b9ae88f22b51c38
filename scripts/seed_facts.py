"""Every fact of the five write-ups, and what in the collection answers it.

A fact is any statement in a write-up of something that failed, worked, was required or was measured. Each is a row
of ``facts`` in the write-up's data file (tests/seeds/<profile>.yml) quoting the write-up verbatim (file, line) and
naming its answer:

- ``tested``: a check, probe, refusal, setting or bench figure, and the test that proves it (``test``:
  ``tests/...py::test_name``);
- ``documented``: said where a user reads it (``doc``: a file of this project, ``anchor``: text found in it);
- ``omitted``: deliberately left out, with ``why`` (and, where a user should read it, ``doc`` and ``anchor``).

``no_facts`` lists the lines that state none (headings, narrative, the commands whose values are ``rows``), so that
every non-blank line of a write-up is accounted for. ``python scripts/seed_facts.py`` rewrites
docs/write-up-facts.md; tests/unit/plan/test_seed_facts.py keeps the rows, the write-ups and the code in step.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import seed_tables  # noqa: E402  pylint: disable=wrong-import-position

ROOT = seed_tables.ROOT
DOC = os.path.join(ROOT, "docs", "write-up-facts.md")
STATUSES = ("tested", "documented", "omitted")
TITLES = {"tested": "handled and tested", "documented": "documented", "omitted": "deliberately left out"}


def line_numbers(spec):
    """``"1-3, 9"`` (or a list of such) as a set of line numbers."""
    found = set()
    for part in re.split(r"[,\s]+", " ".join(str(s) for s in spec) if isinstance(spec, list) else str(spec or "")):
        if not part:
            continue
        first, dummy, last = part.partition("-")
        found.update(range(int(first), int(last or first) + 1))
    return found


def _read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        return handle.read()


def row_problems(seed, lines, fact):
    """What is wrong with one fact row (an empty list: nothing)."""
    where = "%s line %s" % (seed["seed"], fact.get("line"))
    problems = []
    for key in ("line", "quote", "fact", "status", "answer"):
        if not fact.get(key):
            problems.append("%s: no %s" % (where, key))
    if problems:
        return problems
    last = fact.get("to", fact["line"])
    if not any(fact["quote"] in lines[number - 1] for number in range(fact["line"], last + 1) if number <= len(lines)):
        problems.append("%s: %r is not on lines %s-%s" % (where, fact["quote"], fact["line"], last))
    status = fact["status"]
    if status not in STATUSES:
        problems.append("%s: status %r is none of %s" % (where, status, ", ".join(STATUSES)))
    if status == "tested":
        path, dummy, name = str(fact.get("test", "")).partition("::")
        if not (path.startswith("tests/") and name.startswith("test")):
            problems.append("%s: a tested fact names its test as tests/<file>.py::test_name, not %r" % (where, fact.get("test")))
        elif not os.path.isfile(os.path.join(ROOT, path)):
            problems.append("%s: %s does not exist" % (where, path))
        elif not re.search(r"^\s*def %s\(" % re.escape(name), _read(path), re.M):
            problems.append("%s: %s has no test %s" % (where, path, name))
    if status == "documented" and not fact.get("doc"):
        problems.append("%s: a documented fact names its doc and anchor" % where)
    if status == "omitted" and not fact.get("why"):
        problems.append("%s: an omitted fact says why" % where)
    if fact.get("doc"):
        if not os.path.isfile(os.path.join(ROOT, fact["doc"])):
            problems.append("%s: %s does not exist" % (where, fact["doc"]))
        elif not fact.get("anchor") or fact["anchor"] not in _read(fact["doc"]):
            problems.append("%s: %s does not say %r" % (where, fact["doc"], fact.get("anchor")))
    return problems


def uncovered(seed, lines):
    """The non-blank lines of a write-up that neither a fact, a command row nor ``no_facts`` accounts for."""
    covered = line_numbers(seed.get("no_facts"))
    for row in seed.get("rows", []):
        covered.add(row["line"])
    for fact in seed.get("facts", []):
        covered.update(range(fact["line"], fact.get("to", fact["line"]) + 1))
    return [number for number, text in enumerate(lines, 1) if text.strip() and number not in covered]


def problems(name):
    seed = seed_tables.load_seed(name)
    lines = seed_tables.seed_lines(seed)
    found = []
    for fact in seed.get("facts", []):
        found += row_problems(seed, lines, fact)
    missing = uncovered(seed, lines)
    if missing:
        found.append("%s: lines %s are in no fact, command row or no_facts" % (seed["seed"], missing))
    return found


def _cell(text):
    return " ".join(str(text).split()).replace("|", "\\|")


def answer_cell(fact):
    if fact["status"] == "tested":
        return "%s (`%s`)" % (_cell(fact["answer"]), fact["test"].split("::")[1])
    if fact["status"] == "omitted":
        return "%s: %s" % (_cell(fact["answer"]), _cell(fact["why"]))
    return "%s (%s)" % (_cell(fact["answer"]), fact["doc"])


def document():
    seeds = sorted((seed_tables.load_seed(name) for name in seed_tables.seed_names()), key=lambda seed: seed["seed"])
    counts = {status: sum(1 for seed in seeds for fact in seed.get("facts", []) if fact["status"] == status) for status in STATUSES}
    out = ["# What the write-ups report, and what answers it", "",
           "<!-- scripts/seed_facts.py writes this file from tests/seeds/*.yml; do not edit by hand -->", "",
           "Every statement in the five write-ups (`shared/reference/seeds`) of something that failed, worked, was required",
           "or was measured, with what in the collection answers it. The values of each working command are compared with",
           "the plans in [profiles.md](profiles.md); these are the rest. tests/unit/plan/test_seed_facts.py checks that each",
           "quote is on its line, that each named test and document exists, and that every other line states no fact.", "",
           "| status | facts |", "|---|---|"]
    out += ["| %s | %d |" % (TITLES[status], counts[status]) for status in STATUSES]
    out += ["| all | %d |" % sum(counts.values()), ""]
    for seed in seeds:
        out += ["## Seed %s (`%s`)" % (seed["seed"][:3], seed["profile"]), "",
                "| line | fact | status | answer |", "|---|---|---|---|"]
        for fact in sorted(seed.get("facts", []), key=lambda f: f["line"]):
            span = str(fact["line"]) if fact.get("to", fact["line"]) == fact["line"] else "%s-%s" % (fact["line"], fact["to"])
            out.append("| %s | %s | %s | %s |" % (span, _cell(fact["fact"]), TITLES[fact["status"]], answer_cell(fact)))
        out.append("")
    return "\n".join(out)


def main():
    seed_tables.write(DOC, document())


if __name__ == "__main__":
    main()
