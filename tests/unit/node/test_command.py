"""command: the one way modules run commands: an argv list of strings, in the C locale."""

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
