"""The filters (plugins/filter/*.py): thin adapters of module_utils, errors as filter errors, each documented for
ansible-doc beside its file."""

import glob
import json
import os
import subprocess

import yaml

from ansible_collections.dgx_spark.vllm.plugins.filter import bench, door, gateway, host_guard, model, records, ring, serve, state, verify
from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import parity

from helpers import ROOT, read_fixture

FILES = (bench, door, gateway, host_guard, model, records, ring, serve, state, verify)


def test_every_filter_is_registered_once_and_documented_for_ansible_doc():
    names = [n for f in FILES for n in f.FilterModule().filters()]
    assert len(names) == len(set(names)) and set(names) == {
        "env_parity", "environ_vars", "nccl_transport", "canary_reference", "canary_verdict",
        "node_state", "status_report", "recover_decision", "recover_refusal",
        "last_known_good_record", "deployment_restore", "upgrade_change", "upgrade_failure_line",
        "upgrade_report", "bench_sweep", "bench_from_refusals", "bench_rows", "human_bytes", "rsync_summary",
        "ring_failures", "ring_table", "ring_ends", "perftest_argv", "perftest_verdict", "gateway_config",
        "host_guard_files", "swap_findings", "serve_summary", "serve_summaries", "door_keys"}
    documented = {os.path.basename(p)[:-4] for p in glob.glob(os.path.join(ROOT, "plugins", "filter", "*.yml"))}
    assert documented == set(names)
    for name in names:
        with open(os.path.join(ROOT, "plugins", "filter", name + ".yml"), encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)
        assert doc["DOCUMENTATION"]["name"] == name and doc["DOCUMENTATION"]["short_description"] and doc["EXAMPLES"], name
        assert "_value" in doc["RETURN"], name
    listed = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-doc"), "-t", "filter", "--list", "--json", "dgx_spark.vllm"],
                            capture_output=True, text=True, check=True, cwd=ROOT,
                            env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))).stdout
    assert {n.split(".")[-1] for n in json.loads(listed)} == set(names)


def test_env_parity_names_the_variable_the_value_and_the_plan():
    env = {"VLLM_HOST_IP": "10.0.0.1", "X": "y"}
    planned = {"a": {"env_common": {}, "env_node": {"VLLM_HOST_IP": "10.0.0.2"}}}
    assert "a: VLLM_HOST_IP is '10.0.0.1' in the container, planned '10.0.0.2'" in verify.env_parity(planned, {"a": env})[0]


def test_ring_failures_name_each_failed_link_once_with_its_ends_and_the_silent_nodes():
    end = {"link": "s1:p0 <-> s2:p1", "interface": "p0", "peer": "s2", "peer_address": "192.168.10.2"}
    back = {"link": "s1:p0 <-> s2:p1", "interface": "p1", "peer": "s1", "peer_address": "192.168.10.1"}
    report = {"s1": {"results": [{"item": end, "rc": 1}]}, "s2": {"results": [{"item": back, "rc": 1}]}, "s3": {"lost": True}}
    assert ring.ring_failures(report) == [
        "s3 stopped answering over SSH after its ring netplan was applied; its own timer puts the previous one back",
        "link s1:p0 <-> s2:p1: s1 p0 got no answer from s2 at 192.168.10.2; s2 p1 got no answer from s1 at 192.168.10.1, to a "
        "9000-byte ping that may not be fragmented. Check that cable (plugged into those two ports, the link up: ip link), and "
        "the MTU on both ports"]
    assert ring.ring_failures({"s1": {"results": [{"item": end, "rc": 0}], "lost": False, "try": {"finished": 1, "pending": True}}}) == []
    failed = {"finished": 1, "failed": True, "msg": "applying the ring's netplan on this node failed, so it\n was rolled back"}
    assert ring.ring_failures({"s1": {"results": [], "try": failed}}) == [
        "s1: its try of the ring's netplan failed: applying the ring's netplan on this node failed, so it was rolled back"]
    assert ring.ring_failures({"s1": {"try": {"finished": 0, "failed": True}, "answer_timeout": 8}}) == [
        "s1: its try of the ring's netplan failed: the try did not finish within 8 s although the node answers"]
    assert ring.ring_failures({"s1": {"try": {"finished": 0}, "lost": True}})[0].startswith("s1 stopped answering")


def test_nccl_transport_of_a_captured_fallback_and_byte_counts():
    verdict = verify.nccl_transport(read_fixture("nccl", "nccl-socket-fallback.log"), expect_ib=True, strict=True)
    assert verdict["status"] == "fallback" and "NCCL fell back to TCP sockets" in verdict["messages"][0]
    assert model.human_bytes(1536) == "1.5 KB" and model.human_bytes(None) == "?"


def test_ring_ends_are_the_planners_addresses():
    links = [{"a": "s%d" % i, "a_if": "p0", "b": "s%d" % (i % 3 + 1), "b_if": "p1"} for i in (1, 2, 3)]
    assert ring.ring_ends({"links": links}, ["s1", "s2", "s3"])["s1"] == [["p0", "192.168.192.1"], ["p1", "192.168.194.2"]]


def test_a_node_whose_two_links_fail_from_both_ends_has_its_cables_swapped():
    def end(host, port, link, peer):
        return {"item": {"link": link, "interface": port, "peer": peer, "peer_address": "x"}, "rc": 1}
    report = {"s1": {"results": [end("s1", "p0", "L12", "s2"), end("s1", "p1", "L31", "s3")]},
              "s2": {"results": [end("s2", "p1", "L12", "s1"), dict(end("s2", "p0", "L23", "s3"), rc=0)]},
              "s3": {"results": [end("s3", "p0", "L31", "s1"), dict(end("s3", "p1", "L23", "s2"), rc=0)]}}
    assert ring.ring_failures(report)[-1] == (
        "s1: both its links fail from both ends while the others answer, so its two cables are probably swapped (p0 and p1). "
        "Swap them back, or exchange s1's two ports in spark_fabric_ring's links")


def test_perftest_runs_the_server_on_end_b_and_the_client_on_end_a():
    ends = [{"link": "s1:p0 <-> s2:p1", "side": "a", "interface": "p0", "peer_address": "192.168.10.2", "rdma": "rocep1s0f0:1",
             "gid_index": 3},
            {"link": "s3:p0 <-> s1:p1", "side": "b", "interface": "p1", "peer_address": "192.168.30.1", "rdma": "rocep1s0f1:1",
             "gid_index": 3}]
    assert ring.perftest_argv(ends, "server")[:3] == ["ib_write_bw", "-d", "rocep1s0f1"]
    assert ring.perftest_argv(ends, "client")[-1] == "192.168.10.2"
    table = " #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n 65536 5000 60.0 59.5 0.1\n"
    assert ring.perftest_verdict(table, ends).startswith("link s1:p0 <-> s2:p1: RDMA write bandwidth 59.5 Gb/s, below the 80")
    # Where the look found perftest's JSON option, the client writes JSON on stderr and the verdict reads it first.
    assert "--out_json" not in ring.perftest_argv(ends, "client", "/usr/bin/ib_write_bw\n")
    assert "--out_json" in ring.perftest_argv(ends, "client", "/usr/bin/ib_write_bw\n--out_json_file\n")
    as_json = '{\n"test_info": {"test": "RDMA_Write_BW_Test"},\n"results": {"MsgSize": 65536, "n_iterations": 5000, "BW_peak": 96.0, "BW_average": 95.5}\n}\n'
    assert ring.perftest_verdict(table, ends, as_json) == "link s1:p0 <-> s2:p1: 95.5 Gb/s (published: at least 80 Gb/s in a ring)"


def test_the_gateway_config_refuses_an_empty_key_naming_whose():
    import pytest
    from ansible.errors import AnsibleFilterError

    routes = [{"model": "m", "deployment": "chat", "api_base": "http://h:8001/v1"}]
    assert '"api_key": "k"' in gateway.gateway_config(routes, {"chat": "k\n"}, "client\n", 30)
    with pytest.raises(AnsibleFilterError, match="deployment chat"):
        gateway.gateway_config(routes, {"chat": ""}, "client", 30)


def test_the_host_guard_files_and_the_swap_layout_name_each_finding():
    planned = host_guard.host_guard_files({"earlyoom_mem_percent": 4, "earlyoom_swap_percent": 100, "earlyoom_report_seconds": 3600,
                                           "earlyoom_avoid": "(^|/)(sshd)$", "earlyoom_prefer": "^(VLLM::|ray::|vllm)",
                                           "sshd_oom_score_adj": -1000, "sshd_service": "ssh", "protect_docker": True})
    assert planned["earlyoom"]["path"] == "/etc/default/earlyoom"
    assert "EARLYOOM_ARGS=\"-m 4 -s 100 -r 3600 --avoid '(^|/)(sshd)$' --prefer '^(VLLM::|ray::|vllm)'\"" in planned["earlyoom"]["content"]
    assert [d["path"] for d in planned["drop_ins"]] == ["/etc/systemd/system/ssh.service.d/50-oom-score-adjust.conf",
                                                        "/etc/systemd/system/docker.service.d/50-oom-score-adjust.conf"]
    assert "OOMScoreAdjust=-1000" in planned["drop_ins"][0]["content"] and planned["score"] == -1000
    assert host_guard.swap_findings(["10", "/dev/zram0"], "spark1", 10, False) == []
    found = host_guard.swap_findings(["60", "/swap.img", "/dev/zram0"], "spark1", 10, False)
    assert found[0].startswith("spark1: vm.swappiness is 60, above 10") and "swap on disk (/swap.img)" in found[1]
    assert host_guard.swap_findings(["10", "/swap.img"], "spark1", 10, True) == []


def test_one_read_of_the_head_gives_the_ranks_environments_and_the_transport_from_its_log():
    # ranks.yml reads both in one exec; a log line that looks like an environment or a '---' is not taken as one
    log = "--- a line of the log ---\nNCCL_SOCKET_IFNAME=not-an-env\n" + read_fixture("nccl", "nccl-socket-fallback.log")
    text = "NCCL_IB_HCA=rocep1s0f1\nVLLM_HOST_IP=10.210.0.10\n---\n" + parity.LOG_MARKER + "\n" + log
    assert verify.environ_vars(text) == [{"NCCL_IB_HCA": "rocep1s0f1", "VLLM_HOST_IP": "10.210.0.10"}]
    assert verify.nccl_transport(text, expect_ib=True, strict=True) == verify.nccl_transport(log, expect_ib=True, strict=True)
    assert verify.nccl_transport(text, expect_ib=True, strict=True)["status"] == "fallback"
    assert verify.environ_vars(parity.LOG_MARKER + "\n" + log) == []  # no rank yet: ranks.yml asks again
    with open(os.path.join(ROOT, "roles", "vllm_serve", "tasks", "ranks.yml"), encoding="utf-8") as handle:
        assert 'echo "%s"' % parity.LOG_MARKER in handle.read()


def test_an_empty_head_log_is_read_as_empty_not_as_missing():
    # the command module drops trailing newlines: an empty log leaves the marker last, with no newline after it
    text = "NCCL_IB_HCA=rocep1s0f1\n---\n" + parity.LOG_MARKER
    assert parity.split_read(text) == ("NCCL_IB_HCA=rocep1s0f1\n---", "")
    assert verify.nccl_transport(text) == verify.nccl_transport("")
    assert parity.split_read("A=1\n---") == ("A=1\n---", None)
