"""Bad input, each a different validation, refused by `plan.yml` before any node is touched (an offline plan of a copy
of inventories/sparks, as a user runs it before the nodes are reachable). Each refusal names the host, the value and
the fix. The node-state and end-to-end cases are in test_faults.py; every row lands in docs/reliability.md."""

import copy
import json
import os
import shutil

import pytest
import yaml

from helpers import P0, P1, cable
from runner import ROOT, record, run

SAMPLE = os.path.join(ROOT, "inventories", "sparks")
PINNED = "0123456789abcdef0123456789abcdef01234567"


def add_host(hosts, name, ip, group="spark_workers"):
    hosts["spark_cluster"]["children"][group]["hosts"][name] = {
        "ansible_host": name + ".lan", "spark_fabric_ip": ip, "spark_fabric_interfaces": ["enp1s0f1np1"]}


def set_host(name, **values):
    def change(hosts):
        for group in hosts["spark_cluster"]["children"].values():
            if name in (group.get("hosts") or {}):
                group["hosts"][name].update(values)
                for key in [k for k, v in values.items() if v is None]:
                    del group["hosts"][name][key]
    return change


def third_worker(hosts):
    add_host(hosts, "spark3", "192.168.100.12")


def third_outside_groups(hosts):
    hosts["spark_cluster"]["hosts"] = {"spark3": {"ansible_host": "spark3.lan", "spark_fabric_ip": "192.168.100.12"}}


RING = [cable("spark1", "spark2", "192.168.10.0/24"), cable("spark2", "spark3", "192.168.20.0/24"), cable("spark3", "spark1", "192.168.30.0/24")]


def two_heads(hosts):
    children = hosts["spark_cluster"]["children"]
    children["spark_head"]["hosts"].update(children["spark_workers"]["hosts"])
    children["spark_workers"]["hosts"] = {}


def profile_change(path, value):
    """A profile of the user's own: the shipped M2.5 profile with ``path`` (dotted) set to ``value``."""
    def change(profile):
        keys = path.split(".")
        node = profile
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return change


def broken_yaml(dummy):
    return "name: broken\nmodel: {id: a/b\n"


# id, kind, what is bad, change: {"vars": extra vars, "hosts": f(hosts), "profile": f(profile)}, host, value, fix
CASES = [
    ("no-child-group", "inventory", "a host in spark_cluster but in no child group", {"hosts": third_outside_groups},
     "spark3", "spark3 is in spark_cluster but in neither", "put it in spark_workers"),
    ("two-heads", "inventory", "two hosts in spark_head", {"hosts": two_heads},
     "spark_head", "exactly one host in spark_head, found 2 (spark1, spark2)", "put the node that serves the endpoint there"),
    ("no-fabric-ip", "inventory", "a node without spark_fabric_ip", {"hosts": set_host("spark2", spark_fabric_ip=None)},
     "spark2", "spark2 has no spark_fabric_ip", "set it to the node's address on the ConnectX link"),
    ("fabric-ip-not-ip", "inventory", "a fabric IP that is no address", {"hosts": set_host("spark2", spark_fabric_ip="192.168.100.300")},
     "spark2", "192.168.100.300", "is not an IP address"),
    ("fabric-ip-v6", "inventory", "an IPv6 fabric IP", {"hosts": set_host("spark2", spark_fabric_ip="fd00::11")},
     "spark2", "fd00::11", "must be IPv4"),
    ("duplicate-fabric-ip", "inventory", "two nodes with one fabric IP", {"hosts": set_host("spark2", spark_fabric_ip="192.168.100.10")},
     "spark2", "the same spark_fabric_ip 192.168.100.10", "each node needs its own"),
    ("backend", "inventory", "an unknown backend", {"vars": {"vllm_backend": "tcp"}},
     "spark_cluster", "value of vllm_backend must be one of: ray, mp, got: tcp", "vllm_backend"),
    ("transport", "inventory", "an unknown NCCL transport", {"vars": {"vllm_nccl_transport": "ib"}},
     "spark_cluster", "got: ib", "value of vllm_nccl_transport must be one of: auto, roce, socket"),
    ("nccl-library", "inventory", "an unknown NCCL library", {"vars": {"vllm_nccl_library": "wheel"}},
     "spark_cluster", "got: wheel", "value of vllm_nccl_library must be one of: image, system"),
    ("ray-client", "inventory", "RAY_ADDRESS of a Ray Client in vllm_extra_env", {"vars": {"vllm_extra_env": {"RAY_ADDRESS": "ray://10.0.0.1:10001"}}},
     "all", "RAY_ADDRESS=ray://10.0.0.1:10001", "remove it"),
    ("port-range", "inventory", "a port outside 1-65535", {"vars": {"vllm_port": 70000}},
     "all", "vllm_port 70000", "is not a TCP port (1-65535)"),
    ("port-collision", "inventory", "vllm_port on Ray's port", {"vars": {"vllm_port": 6379}},
     "all", "'vllm_port': 6379, 'ray_port': 6379", "must differ"),
    ("cluster-name", "inventory", "an invalid cluster name", {"vars": {"vllm_cluster_name": "Lab_Cluster"}},
     "all", "Lab_Cluster", "(for example dgx-spark)"),
    ("bind-address", "inventory", "a bind address that is a name", {"vars": {"vllm_bind_address": "spark1.lan"}},
     "spark1", "spark1.lan", "give one of spark1's addresses, or 0.0.0.0"),
    ("utilization", "inventory", "gpu_memory_utilization above 1", {"vars": {"vllm_gpu_memory_utilization": 1.5}},
     "all", "got 1.5", "must be in (0, 1]"),
    ("node-count", "inventory", "three nodes for a two-node profile", {"hosts": third_worker},
     "all", "TP x PP x DP = 2 x 1 x 1 = 2, but the inventory has 3 node(s)", "add or remove nodes, or choose another profile"),
    ("kv-cache", "inventory", "a max_model_len the KV cache cannot hold", {"vars": {"vllm_max_model_len": 10000000}},
     "spark1", "fewer than max_model_len 10000000", "lower max_model_len to 294880 or raise gpu_memory_utilization"),
    ("ring-incomplete", "inventory", "a ring link without its ends", {"vars": {"spark_fabric_ring": {"links": [{"a": "spark1"}]}}},
     "all", "ring link 1 ({'a': 'spark1'}) is incomplete", "each link is {a: HOST, a_if: PORT, b: HOST, b_if: PORT}"),
    ("ring-two-nodes", "inventory", "a ring of two Sparks", {"vars": {"spark_fabric_ring": {"links": [
        cable("spark1", "spark2"), dict(cable("spark2", "spark1"), a_if=P1, b_if=P0)]}}},
     "all", "the inventory has 2 (spark1, spark2)", "Two Sparks need no ring: cable them directly"),
    ("ring-cable-twice", "inventory", "a ring cable listed twice", {"hosts": third_worker, "vars": {"spark_fabric_ring": {"links": RING + [RING[0]]}}},
     "spark1", "ring link spark1:enp1s0f0np0 <-> spark2:enp1s0f1np1 is listed twice (links 1 and 4)", "list each cable once"),
    ("ring-port-twice", "inventory", "a ring port in two links", {"hosts": third_worker, "vars": {"spark_fabric_ring": {"links": RING[:2] + [
        dict(RING[2], b_if=P0)]}}},
     "spark1", "spark1's port enp1s0f0np0 is in two ring links", "a port takes one cable"),
    ("ring-open", "inventory", "a ring that does not close", {"hosts": third_worker, "vars": {"spark_fabric_ring": {"links": RING[:2]}}},
     "spark3", "the ring does not close at spark3: it has 1 link(s) (to spark2)", "Add or fix the link from its other port"),
    ("ring-overlap", "inventory", "overlapping ring subnets", {"hosts": third_worker, "vars": {"spark_fabric_ring": {"links": RING[:1] + [
        dict(RING[1], subnet="192.168.10.128/25"), RING[2]]}}},
     "spark2", "subnet 192.168.10.128/25 overlaps 192.168.10.0/24", "give each cable its own subnet"),
    ("unknown-profile", "profile", "a profile name that does not exist", {"vars": {"vllm_profile": "minimax_m9"}},
     None, "unknown profile 'minimax_m9'", "or give your own file with vllm_profile_file"),
    ("profile-missing-file", "profile", "a profile file that does not exist", {"vars": {"vllm_profile_file": "/nonexistent/mine.yml"}},
     None, "cannot read profile /nonexistent/mine.yml", "check the path given in vllm_profile_file"),
    ("profile-yaml", "profile", "a profile that is not YAML", {"profile": broken_yaml},
     None, "is not valid YAML", "fix the line it names"),
    ("profile-key", "profile", "a misspelt profile key", {"profile": profile_change("vllm.flagz", 1)},
     None, "unknown key 'flagz'", "fix the spelling or remove it"),
    ("profile-env-typo", "profile", "a typo in a profile's env key", {"profile": profile_change("env.NCCL_IB_HCAA", "mlx5_0")},
     None, "env.NCCL_IB_HCAA", "did you mean NCCL_IB_HCA?"),
    ("profile-env-type", "profile", "an env value that is not a string", {"profile": profile_change("env.NCCL_DEBUG", True)},
     None, "env.NCCL_DEBUG is True", "quote it as a string"),
    ("profile-flag-name", "profile", "a flag written without its dashes", {"profile": profile_change("vllm.flags.enforce-eager", True)},
     None, "vllm.flags key 'enforce-eager' is not a flag", "write it as vLLM does (--enforce-eager)"),
    ("profile-flag-mapping", "profile", "a flag's JSON given as a mapping", {"profile": profile_change("vllm.flags.--compilation-config", {"level": 0})},
     None, "vllm.flags.--compilation-config is a mapping", "give JSON options as one quoted string"),
    ("profile-utilization", "profile", "a profile's utilization above 1", {"profile": profile_change("vllm.gpu_memory_utilization", 1.2)},
     None, "vllm.gpu_memory_utilization is 1.2", "it must be above 0 and at most 1"),
    ("profile-tensor-zero", "profile", "a parallel size below 1", {"profile": profile_change("parallel.tensor", 0)},
     None, "parallel.tensor must be at least 1, got 0", "at least 1"),
    ("profile-backend", "profile", "a profile's unknown backend", {"profile": profile_change("backend", "tcp")},
     None, "backend is 'tcp'", "it must be ray or mp"),
    ("profile-smoke-kind", "profile", "a smoke test of an unknown kind", {"profile": profile_change("smoke_tests", [{"name": "s", "kind": "chit"}])},
     None, "smoke_tests[0].kind is 'chit'", "it must be one of chat"),
    ("profile-restore", "profile", "a deviation restoring a variable the planner does not read",
     {"profile": profile_change("deviations", [{"what": "a", "writeup": "b", "profile": "c", "reason": "d", "restore": {"vllm_foo": 1}}])},
     None, "restore names 'vllm_foo'", "use one of"),
    ("model-path", "profile", "'..' in a model path", {"profile": profile_change("model.id", "/models/../etc")},
     "all", "/models/../etc", "must be a normalized path under /models"),
    ("model-repo", "profile", "a model id that is no repository", {"profile": profile_change("model.id", "org/../../etc")},
     "all", "org/../../etc", "fix the id"),
    ("trust-unpinned", "profile", "--trust-remote-code at the hub's main", {"vars": {"vllm_model_revision": None}},
     "all", "the revision (none, the hub's main) is not a commit", "Set vllm_model_revision to the 40-character commit you reviewed"),
    ("tp-heads", "profile", "a TP that does not divide the heads, the model not on the head yet",
     {"hosts": third_worker, "profile": profile_change("parallel.tensor", 3)},
     "all", "TP=3 neither divides the 8 KV heads", "Choose a TP that divides them"),
    ("flag-underscores", "profile", "--trust_remote_code (underscores) in vllm_extra_flags at the hub's main",
     {"vars": {"vllm_model_revision": None, "vllm_extra_flags": {"--trust_remote_code": True}},
      "profile": profile_change("vllm.flags.--trust-remote-code", None)},
     "all", "sets --trust-remote-code, so every node runs", "Set vllm_model_revision to the 40-character commit you reviewed"),
    ("flag-abbreviated", "profile", "an abbreviated flag in vllm_extra_flags", {"vars": {"vllm_extra_flags": {"--trust-remote": True}}},
     "all", "vLLM reads --trust-remote as --trust-remote-code", "write the option whole"),
    ("flag-owned", "profile", "vllm_extra_flags giving vLLM another bind address", {"vars": {"vllm_extra_flags": {"--host": "0.0.0.0"}}},
     "all", "the plan sets --host to", "set vllm_bind_address instead"),
    ("code-unpinned", "profile", "a reasoning parser plugin file that vllm_code_pins does not pin",
     {"vars": {"vllm_extra_flags": {"--reasoning-parser-plugin": "/models/parsers/mine.py"}}},
     "all", "loads /models/parsers/mine.py, a file on the nodes", "Add vllm_code_pins: {/models/parsers/mine.py:"),
    ("code-path-env", "profile", "PYTHONPATH in vllm_extra_env", {"vars": {"vllm_extra_env": {"PYTHONPATH": "/models/lib"}}},
     "all", "vllm_extra_env sets PYTHONPATH", "Build that code into the image instead"),
    ("firewall-allow-entry", "inventory", "a vllm_firewall_allow entry that is no port", {"vars": {"vllm_firewall_allow": ["ssh"]}},
     "all", "vllm_firewall_allow: 'ssh' is not a port", "(22, 9000-9010, 5353/udp)"),
    ("firewall-allow-ray", "inventory", "a vllm_firewall_allow entry opening Ray's port to every host", {"vars": {"vllm_firewall_allow": [6379]}},
     "all", "vllm_firewall_allow: 6379 would open", "Remove the entry, or move your service to another port"),
    ("tls-half", "inventory", "a TLS certificate without its key", {"vars": {"vllm_tls": True, "vllm_tls_cert_file": "/etc/ssl/mine.pem"}},
     "all", "vllm_tls_cert_file and vllm_tls_key_file go together", "or neither for a self-signed certificate made once"),
    ("tls-unreadable", "inventory", "a TLS certificate the controller cannot read",
     {"vars": {"vllm_tls": True, "vllm_tls_cert_file": "/nonexistent/mine.pem", "vllm_tls_key_file": "/nonexistent/mine.key"}},
     "all", "the certificate /nonexistent/mine.pem or its key /nonexistent/mine.key cannot be read", "give the paths of both PEM files"),
    ("secret-flag", "secrets", "--api-key in vllm_extra_flags", {"vars": {"vllm_extra_flags": {"--api-key": "sk-leak-me-not"}}},
     "all", "vllm_extra_flags carries --api-key", "Give it with vllm_api_key instead"),
    ("key-charset", "secrets", "a vllm_api_key the front door cannot hold", {"vars": {"vllm_api_key": "has spaces but is long"}},
     "all", "the API key must be 16 to 200 characters of letters, digits", "give another vllm_api_key, or none to have one generated"),
    ("secret-env-token", "secrets", "HF_TOKEN in vllm_extra_env", {"vars": {"vllm_extra_env": {"HF_TOKEN": "hf_leak_me_not"}}},
     "all", "vllm_extra_env carries HF_TOKEN", "Give it with vllm_hf_token instead"),
    ("secret-env-password", "secrets", "a *PASSWORD* variable in vllm_extra_env", {"vars": {"vllm_extra_env": {"DB_PASSWORD": "leak-me-not"}}},
     "all", "vllm_extra_env carries DB_PASSWORD", "a variable the collection keeps in a 0600 file"),
]


def deployments(second=None, first=None):
    """Two deployments of the sample's profile on both Sparks, the second changed by ``second``."""
    return {"vllm_deployments": [dict({"name": "big", "profile": "minimax_m25_nvfp4_ep", "nodes": "spark_cluster"}, **(first or {})),
                                 dict({"name": "second", "profile": "minimax_m25_nvfp4_ep", "nodes": "spark_cluster",
                                       "served_name": "m25-second"}, **(second or {}))]}


CASES += [
    ("deployments-overcommit", "deployments", "two deployments that over-commit the nodes they share", {"vars": deployments()},
     "spark1", "deployments big (", "the others leave deployment second no room there: place it on other nodes"),
    ("deployments-port", "deployments", "two deployments on one API port", {"vars": deployments({"port": 8001})},
     "spark1", "deployment big's API port 8001 and deployment second's API port 8001 collide", "set deployment second's port"),
    ("deployments-ray", "deployments", "two deployments' Ray on the same ports", {"vars": deployments({"ray_ports_offset": 0})},
     "spark2", "deployment big's Ray ports 6800-6805 and deployment second's Ray ports 6800-6805", "set deployment second's ray_ports_offset"),
    ("deployments-host", "deployments", "a deployment on a host outside the cluster", {"vars": deployments({"nodes": ["spark1", "spark9"]})},
     "spark9", "spark9 not in spark_cluster", "a deployment runs on the cluster's nodes only"),
    ("deployments-served-name", "deployments", "two deployments serving one model name",
     {"vars": deployments({"served_name": None})},
     "all", "deployments big and second all serve the model name", "give each its own served_name"),
]


@pytest.fixture(scope="module", name="sample")
def fixture_sample():
    with open(os.path.join(SAMPLE, "hosts.yml"), encoding="utf-8") as handle:
        hosts = yaml.safe_load(handle)
    with open(os.path.join(ROOT, "profiles", "minimax_m25_nvfp4_ep.yml"), encoding="utf-8") as handle:
        profile = yaml.safe_load(handle)
    return hosts, profile


def segments(out, host):
    """What the plan printed for ``host``: the text after each "[host]" up to the next finding."""
    flat = " ".join(out.replace("''", "'").split())
    marker = "[%s]" % host
    found, start = [], flat.find(marker)
    while start >= 0:
        end = min([i for i in (flat.find(" - [", start + 1), flat.find("ERROR [", start + 1)) if i > 0] or [len(flat)])
        found.append(flat[start:end])
        start = flat.find(marker, start + 1)
    return found


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_before_any_node_is_touched(tmp_path, sample, case):
    name, kind, what, change, host, value, fix = case
    hosts, profile = copy.deepcopy(sample[0]), copy.deepcopy(sample[1])
    inventory = tmp_path / "inventory"
    shutil.copytree(os.path.join(SAMPLE, "group_vars"), inventory / "group_vars")
    if "hosts" in change:
        change["hosts"](hosts)
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    extra = {"dgx_spark_offline": True, "vllm_model_revision": PINNED}
    if "profile" in change:
        text = change["profile"](profile)
        (tmp_path / "mine.yml").write_text(text if isinstance(text, str) else yaml.safe_dump(profile))
        extra.update(vllm_profile="", vllm_profile_file=str(tmp_path / "mine.yml"))
    extra.update(change.get("vars") or {})
    extra = {k: v for k, v in extra.items() if v is not None}
    rc, out = run("bad-input-" + name, ["ansible-playbook", "playbooks/plan.yml", "-i", str(inventory), "-e", json.dumps(extra)],
                  check=False, timeout=300)
    assert rc != 0, out
    flat = " ".join(out.replace("''", "'").split())
    if host is None:  # a profile that cannot be read or is malformed names its file, not a host
        where = "unknown profile" if name == "unknown-profile" else extra.get("vllm_profile_file")
        assert where in flat
        assert value in flat and fix in flat, flat[-3000:]
    elif host.startswith("spark_"):  # the groups' and the arguments' own checks name the group or variable in the message
        assert value in flat and fix in flat, flat[-3000:]
    else:
        assert any(value in s and fix in s for s in segments(out, host)), (host, value, fix, flat[-3000:])
    assert "nothing was changed" in flat or "FAILED" in out
    if kind == "secrets":  # the refusal names the variable, never the secret
        assert "leak-me-not" not in out and "leak_me_not" not in out
    assert not (inventory / ".artifacts" / "summary.json").exists()  # serve never ran
    record("bad input", "%s: %s" % (kind, what), "refused by the plan, naming %s: %s ... %s" % (host or "the profile file", value, fix))
