"""The collection as a user gets it: the tarball `ansible-galaxy collection build` makes of a clean copy of the
checkout, installed with --no-deps into an empty collections path. Its commands run from a folder outside the
checkout with an empty ansible.cfg, so only that installed copy answers to dgx_spark.vllm; its dependencies come from
the collections folder of this machine's ansible package (requirements-dev.txt)."""

import os
import shutil
import subprocess
import tarfile

import ansible_collections
import yaml

from runner import ROOT, run

# Files a working checkout holds besides git's: a user's inventories (one named like no sample, others one step from a
# sample's spelling, as build_ignore's patterns are written letter by letter), what runs leave, the developer's tools.
UNTRACKED = (
    "inventories/mycluster/hosts.yml", "inventories/mycluster/group_vars/all/main.yml", "inventories/spark/hosts.yml",
    "inventories/sparks2/hosts.yml", "inventories/sparks-rin/hosts.yml", "inventories/sparks-ring2/hosts.yml",
    "inventories/Sparks/hosts.yml", "inventories/hosts.yml",
    "inventories/sparks/.secrets/vllm_api_key", "inventories/sparks/.artifacts/plan.json",
    "inventories/sim/.secrets/sim_ssh_ed25519", ".secrets/vllm_api_key", ".venv/bin/python", ".cache/pip/x",
    "build/sanity/x.py", "tests/output/logs/x.log", "dgx_spark-vllm-0.0.1.tar.gz",
)


def galaxy():
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def clean_copy(dest):
    """git's files of the checkout (its symlinks as links), then UNTRACKED, under ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        source = os.path.join(ROOT, name)
        if not name or not os.path.lexists(source):  # deleted and not yet committed
            continue
        target = os.path.join(dest, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.islink(source):
            os.symlink(os.readlink(source), target)
        else:
            shutil.copy2(source, target)
    for name in UNTRACKED:
        target = os.path.join(dest, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as handle:
            handle.write("a user's file\n")


def dependencies_root():
    """The collections folder holding this machine's community.docker (the ansible package's), with its peers."""
    for folder in ansible_collections.__path__:
        if os.path.isfile(os.path.join(folder, "community", "docker", "MANIFEST.json")):
            return os.path.dirname(folder)
    raise AssertionError("community.docker is not installed here (requirements-dev.txt's ansible package carries it)")


def build_and_install(work):
    """The tarball of a clean copy under ``work``, installed; what the tests read of both."""
    checkout = work / "checkout"
    clean_copy(str(checkout))
    run("release-build", ["ansible-galaxy", "collection", "build", "--output-path", str(work / "dist"), str(checkout)],
        cwd=str(work))
    tarball = work / "dist" / ("dgx_spark-vllm-%s.tar.gz" % galaxy()["version"])
    cols = work / "collections"
    (work / "ansible.cfg").write_text("[defaults]\n")
    env = {"ANSIBLE_CONFIG": str(work / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": "%s:%s" % (cols, dependencies_root()),
           "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false"}
    run("release-install", ["ansible-galaxy", "collection", "install", "--no-deps", "-p", str(cols), str(tarball)],
        cwd=str(work), env=env)
    with tarfile.open(tarball) as archive:
        members = {m.name: m for m in archive.getmembers()}
        data = {name: archive.extractfile(m).read() for name, m in members.items() if m.isfile()}
    return {"work": work, "checkout": checkout, "members": members, "data": data, "env": env,
            "installed": cols / "ansible_collections" / "dgx_spark" / "vllm"}
