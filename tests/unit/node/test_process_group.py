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
    argv = process_group.launch_argv("docker", "c", ["vllm", "serve", "m; rm -rf /"], "/run/vllm.json", "/logs/l")
    assert argv[:7] == ["docker", "exec", "-i", "c", "sh", "-c", process_group.LAUNCH_SCRIPT]
    assert argv[7:] == ["/run/vllm.json", "/logs/l", "vllm", "serve", "m; rm -rf /"]
    assert process_group.signal_argv("docker", "c", 42, "TERM")[-3:] == ["-TERM", "--", "-42"]
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


def test_a_launch_that_prints_no_process_group_is_refused_with_where_to_look():
    with pytest.raises(process_group.StartError, match="could not start vLLM in c: setsid: not found; see /logs/l there"):
        process_group.start_group(lambda argv, data=None: (127, "", "setsid: not found"), "docker", "c", ["vllm"], "h", "/run/s", "/logs/l")


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
