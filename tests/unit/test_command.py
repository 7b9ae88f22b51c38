"""command: the one way modules run commands: an argv list of strings, in the C locale."""

from ansible_collections.dgx_spark.vllm.plugins.module_utils import command


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
