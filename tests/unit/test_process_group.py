"""process_group: vLLM's process group, argv builders and decisions (fact 3)."""

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils import process_group


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
    argv = process_group.launch_argv("docker", "c", ["vllm", "serve", "m; rm -rf /"], "/run/p", "/logs/l")
    assert argv[:6] == ["docker", "exec", "-d", "c", "setsid", "sh"]
    assert argv[-1] == "m; rm -rf /" and argv[6:8] == ["-c", process_group.LAUNCH_SCRIPT]
    assert process_group.signal_argv("docker", "c", 42, "TERM")[-3:] == ["-TERM", "--", "-42"]
    assert process_group.parse_state('{"pgid": 42}') == {"pgid": 42} and process_group.parse_state("junk") is None
