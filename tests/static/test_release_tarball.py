"""The collection as a user gets it (tests/release.py): the tarball of a clean copy of the checkout (git's files, with
what a working checkout also holds: a user's own inventories, a run's keys and reports, the virtualenv, build output),
installed into an empty collections path and used by FQCN from a folder outside the checkout. galaxy.yml's
build_ignore decides what ships; docs/release.md says why."""

import glob
import hashlib
import json
import os
import re
import shutil
import sys

import pytest

from release import build_and_install, galaxy
from runner import run

# The samples README tells users to copy: the only inventories that ship, each with every file git has of it.
SHIPPED_INVENTORIES = ("sparks", "sparks-ring")
# What never ships, as path prefixes in the tarball ("." is every dot entry at the root: .ci, .venv, .collections, .git...).
NEVER = (".", "tests/", "molecule/", "roles/sim_cluster/", "scripts/", "build/", "playbooks/collections/", "playbooks/sim.yml",
         "profiles/sim_", "Makefile", "ansible.cfg", "requirements-dev.txt", "requirements-test.txt")
# A task, a role or a filter of this collection named in a playbook or a role.
MODULE = re.compile(r"^\s*(?:- )?dgx_spark\.vllm\.(\w+):", re.M)
ROLE = re.compile(r"\b(?:name|role):\s*dgx_spark\.vllm\.(\w+)\s*$", re.M)
FILTER = re.compile(r"\|\s*dgx_spark\.vllm\.(\w+)")


@pytest.fixture(scope="module", name="release")
def fixture_release(tmp_path_factory):
    return build_and_install(tmp_path_factory.mktemp("release"))


def test_license_ships_and_nothing_of_the_simulation_tests_tools_or_a_run(release):
    names = set(release["members"])
    assert "LICENSE" in names and release["data"]["LICENSE"].startswith(b"                    GNU GENERAL PUBLIC LICENSE")
    assert "README.md" in names and "plugins/modules/vllm_cluster_plan.py" in names and "roles/preflight" in names
    shipped_never = sorted(n for n in names if n.startswith(NEVER) or "/.secrets" in n or "/.artifacts" in n)
    assert shipped_never == []


def test_only_the_sample_inventories_ship_each_whole(release):
    shipped = {n for n in release["members"] if n.startswith("inventories/")}
    assert {n.split("/")[1] for n in shipped} == set(SHIPPED_INVENTORIES)
    for sample in SHIPPED_INVENTORIES:
        folder = os.path.join(release["checkout"], "inventories", sample)
        tracked = {os.path.relpath(p, release["checkout"]) for p in glob.glob(os.path.join(folder, "**"), recursive=True)
                   if os.path.isfile(p) and "/." not in os.path.relpath(p, folder)}
        assert tracked and tracked <= shipped, sample


def test_manifest_and_files_list_match_the_tarball_and_galaxy_yml(release):
    data, members = release["data"], release["members"]
    manifest = json.loads(data["MANIFEST.json"])
    info, wanted = manifest["collection_info"], galaxy()
    for key in ("namespace", "name", "version", "authors", "license", "dependencies", "repository", "documentation",
                "issues", "tags"):
        assert info[key] == wanted[key], key
    assert manifest["file_manifest_file"]["chksum_sha256"] == hashlib.sha256(data["FILES.json"]).hexdigest()
    listed = {f["name"]: f for f in json.loads(data["FILES.json"])["files"] if f["name"] != "."}
    assert set(listed) == set(members) - {"MANIFEST.json", "FILES.json"}
    for name, entry in listed.items():
        assert entry["ftype"] == ("dir" if members[name].isdir() else "file"), name
        if entry["ftype"] == "file":
            assert entry["chksum_sha256"] == hashlib.sha256(data[name]).hexdigest(), name


def test_every_collection_name_a_shipped_playbook_or_role_uses_is_in_the_tarball(release):
    names, data = set(release["members"]), release["data"]
    roles = {n.split("/")[1] for n in names if n.startswith("roles/") and n.count("/") == 1}
    modules = set(shipped(release, "plugins/modules", "py") + shipped(release, "plugins/action", "py"))
    filters = set(shipped(release, "plugins/filter", "yml"))
    used = {"module": set(), "role": set(), "filter": set()}
    for name, text in data.items():
        if name.startswith(("playbooks/", "roles/")) and name.endswith((".yml", ".j2")):
            text = text.decode("utf-8")
            used["module"].update(MODULE.findall(text))
            used["role"].update(ROLE.findall(text))
            used["filter"].update(FILTER.findall(text))
    assert used["module"] and used["role"] and used["filter"]
    assert used["module"] - modules == set()
    assert used["role"] - roles == set()
    assert used["filter"] - filters == set()


def shipped(release, folder, ext):
    """The names of the files ``folder/*.ext`` in the tarball, without the extension."""
    return sorted(os.path.splitext(os.path.basename(n))[0] for n in release["members"]
                  if re.match(r"%s/\w+\.%s$" % (folder, ext), n))


@pytest.mark.parametrize("kind, folder, ext", [("module", "plugins/modules", "py"), ("filter", "plugins/filter", "yml"),
                                               ("callback", "plugins/callback", "py")])
def test_ansible_doc_shows_every_plugin_from_the_installed_copy(release, kind, folder, ext):
    fqcns = ["dgx_spark.vllm." + name for name in shipped(release, folder, ext)]
    assert fqcns
    rc, out = run("release-doc-" + kind, ["ansible-doc", "--json", "-t", kind] + fqcns, cwd=str(release["work"]),
                  env=release["env"])
    docs = json.loads(out)
    assert sorted(docs) == fqcns
    for fqcn in fqcns:
        doc = docs[fqcn]["doc"]
        assert doc["filename"].startswith(str(release["installed"]) + os.sep), doc["filename"]
        assert doc["short_description"] and doc["version_added"] == "1.0.0", fqcn
        if kind == "module":
            assert docs[fqcn]["return"], fqcn
    if kind == "module":  # the text a user reads renders too
        rc, out = run("release-doc-text", ["ansible-doc"] + fqcns, cwd=str(release["work"]), env=release["env"])
        assert out.count("RETURN VALUES") == len(fqcns)


def test_every_shipped_playbook_passes_syntax_check_by_fqcn(release):
    playbooks = ["dgx_spark.vllm." + name for name in shipped(release, "playbooks", "yml")]
    assert "dgx_spark.vllm.plan" in playbooks and "dgx_spark.vllm.sim" not in playbooks
    run("release-syntax", ["ansible-playbook", "--syntax-check"] + playbooks, cwd=str(release["work"]), env=release["env"])


def test_plan_runs_by_fqcn_offline_on_a_copy_of_the_shipped_sample(release):
    """As README's user starts: the sample copied out of the installed collection, planned before the nodes are
    reachable (tests/integration/test_installed_collection.py plans the simulated cluster's nodes)."""
    inventory = release["work"] / "mycluster"
    shutil.copytree(release["installed"] / "inventories" / "sparks", inventory)
    run("release-plan-offline", ["ansible-playbook", "dgx_spark.vllm.plan", "-i", str(inventory), "-e", "dgx_spark_offline=true",
                                 "-e", "vllm_model_revision=" + "0123456789abcdef" * 2 + "01234567"],
        cwd=str(release["work"]), env=release["env"])
    with open(inventory / ".artifacts" / "plan.json", encoding="utf-8") as handle:
        plan = json.load(handle)
    assert plan["ok"], plan["errors"]
    assert [(d["profile"], d["nodes_order"]) for d in plan["deployments"].values()] == [("minimax_m25_nvfp4_ep", ["spark1", "spark2"])]


def test_the_lowest_ansible_core_claimed_plans_the_shipped_sample(release, tmp_path):
    """meta/runtime.yml's claim, tried at its floor: ansible-core of that exact release (from the package index, in a
    virtualenv of its own) plans a copy of the shipped sample from the installed tarball, as the release the tests run
    does (test_plan_runs_by_fqcn_offline_on_a_copy_of_the_shipped_sample)."""
    floor = galaxy_runtime_floor()
    venv = tmp_path / "core-floor"
    run("release-core-floor-venv", [sys.executable, "-m", "venv", str(venv)])
    run("release-core-floor-install", [str(venv / "bin" / "pip"), "install", "-q", "ansible-core==" + floor])
    rc, out = run("release-core-floor-version", [str(venv / "bin" / "ansible-playbook"), "--version"], env=release["env"])
    assert out.startswith("ansible-playbook [core %s]" % floor), out[:200]
    inventory = release["work"] / "floor-cluster"
    shutil.copytree(release["installed"] / "inventories" / "sparks", inventory)
    run("release-core-floor-plan", [str(venv / "bin" / "ansible-playbook"), "dgx_spark.vllm.plan", "-i", str(inventory),
                                    "-e", "dgx_spark_offline=true", "-e", "vllm_model_revision=" + "0123456789abcdef" * 2 + "01234567"],
        cwd=str(release["work"]), env=release["env"])
    with open(inventory / ".artifacts" / "plan.json", encoding="utf-8") as handle:
        assert json.load(handle)["ok"]


def galaxy_runtime_floor():
    """The release meta/runtime.yml's requires_ansible names as its lowest (">=2.19.0" gives 2.19.0)."""
    import yaml  # pylint: disable=import-outside-toplevel

    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "meta", "runtime.yml"),
              encoding="utf-8") as handle:
        claimed = yaml.safe_load(handle)["requires_ansible"]
    return re.match(r">=\s*([0-9.]+)", claimed).group(1)
