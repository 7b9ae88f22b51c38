"""netplan_try: a ring's netplan tried with a rollback armed; the script run for real in a temporary folder."""

import os
import subprocess
import time

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import netplan_try


def test_a_node_that_runs_the_content_with_nothing_pending_is_not_touched():
    assert netplan_try.decide("a", "a", pending=False) == "none"
    assert netplan_try.decide("a", "a", pending=True) == "try"  # a try left pending is finished
    assert netplan_try.decide(None, "a", pending=False) == "try"


def test_only_our_timer_is_ever_killed():
    assert netplan_try.is_our_timer("sh\x00/s/ring-rollback\x00/s/ring-try\x00120\x00", "/s/ring-rollback", "/s/ring-try")
    assert not netplan_try.is_our_timer("sh\x00/s/ring-rollback\x00/other\x00120\x00", "/s/ring-rollback", "/s/ring-try")
    assert not netplan_try.is_our_timer("sleep\x00120\x00", "/s/ring-rollback", "/s/ring-try")


def rollback(tmp_path, backup, delay="0"):
    folder, path = tmp_path / "ring-try", tmp_path / "60-ring.yaml"
    folder.mkdir()
    script = tmp_path / "ring-rollback"
    script.write_text(netplan_try.ROLLBACK_SCRIPT)
    applied = tmp_path / "applied"
    files = netplan_try.pending_files(str(folder), str(path), backup, [], "echo applied >> %s" % applied)
    for name, content in files.items():
        with open(name, "w", encoding="utf-8") as handle:
            handle.write(content)
    (folder / "pending").write_text("armed\n")
    path.write_text("tried\n")
    subprocess.run(netplan_try.timer_argv(str(script), str(folder), delay), check=True)
    return path, folder, applied


def test_the_rollback_puts_the_previous_file_back_and_applies(tmp_path):
    path, folder, applied = rollback(tmp_path, "previous\n")
    assert path.read_text() == "previous\n" and oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert applied.read_text() == "applied\n" and not (folder / "pending").exists() and not (folder / "backup").exists()
    assert "rolled back %s" % path in (folder / "rollbacks.log").read_text()


def test_a_rollback_with_no_previous_file_removes_the_tried_one(tmp_path):
    path, dummy, dummy = rollback(tmp_path, None)
    assert not path.exists()


def test_a_detached_command_is_not_waited_for_and_outlives_its_caller(tmp_path):
    done = tmp_path / "done"
    started = subprocess.run(netplan_try.detached(["sh", "-c", "sleep 1; touch %s" % done]), capture_output=True, check=True)
    assert started.stdout == b"" and not done.exists()  # returned with the streams closed, before the command ended
    for dummy in range(50):
        if done.exists():
            break
        time.sleep(0.1)
    assert done.exists()
