"""Seed profiles: each reproduces its write-up's working command, row by row, from the commands kept as data.

The data (tests/seeds/*.yml) quotes every value verbatim with its file and line; the quotes are checked against
the write-ups themselves (shared/reference/seeds beside the checkout). A row marked ``same`` must be in the plan
exactly; a ``deviation`` must be listed in the profile and its restore variable must give the write-up's value back.
"""

import os
import sys

import pytest

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import seed_tables  # noqa: E402  pylint: disable=wrong-import-position

SEEDS = seed_tables.seed_names()


def test_every_seed_profile_has_its_write_up_as_data():
    assert SEEDS == ["minimax_m25_nvfp4_ep", "minimax_m27_mxfp4", "minimax_m27_nvfp4_gb10", "minimax_m3_nvfp4_tp3",
                     "nemotron3_super_nvfp4"]


@pytest.mark.parametrize("name", SEEDS)
def test_quotes_are_verbatim_at_their_lines(name):
    seed = seed_tables.load_seed(name)
    lines = seed_tables.seed_lines(seed)
    wrong = [(row["line"], row["quote"]) for row in seed["rows"] if row["quote"] not in lines[row["line"] - 1]]
    assert not wrong, "%s: these quotes are not on the lines given: %s" % (seed["seed"], wrong)


@pytest.mark.parametrize("name", SEEDS)
def test_plan_carries_the_working_command(name):
    seed = seed_tables.load_seed(name)
    profile, plan, restored = seed_tables.plans(seed)
    assert plan["ok"], plan["errors"]
    deviations = {d["what"] for d in profile.get("deviations") or []}
    used = set()
    for row in seed["rows"]:
        value = seed_tables.plan_value(plan, row)
        status = row.get("status", "same")
        where = "%s line %d, %s %s" % (seed["seed"], row["line"], row["kind"], row["name"])
        if status == "same":
            assert seed_tables.agrees(row, value), "%s: the write-up has %r, the plan %r" % (where, row["value"], value)
        elif status == "default":
            assert value is None or seed_tables.agrees(row, value), "%s: the plan sets %r" % (where, value)
        elif status == "node":
            assert value is not None, "%s: the plan derives no value" % where
        elif status == "deviation":
            assert row["deviation"] in deviations, "%s: the profile lists no deviation %r" % (where, row["deviation"])
            used.add(row["deviation"])
            assert not seed_tables.agrees(row, value), "%s is listed as a deviation but the plan has the write-up's value" % where
            back = seed_tables.plan_value(restored[row["deviation"]], row)
            assert seed_tables.agrees(row, back), "%s: the restore variable gives %r, not the write-up's %r" % (where, back, row["value"])
        elif status == "chosen":  # the write-up states no value and vLLM's default could not run: the profile chooses
            assert "not_stated" in row and row.get("reason") and value is not None, "%s: a chosen value needs its reason" % where
            refused = seed_tables.plan_restored(seed_tables.seed_inputs(seed)[1], row["default_restore"])
            assert not refused["ok"] and all(row["refused_for"] in e["message"] for e in refused["errors"]), (where, refused["errors"])
        else:
            assert status in ("policy", "layout"), "%s: unknown status %r" % (where, status)
    assert used == deviations, "deviations the write-up's rows do not show: %s" % sorted(deviations - used)


@pytest.mark.parametrize("name", SEEDS)
def test_every_rank_gets_identical_rdma_options(name):
    """Fact 8: the RDMA options of every node's container are identical, or NCCL silently falls back to TCP."""
    dummy, plan, dummy2 = seed_tables.plans(seed_tables.load_seed(name))
    specs = [plan["nodes"][n]["containers"][0] for n in plan["nodes_order"]]
    for key in ("devices", "capabilities", "ulimits", "network_mode", "ipc_mode", "gpus"):
        assert len({str(s[key]) for s in specs}) == 1, key
    assert specs[0]["devices"] == ["/dev/infiniband:/dev/infiniband"] and "IPC_LOCK" in specs[0]["capabilities"]


def test_docs_profiles_tables_are_generated_from_the_data_and_the_plans():
    with open(seed_tables.DOC, encoding="utf-8") as handle:
        assert handle.read() == seed_tables.document(), "docs/profiles.md is stale: run python scripts/seed_tables.py"
