"""The simulated nodes as testinfra hosts, reached over SSH as Ansible reaches them (the inventory's addresses and key).

Molecule hands its own inventory (``--ansible-inventory``): the scenario's links to inventories/sim, where
``{{ inventory_dir }}`` is molecule's folder, so the key sim.yml made, the API key and plan.json are there. testinfra's
own Ansible backend reads ``ansible-inventory --list``, which leaves ``{{ inventory_dir }}`` in the key's path
untemplated, so the hosts are made here from the same inventory.
"""

import functools
import json
import os
import subprocess

import pytest
import testinfra

PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def inventory_dir(config):
    given = config.getoption("ansible_inventory", default=None) or os.path.join(PROJECT, "inventories", "sim")
    return given if os.path.isdir(given) else os.path.dirname(given)


@functools.lru_cache(maxsize=None)
def hostvars(folder):
    out = subprocess.run(["ansible-inventory", "-i", folder, "--list"], capture_output=True, text=True, check=True,
                         env=dict(os.environ, ANSIBLE_VERBOSITY="0")).stdout
    listed = json.loads(out)
    return {name: values for name, values in listed["_meta"]["hostvars"].items()
            if name in (listed.get("spark_cluster", {}).get("hosts") or []) or "spark_fabric_ip" in values}


def node_host(folder, name):
    found = hostvars(folder)[name]
    key = found["ansible_ssh_private_key_file"].replace("{{ inventory_dir }}", folder)
    user = found.get("ansible_user", "root")  # the inventory's, with sudo for what only root may read, as Ansible's become
    return testinfra.get_host("ssh://%s@%s" % (user, found["ansible_host"]), ssh_identity_file=key, sudo=user != "root",
                              ssh_extra_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")


def pytest_generate_tests(metafunc):
    if "node" in metafunc.fixturenames:
        metafunc.parametrize("node", sorted(hostvars(inventory_dir(metafunc.config))), indirect=True, scope="session")


@pytest.fixture(scope="session", name="paths")
def fixture_paths(pytestconfig):
    return {"project": PROJECT, "inventory": inventory_dir(pytestconfig)}


@pytest.fixture(scope="session", name="plan")
def fixture_plan(paths):
    with open(os.path.join(paths["inventory"], ".artifacts", "plan.json"), encoding="utf-8") as handle:
        whole = json.load(handle)
    return whole["deployments"][whole["deployment_order"][0]]  # the whole cluster, its one deployment


@pytest.fixture(scope="session", name="api_key")
def fixture_api_key(plan):
    with open(plan["cluster"]["endpoint"]["api_key_file"], encoding="utf-8") as handle:
        return handle.read().strip()


@pytest.fixture(scope="session", name="node")
def fixture_node(request, paths):
    """(inventory name, testinfra host) of each simulated node."""
    return request.param, node_host(paths["inventory"], request.param)


@pytest.fixture(scope="session", name="head")
def fixture_head(plan, paths):
    return plan["head"], node_host(paths["inventory"], plan["head"])


@pytest.fixture(scope="session", name="hosts")
def fixture_hosts(paths):
    """{inventory name: testinfra host} of every node."""
    return {name: node_host(paths["inventory"], name) for name in hostvars(paths["inventory"])}
