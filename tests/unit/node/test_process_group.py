"""process_group: vLLM's process group, argv builders and decisions (fact 3)."""

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
    argv = process_group.launch_argv("docker", "c", ["vllm", "serve", "m; rm -rf /"], "/run/p", "/logs/l")
    assert argv[:6] == ["docker", "exec", "-d", "c", "setsid", "sh"]
    assert argv[-1] == "m; rm -rf /" and argv[6:8] == ["-c", process_group.LAUNCH_SCRIPT]
    assert process_group.signal_argv("docker", "c", 42, "TERM")[-3:] == ["-TERM", "--", "-42"]
    assert process_group.parse_state('{"pgid": 42}') == {"pgid": 42} and process_group.parse_state("junk") is None


class Group:
    """Answers kill -0 as a process group that lives until it gets ``dies_on``; records every argv."""

    def __init__(self, dies_on):
        self.dies_on, self.alive, self.asked = dies_on, True, []

    def run(self, argv):
        self.asked.append(argv[3:])
        if argv[3:5] == ["kill", "-%s" % self.dies_on]:
            self.alive = False
        if argv[3:5] == ["kill", "-0"]:
            return (0 if self.alive else 1), "", ""
        return 0, "", ""


class Clock:
    def __init__(self):
        self.now = 0.0

    def sleep(self, seconds):
        self.now += seconds

    def __call__(self):
        return self.now


def test_a_group_that_stops_on_term_is_not_killed():
    group, clock = Group("TERM"), Clock()
    assert process_group.stop_group(group.run, "docker", "c", 42, 60, clock.sleep, clock) is False
    assert group.asked[0] == ["kill", "-TERM", "--", "-42"] and ["kill", "-KILL", "--", "-42"] not in group.asked
    assert clock.now == 0


def test_a_group_that_ignores_term_is_killed_after_the_timeout():
    group, clock = Group("KILL"), Clock()
    assert process_group.stop_group(group.run, "docker", "c", 42, 10, clock.sleep, clock) is True
    assert group.asked[-1] == ["kill", "-KILL", "--", "-42"] and 10 <= clock.now <= 11.5  # polls of 0.2 s, then 1 s
