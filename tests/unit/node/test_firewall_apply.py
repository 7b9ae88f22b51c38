"""The node's firewall applied: written where it differs, enabled at boot, loaded only when any of it changed."""

import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import firewall, firewall_state
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import firewall as planned_firewall


def planned(tmp_path, addresses=("10.210.0.10", "10.210.0.11")):
    paths = {"firewall_rules": str(tmp_path / "state/config/firewall.nft"), "firewall_unit": str(tmp_path / "etc/dgx-fw.service"),
             "firewall_wants": str(tmp_path / "etc/multi-user.target.wants/dgx-fw.service"),
             "firewall_record": str(tmp_path / "state/config/firewall-loaded.json")}
    settings = {"cluster_name": "lab", "ray_port": 6379, "master_port": 29500, "ray_ports_offset": 0, "monitoring": {"enabled": False}}
    return planned_firewall.plan(settings, "ray", addresses, paths)


class Nft:
    """nft as the node runs it: ``-c -f`` checks a file (``refuses``: what it refuses in one), ``-f`` loads the table (the
    listing then says what was loaded), ``list table`` lists it; systemctl's calls are recorded too."""

    def __init__(self, rc=0, refuses=None):
        self.rc, self.refuses, self.calls, self.listing, self.checked = rc, refuses, [], None, []
        self.units = {}  # {unit name: (its file, its multi-user.target.wants link)} systemctl enable links

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[:2] == ["systemctl", "enable"] and argv[2] in self.units:  # as systemd does: the link [Install] asks for
            unit, wants = self.units[argv[2]]
            os.makedirs(os.path.dirname(wants), exist_ok=True)
            os.symlink(unit, wants)
        if argv[0] == "systemctl":
            return 0, "", ""
        if argv[1] == "-c":
            text = open(argv[3]).read()
            self.checked.append(text)
            return (1, "", "Error: syntax error, unexpected %s" % self.refuses) if self.refuses and self.refuses in text else (0, "", "")
        if argv[1] == "list":
            return (0, self.listing, "") if self.listing is not None else (1, "", "Error: No such file or directory")
        if self.rc == 0:
            self.listing = "table inet dgx_spark_vllm_lab {\n\t%s\n}\n" % open(argv[2]).read().count("\n")
        return self.rc, "", "" if self.rc == 0 else "Error: syntax error"

    def loads(self):
        return [c for c in self.calls if c[1] == "-f"]


def test_a_fresh_node_gets_the_files_the_link_and_the_table_loaded_once(tmp_path):
    plan, nft = planned(tmp_path), Nft()
    written, linked, loaded, problem = firewall.apply(plan, nft)
    assert problem is None and loaded and linked and written == [f["path"] for f in plan["files"]]
    assert os.readlink(plan["wants"]) == plan["files"][1]["path"]
    assert nft.calls == [[planned_firewall.NFT, "-c", "-f", plan["files"][0]["path"] + ".check"], [planned_firewall.NFT, "-f", plan["files"][0]["path"]],
                         firewall_state.list_argv("dgx_spark_vllm_lab")]
    assert nft.checked == [plan["files"][0]["content"]] and not os.path.exists(plan["files"][0]["path"] + ".check")
    assert open(plan["files"][0]["path"]).read() == plan["files"][0]["content"]
    assert firewall_state.state(nft, plan["table"], plan["record"]) == "loaded"  # the listing recorded
    assert firewall.apply(plan, nft) == ([], False, False, None) and len(nft.loads()) == 1  # nothing differs: not loaded again


def test_a_changed_address_list_is_written_and_loaded_and_check_mode_changes_nothing(tmp_path):
    nft = Nft()
    firewall.apply(planned(tmp_path), nft)
    wider = planned(tmp_path, ("10.210.0.10", "10.210.0.11", "10.210.0.12"))
    assert firewall.apply(wider, nft, check=True) == ([wider["files"][0]["path"]], False, True, None) and len(nft.loads()) == 1
    assert firewall.apply(wider, nft) == ([wider["files"][0]["path"]], False, True, None) and len(nft.loads()) == 2
    os.remove(wider["wants"])  # disabled by hand
    assert firewall.apply(wider, nft)[1:] == (True, True, None)


def test_a_ruleset_nft_refuses_is_named(tmp_path):
    written, linked, loaded, problem = firewall.apply(planned(tmp_path), Nft(rc=1))
    assert not loaded and problem.endswith("failed: Error: syntax error") and "firewall.nft" in problem


def test_a_ruleset_nft_would_refuse_never_replaces_the_one_that_loads_at_boot(tmp_path):
    nft = Nft()
    first = planned(tmp_path)
    firewall.apply(first, nft)
    wider = planned(tmp_path, ("10.210.0.10", "10.210.0.11", "10.210.0.12"))
    nft.refuses = "10.210.0.12"  # as if nft refused the new text
    written, linked, loaded, problem = firewall.apply(wider, nft)
    assert (written, linked, loaded) == ([], False, False), written
    assert problem.startswith("%s -c refused the planned ruleset (%s kept as it was): Error: syntax error" % (planned_firewall.NFT, first["files"][0]["path"]))
    assert open(first["files"][0]["path"]).read() == first["files"][0]["content"] and len(nft.loads()) == 1
    assert not os.path.exists(first["files"][0]["path"] + ".check")


def test_where_systemd_runs_it_is_told_of_a_new_or_enabled_unit_and_only_then(tmp_path):
    plan, nft = planned(tmp_path), Nft()
    name = os.path.basename(plan["files"][1]["path"])
    nft.units[name] = (plan["files"][1]["path"], plan["wants"])
    firewall.apply(plan, nft, systemd=True)
    assert nft.calls.count(["systemctl", "daemon-reload"]) == 1 and nft.calls.count(["systemctl", "enable", name]) == 1
    assert os.path.realpath(plan["wants"]) == os.path.realpath(plan["files"][1]["path"])  # systemd made the boot link
    wider = planned(tmp_path, ("10.210.0.10", "10.210.0.11", "10.210.0.12"))
    firewall.apply(wider, nft, systemd=True)  # only the ruleset changed: the unit systemd knows is the same
    assert nft.calls.count(["systemctl", "daemon-reload"]) == 1 and nft.calls.count(["systemctl", "enable", name]) == 1
    os.remove(wider["wants"])  # disabled by hand
    firewall.apply(wider, nft, systemd=True)
    assert nft.calls.count(["systemctl", "daemon-reload"]) == 2 and nft.calls.count(["systemctl", "enable", name]) == 2
    assert os.path.islink(wider["wants"])
    assert firewall.apply(wider, nft, systemd=True)[1] is False  # enabled again: nothing to link


def test_a_table_flushed_or_changed_under_the_cluster_is_seen_and_loaded_again(tmp_path):
    """nft flush ruleset, a restart of nftables.service, a hand edit: the files are unchanged, the live table is not.
    The probe's judgement (firewall_state.state) says so; apply with reload loads it again and records it."""
    plan, nft = planned(tmp_path), Nft()
    firewall.apply(plan, nft)
    nft.listing = None  # flushed
    assert firewall_state.state(nft, plan["table"], plan["record"]) == "missing"
    assert firewall.apply(plan, nft, reload=True) == ([], False, True, None) and len(nft.loads()) == 2
    assert firewall_state.state(nft, plan["table"], plan["record"]) == "loaded"
    nft.listing += "\tchain extra { }\n"  # a rule added by hand
    assert firewall_state.state(nft, plan["table"], plan["record"]) == "changed"
    os.remove(plan["record"])
    assert firewall_state.state(nft, plan["table"], plan["record"]) == "unrecorded"
    os.symlink(plan["files"][0]["path"], plan["record"])  # a link planted where the record goes is not read through
    assert firewall_state.state(nft, plan["table"], plan["record"]) == "unrecorded"
    assert "Run serve.yml" in firewall_state.why(plan["table"], "missing", plan["unit_name"])
