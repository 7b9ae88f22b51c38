"""The node's firewall applied: written where it differs, enabled at boot, loaded only when any of it changed."""

import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import firewall
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import firewall as planned_firewall


def planned(tmp_path, addresses=("10.210.0.10", "10.210.0.11")):
    paths = {"firewall_rules": str(tmp_path / "state/config/firewall.nft"), "firewall_unit": str(tmp_path / "etc/dgx-fw.service"),
             "firewall_wants": str(tmp_path / "etc/multi-user.target.wants/dgx-fw.service")}
    settings = {"cluster_name": "lab", "ray_port": 6379, "master_port": 29500, "ray_ports_offset": 0, "monitoring": {"enabled": False}}
    return planned_firewall.plan(settings, "ray", addresses, paths)


class Nft:
    def __init__(self, rc=0):
        self.rc, self.calls = rc, []

    def __call__(self, argv):
        self.calls.append(argv)
        return self.rc, "", "" if self.rc == 0 else "Error: syntax error"


def test_a_fresh_node_gets_the_files_the_link_and_the_table_loaded_once(tmp_path):
    plan, nft = planned(tmp_path), Nft()
    written, linked, loaded, problem = firewall.apply(plan, nft)
    assert problem is None and loaded and linked and written == [f["path"] for f in plan["files"]]
    assert os.readlink(plan["wants"]) == plan["files"][1]["path"]
    assert nft.calls == [[planned_firewall.NFT, "-f", plan["files"][0]["path"]]]
    assert open(plan["files"][0]["path"]).read() == plan["files"][0]["content"]
    assert firewall.apply(plan, nft) == ([], False, False, None) and len(nft.calls) == 1  # nothing differs: not loaded again


def test_a_changed_address_list_is_written_and_loaded_and_check_mode_changes_nothing(tmp_path):
    nft = Nft()
    firewall.apply(planned(tmp_path), nft)
    wider = planned(tmp_path, ("10.210.0.10", "10.210.0.11", "10.210.0.12"))
    assert firewall.apply(wider, nft, check=True) == ([wider["files"][0]["path"]], False, True, None) and len(nft.calls) == 1
    assert firewall.apply(wider, nft) == ([wider["files"][0]["path"]], False, True, None) and len(nft.calls) == 2
    os.remove(wider["wants"])  # disabled by hand
    assert firewall.apply(wider, nft)[1:] == (True, True, None)


def test_a_ruleset_nft_refuses_is_named(tmp_path):
    written, linked, loaded, problem = firewall.apply(planned(tmp_path), Nft(rc=1))
    assert not loaded and problem.endswith("failed: Error: syntax error") and "firewall.nft" in problem
