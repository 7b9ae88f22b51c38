"""Every fact of the write-ups is a row with its answer: a test, a document or a reason for leaving it out.

The rows (tests/seeds/*.yml, ``facts``) quote the write-ups verbatim; the write-ups themselves must be beside the
checkout (shared/reference/seeds), and without them these tests fail: a fact table nobody can check is not kept.
"""

import os
import sys

import pytest

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import seed_facts  # noqa: E402  pylint: disable=wrong-import-position
import seed_tables  # noqa: E402  pylint: disable=wrong-import-position

SEEDS = seed_tables.seed_names()


def test_the_write_ups_are_beside_the_checkout():
    assert os.path.isdir(seed_tables.SEEDS_TEXT), (
        "the write-ups are not at %s: put shared/reference/seeds beside this checkout" % seed_tables.SEEDS_TEXT)


@pytest.mark.parametrize("name", SEEDS)
def test_every_fact_quotes_its_line_and_names_an_answer_that_exists(name):
    assert not seed_facts.problems(name)


@pytest.mark.parametrize("name", SEEDS)
def test_every_write_up_has_facts_in_each_status_it_needs(name):
    seed = seed_tables.load_seed(name)
    assert any(fact["status"] == "tested" for fact in seed.get("facts", [])), "%s has no tested fact" % seed["seed"]


def test_a_line_no_row_accounts_for_is_found(tmp_path):
    seed = {"seed": "x.txt", "rows": [{"line": 2}], "no_facts": "1", "facts": [{"line": 4, "to": 5}]}
    assert seed_facts.uncovered(seed, ["title", "cmd", "story", "fact", "fact", "", "new"]) == [3, 7]


def test_a_row_whose_test_or_anchor_is_gone_is_refused():
    seed = {"seed": "x.txt"}
    lines = ["it crashed on the second request"]
    fact = {"line": 1, "quote": "crashed on the second", "fact": "crash", "answer": "refusal", "status": "tested",
            "test": "tests/unit/plan/test_seed_facts.py::test_that_does_not_exist"}
    assert seed_facts.row_problems(seed, lines, fact) == [
        "x.txt line 1: tests/unit/plan/test_seed_facts.py has no test test_that_does_not_exist"]
    fact.update(status="documented", doc="docs/profiles.md", anchor="words nobody wrote there")
    del fact["test"]
    assert seed_facts.row_problems(seed, lines, fact) == ["x.txt line 1: docs/profiles.md does not say 'words nobody wrote there'"]
    fact.update(quote="crashed on the third")
    assert "is not on lines 1-1" in seed_facts.row_problems(seed, lines, fact)[0]


def test_docs_write_up_facts_is_generated_from_the_rows():
    with open(seed_facts.DOC, encoding="utf-8") as handle:
        assert handle.read() == seed_facts.document(), "docs/write-up-facts.md is stale: run python scripts/seed_facts.py"
