"""One shape: the plan is a list of deployments whatever the inventory lists (the whole cluster is one), so no role or
playbook asks which shape it has. A scan of every task file, default, template and playbook for a condition on it: a
``fleet`` flag, a count of the deployments, or the inventory's ``vllm_deployments`` read outside the preflight role's
defaults (the one place the inventory's choices are read)."""

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPE = re.compile(r"\bfleet\b|(deployments|deployment_order|preflight_chosen)\s*\|\s*length|\bvllm_deployments\b")
# The inventory's choices are read once, there.
READS_THE_INVENTORY = ("roles/preflight/defaults/main.yml",)


def files():
    found = []
    for pattern in ("roles/**/*.yml", "roles/**/*.j2", "playbooks/*.yml", "playbooks/tasks/*.yml"):
        found += [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)]
    return sorted(p for p in set(found) if "/meta/" not in p and not p.startswith("roles/sim_cluster/")
                  and p not in READS_THE_INVENTORY)


def offending(text, path):
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split(" #", 1)[0]
        if code.lstrip().startswith(("#", "- name:", "name:")):  # comments and task names explain, they decide nothing
            continue
        if SHAPE.search(code):
            hits.append("%s:%d: a condition on the plan's shape: %s" % (path, number, line.strip()))
    return hits


def test_the_scan_sees_a_branch_on_the_shape():
    for planted in ("  when: not serve_planned.fleet | default(false)", "  when: vllm_deployments | length > 0",
                    "  that: preflight_paths.plan.deployment_order | length == 1",
                    "  loop: \"{{ vllm_deployments | default([]) }}\""):
        assert offending(planted, "x.yml"), planted
    assert not offending("  loop: \"{{ serve_planned.deployment_order }}\"", "x.yml")
    assert len(files()) > 40


@pytest.mark.parametrize("path", files())
def test_no_role_or_playbook_branches_on_the_plans_shape(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        assert not offending(handle.read(), path)


def test_the_launch_waits_for_no_ray_and_the_join_gate_runs_while_vllm_loads():
    """serve.yml's change: every node's Ray container starts first, the workers' with the head's (serve.yml calls no
    later entry point for them); what needs no Ray (the model, the key) runs while Ray boots; vLLM is launched at once,
    its command naming the head's Ray (it would start a Ray of its own if it found none, commands.serve_command), and
    the join gate waits for every node after the launch, a failed gate stopping the vLLM it launched. Bench's scratch
    figure depends on this order."""
    import yaml  # pylint: disable=import-outside-toplevel

    with open(os.path.join(ROOT, "playbooks", "tasks", "change.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    steps = [(t.get("ansible.builtin.include_role") or {}).get("name", "") + ":" +
             str((t.get("ansible.builtin.include_role") or {}).get("tasks_from", "main")) for t in tasks]
    gate = [t for t in tasks if "block" in t][0]
    steps[tasks.index(gate)] = "gate"
    order = ["dgx_spark.vllm.ray_cluster:start", "dgx_spark.vllm.model:main", "dgx_spark.vllm.vllm_serve:prepare",
             "dgx_spark.vllm.vllm_serve:start", "gate"]
    assert not any(s.endswith(":head") or s.endswith(":workers") for s in steps)
    assert [s for s in steps if s in order] == order
    assert gate["block"][0]["ansible.builtin.include_role"]["tasks_from"] == "verify"
    assert [t for t in gate["rescue"] if "dgx_spark.vllm.vllm_process" in t][0]["dgx_spark.vllm.vllm_process"]["state"] == "stopped"
