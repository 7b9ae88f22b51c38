"""The simulated nodes as testinfra hosts, reached over SSH as Ansible reaches them (the inventory's addresses and key).

testinfra's own Ansible backend reads ``ansible-inventory --list``, which leaves the inventory's
``{{ inventory_dir }}`` in the key's path untemplated, so the hosts are made here from the same inventory.
"""

import json
import os
import subprocess

import pytest
import testinfra

PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
INVENTORY = os.path.join(PROJECT, "inventories", "sim")


def inventory():
    out = subprocess.run(["ansible-inventory", "-i", INVENTORY, "--list"], capture_output=True, text=True, check=True,
                         env=dict(os.environ, ANSIBLE_VERBOSITY="0")).stdout
    return json.loads(out)


INVENTORY_DATA = inventory()
NODES = sorted(INVENTORY_DATA["_meta"]["hostvars"])


@pytest.fixture(scope="session", name="plan")
def fixture_plan():
    with open(os.path.join(INVENTORY, ".artifacts", "plan.json"), encoding="utf-8") as handle:
        return json.load(handle)


@pytest.fixture(scope="session", name="api_key")
def fixture_api_key():
    with open(os.path.join(INVENTORY, ".secrets", "vllm_api_key"), encoding="utf-8") as handle:
        return handle.read().strip()


def node_host(name):
    hostvars = INVENTORY_DATA["_meta"]["hostvars"][name]
    key = hostvars["ansible_ssh_private_key_file"].replace("{{ inventory_dir }}", INVENTORY)
    return testinfra.get_host("ssh://%s@%s" % (hostvars.get("ansible_user", "root"), hostvars["ansible_host"]),
                              ssh_identity_file=key,
                              ssh_extra_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")


@pytest.fixture(scope="session", params=NODES, name="node")
def fixture_node(request):
    """(inventory name, testinfra host) of each simulated node."""
    return request.param, node_host(request.param)


@pytest.fixture(scope="session", name="head")
def fixture_head(plan):
    return plan["head"], node_host(plan["head"])


@pytest.fixture(scope="session", name="hosts")
def fixture_hosts():
    """{inventory name: testinfra host} of every node."""
    return {name: node_host(name) for name in NODES}


@pytest.fixture(scope="session", name="paths")
def fixture_paths():
    return {"project": PROJECT, "inventory": INVENTORY}
