"""command: the one way modules run commands: an argv list of strings, in the C locale."""

import os
import shutil
import stat

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import command


class Recorder:
    """Stands where AnsibleModule.run_command is; records what it was asked."""

    def __init__(self):
        self.asked = None

    def run_command(self, argv, data=None, environ_update=None):
        self.asked = (argv, data, environ_update)
        return 0, "out", ""


def test_argv_is_strings_and_the_locale_is_c():
    module = Recorder()
    assert command.run(module, ["ss", "-H", 5], data="x", environ_update={"A": "1"}) == (0, "out", "")
    argv, data, environ = module.asked
    assert argv == ["ss", "-H", "5"] and data == "x"
    assert environ == {"LC_ALL": "C", "LANG": "C", "LANGUAGE": "C", "A": "1"}


def test_a_started_command_is_collected_with_its_output_in_the_c_locale():
    proc = command.start(["sh", "-c", 'echo "$LC_ALL"; echo oops >&2; exit 3'])
    assert command.collect(proc) == (3, "C\n", "oops\n")


def test_to_file_interleaves_stdout_and_stderr_into_the_file(tmp_path):
    path = tmp_path / "c.log"
    assert command.to_file(["sh", "-c", "echo one; echo two >&2; echo three"], str(path)) == 0
    assert path.read_text() == "one\ntwo\nthree\n"


def test_a_log_a_container_wrote_is_copied_only_when_it_is_a_regular_file_never_through_a_link(tmp_path):
    """Teardown copies the containers' logs out of the folder they write: a link they put there in place of a log
    (to a host file) is not followed, so root never reads that file into the controller's artifacts."""
    written, secret = tmp_path / "logs", tmp_path / "shadow"
    written.mkdir()
    secret.write_text("root:secret")
    (written / "vllm.log").write_text("INFO serving\n" * 1000)
    (written / "model-fetch.log").symlink_to(secret)
    os.mkfifo(written / "fifo.log")  # would block a plain open
    assert command.copy_regular(str(written / "vllm.log"), str(tmp_path / "vllm.log"), chunk=7)
    assert (tmp_path / "vllm.log").read_text() == "INFO serving\n" * 1000
    assert not command.copy_regular(str(written / "model-fetch.log"), str(tmp_path / "model-fetch.log"))
    assert not command.copy_regular(str(written / "fifo.log"), str(tmp_path / "fifo.log"))
    assert not command.copy_regular(str(written / "absent.log"), str(tmp_path / "absent.log"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "shadow", "vllm.log"]


def test_a_device_a_container_made_is_never_opened_and_a_planted_destination_is_replaced_not_followed(tmp_path):
    """A container can make device nodes in a folder it writes (Docker's default MKNOD): opening some acts (a
    watchdog arms), so root only looks at what is there before it opens anything. A link planted where root writes
    a log is removed, never written through."""
    written = tmp_path / "run"
    written.mkdir()
    try:
        os.mknod(written / "vllm.json", 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    except PermissionError:
        pytest.skip("this machine lets no one make device nodes")
    assert command.read_small(str(written / "vllm.json")) is None and command.open_regular(str(written / "vllm.json")) is None
    target = tmp_path / "cron-job"
    target.write_text("untouched\n")
    (tmp_path / "kept.log").symlink_to(target)
    (written / "big.log").write_bytes(b"a" * 100 + b"tail")
    assert command.copy_regular(str(written / "big.log"), str(tmp_path / "kept.log"), chunk=3, limit=10)
    assert target.read_text() == "untouched\n" and not (tmp_path / "kept.log").is_symlink()
    assert (tmp_path / "kept.log").read_bytes() == b"aaaaaatail"  # the last 10 bytes
    assert command.to_file(["echo", "docker logs"], str(tmp_path / "kept.log")) == 0 and target.read_text() == "untouched\n"
    assert command.read_small("/proc/meminfo").startswith("MemTotal:")  # a regular file of size 0, read whole


def test_a_module_run_through_sudo_knows_its_caller_and_root_or_no_sudo_has_none():
    if os.geteuid() != 0:
        pytest.skip("sudo's caller is read only by a module that runs as root")
    assert command.sudo_caller({"SUDO_UID": "1000", "SUDO_GID": "1001", "SUDO_USER": "nvidia"}) == (1000, 1001)
    assert command.sudo_caller({}) is None  # root's own SSH connection
    assert command.sudo_caller({"SUDO_UID": "0", "SUDO_GID": "0"}) is None  # root through sudo reads root's files itself
    assert command.sudo_caller({"SUDO_UID": "nvidia", "SUDO_GID": "1000"}) is None


def test_root_logs_are_staged_for_the_sudo_caller_alone_and_a_link_in_their_place_is_left_out(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only root gives a file to another user")
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)
    (logs / "vllm.log").write_text("INFO loaded\n")
    os.symlink("/etc/shadow", str(logs / "ray.log"))  # what a container could plant
    folder, staged = command.stage_for((1000, 1000), [str(logs / "vllm.log"), str(logs / "ray.log")], "dgx-spark-test-")
    try:
        assert sorted(staged) == [str(logs / "vllm.log")]
        copy = staged[str(logs / "vllm.log")]
        assert os.path.dirname(copy) == folder and open(copy, encoding="utf-8").read() == "INFO loaded\n"
        for path in (folder, copy):
            found = os.lstat(path)
            assert (found.st_uid, found.st_gid) == (1000, 1000) and found.st_mode & 0o077 == 0, (path, oct(found.st_mode))
    finally:
        shutil.rmtree(folder)
