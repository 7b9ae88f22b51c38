"""Action container: the plan's change none asks no node (nothing is run, not even Docker)."""

from helpers import run_action


def test_a_container_running_as_planned_is_left_alone_without_asking_docker():
    spec = {"name": "dgx-spark-ray-x", "image": "img", "command": ["ray"], "env": {}, "network_mode": "host", "ipc_mode": "host",
            "volumes": [], "labels": {}}
    result = run_action("container", {"spec": spec, "change": "none"})
    assert result["changed"] is False and result["change"] == "none" and "container" not in result


def test_an_unknown_change_is_refused():
    result = run_action("container", {"spec": {"name": "x"}, "change": "rebuild"})
    assert result["failed"] and "rebuild" in result["msg"]
