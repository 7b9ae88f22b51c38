"""process_group: vLLM's process group, argv builders and decisions (fact 3)."""

import os
import shutil
import signal
import subprocess
import time

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import process_group


@pytest.mark.parametrize("state,running,hash_,wanted,action", [
    (None, False, "h", "started", "start"),
    ({"pgid": 5, "config_hash": "h"}, True, "h", "started", "none"),
    ({"pgid": 5, "config_hash": "old"}, True, "h", "started", "restart"),
    ({"pgid": 5, "config_hash": "h"}, False, "h", "started", "start"),
    ({"pgid": 5}, True, None, "stopped", "stop"),
    (None, False, None, "stopped", "none"),
    ({"pgid": 5}, True, "h", "restarted", "restart"),
])
def test_process_decisions(state, running, hash_, wanted, action):
    assert process_group.decide(state, running, hash_, wanted) == action


def test_process_group_argv_never_interpolates():
    argv = process_group.launch_argv("docker", "c", ["vllm", "serve", "m; rm -rf /"], "/run/vllm.json", "/logs/l")
    assert argv[:7] == ["docker", "exec", "-i", "c", "sh", "-c", process_group.LAUNCH_SCRIPT]
    assert argv[7:] == ["/run/vllm.json", "/logs/l", "vllm", "serve", "m; rm -rf /"]
    assert process_group.stop_argv("docker", "c", 42, 60)[-5:] == ["sh", "-c", process_group.STOP_SCRIPT, "42", "60"]
    assert process_group.parse_state('{"pgid": 42}') == {"pgid": 42} and process_group.parse_state("junk") is None


def test_one_exec_starts_the_group_and_records_its_state():
    asked = []

    def run(argv, data=None):
        asked.append((argv, data))
        return 0, "4242\n", ""
    assert process_group.start_group(run, "docker", "c", ["vllm", "serve"], "h", "/run/vllm.json", "/logs/l", clock=lambda: 7.0) == 4242
    assert len(asked) == 1 and asked[0][0][:3] == ["docker", "exec", "-i"]
    # the script prefixes the process group: what it writes is the state parse_state reads back
    written = process_group.parse_state('{"pgid": 4242, ' + asked[0][1])
    assert written == {"pgid": 4242, "config_hash": "h", "argv": ["vllm", "serve"], "started_at": 7.0}


def in_dash(args, data=None, env=None, timeout=10):
    """A `docker exec [-i] <container> sh -c SCRIPT ...` argv run by this machine's dash, as the container's sh runs it:
    (rc, stdout, stderr)."""
    done = subprocess.run([shutil.which("dash")] + args[args.index("sh") + 1:], input=data, capture_output=True, text=True,
                          timeout=timeout, check=False, env=env)
    return done.returncode, done.stdout, done.stderr


def launch_here(tmp_path, argv, state=None, env=None):
    """LAUNCH_SCRIPT run by this machine's dash, as `docker exec -i <container> sh -c` runs it in a container: what
    start_group sees, and the state file's path."""
    state = state or str(tmp_path / "run" / "vllm.json")

    def run(args, data=None):
        return in_dash(args, data, env)
    return (lambda: process_group.start_group(run, "docker", "c", argv, "h", state, str(tmp_path / "vllm.log"))), state


def test_the_launch_script_starts_its_own_group_writes_its_state_and_returns_at_once(tmp_path):
    odd = 'x; rm -rf / "$(id)" \'a\'\nb'  # data, never a script
    start, state = launch_here(tmp_path, ["sh", "-c", 'echo "started $1"; exec sleep 30', "sh", odd])
    began = time.monotonic()
    pgid = start()
    try:
        assert time.monotonic() - began < 8  # the background command holds none of the exec's pipes (it sleeps 30 s)
        for dummy in range(100):  # setsid runs in the background job: a loaded machine may run it a moment later
            if os.getpgid(pgid) == pgid:
                break
            time.sleep(0.02)
        assert os.getpgid(pgid) == os.getsid(pgid) == pgid  # vLLM's own session and group: stop_group ends them all
        with open(state, encoding="utf-8") as handle:
            assert process_group.parse_state(handle.read())["argv"][-1] == odd
        for dummy in range(200):
            if (tmp_path / "vllm.log").exists() and odd in (tmp_path / "vllm.log").read_text():
                break
            time.sleep(0.05)
        assert (tmp_path / "vllm.log").read_text() == "started %s\n" % odd
    finally:
        os.killpg(pgid, signal.SIGKILL)


def test_a_launch_whose_state_cannot_be_written_leaves_nothing_running(tmp_path):
    (tmp_path / "run" / "vllm.json").mkdir(parents=True)  # the state path is a folder
    start, dummy = launch_here(tmp_path, ["sleep", "31.5"])  # a sleep no other test starts
    with pytest.raises(process_group.StartError, match="its state could not be written .* it was stopped; see .*vllm.log there"):
        start()
    for dummy in range(50):  # the group is killed before the refusal; a loaded machine may reap it a moment later
        if subprocess.run(["pgrep", "-f", "^sleep 31.5$"], capture_output=True, check=False).stdout == b"":
            break
        time.sleep(0.1)
    assert subprocess.run(["pgrep", "-f", "^sleep 31.5$"], capture_output=True, check=False).stdout == b""


def test_a_container_without_setsid_is_refused_before_anything_starts(tmp_path):
    bin_dir = tmp_path / "bin"  # every tool the script calls but setsid
    bin_dir.mkdir()
    for tool in ("mkdir", "dirname", "cat", "sh"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    start, state = launch_here(tmp_path, ["sleep", "30"], env={"PATH": str(bin_dir)})
    with pytest.raises(process_group.StartError, match="could not start vLLM in c: no setsid in this container; see .*vllm.log there"):
        start()
    assert not os.path.exists(state)


def test_a_vllm_that_dies_at_once_is_recorded_for_the_wait_to_find_gone_with_its_log(tmp_path):
    start, state = launch_here(tmp_path, ["sh", "-c", "echo 'vllm: this image is broken on purpose'; exit 1"])
    pgid = start()
    with open(state, encoding="utf-8") as handle:
        assert process_group.parse_state(handle.read())["pgid"] == pgid
    for dummy in range(50):
        if (tmp_path / "vllm.log").exists() and (tmp_path / "vllm.log").read_text():
            break
        time.sleep(0.05)
    assert (tmp_path / "vllm.log").read_text() == "vllm: this image is broken on purpose\n"


def stop_here(pgid, timeout):
    """STOP_SCRIPT run by this machine's dash, as `docker exec <container> sh -c` runs it: what stop_group returns, and
    the seconds it took."""
    def run(args):
        assert args[:3] == ["docker", "exec", "c"]
        return in_dash(args, timeout=30)
    began = time.monotonic()
    return process_group.stop_group(run, "docker", "c", pgid, timeout), time.monotonic() - began


def group_of(tmp_path, script):
    """A process group of its own started as vLLM is (LAUNCH_SCRIPT: a shell and its child, as vLLM's API server and its
    engine), whose leader no test process waits for: its process group."""
    start, dummy = launch_here(tmp_path, ["sh", "-c", script])
    pgid = start()
    time.sleep(0.3)  # the shell sets its trap and starts its child
    return pgid


def gone(pgid):
    """No process of the group runs: each has ended (a zombie no init reaped on this machine is an ended process; in a
    container, its init reaps them)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % pid, encoding="utf-8") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return False
    return True


def test_a_group_that_stops_on_term_is_not_killed_and_is_left_as_soon_as_it_is_gone(tmp_path):
    pgid = group_of(tmp_path, "sleep 30 & wait")
    killed, took = stop_here(pgid, 60)
    assert killed is False and gone(pgid)
    assert took < 5  # one look every 0.1 s, not the 60 s it was given


def test_a_group_that_ignores_term_is_killed_after_its_time(tmp_path):
    pgid = group_of(tmp_path, "trap '' TERM; sleep 30 & wait")  # the shell and its child both ignore TERM (a child inherits it)
    killed, took = stop_here(pgid, 1)
    assert killed is True and gone(pgid)
    assert 1.5 <= took < 10  # its second, the kill, a second for the kernel


def test_a_group_already_gone_is_left_at_once(tmp_path):
    pgid = group_of(tmp_path, "true")
    killed, took = stop_here(pgid, 60)
    assert killed is False and took < 5
