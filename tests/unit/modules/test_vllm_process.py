"""Module vllm_process: what it refuses before touching a container (the runs are proven on the simulated cluster)."""

from helpers import run_module


def test_starting_needs_the_command():
    result = run_module("vllm_process", {"container": "c", "state": "started"})
    assert result["failed"] and "argv" in result["msg"]


def test_a_container_that_does_not_exist_is_named(tmp_path):
    docker = tmp_path / "docker"
    docker.write_text("#!/bin/sh\necho 'Error: No such container: c' >&2\nexit 1\n")
    docker.chmod(0o755)
    result = run_module("vllm_process", {"container": "c", "state": "probed", "docker": str(docker)})
    assert result["failed"] and result["msg"] == "container c does not exist; start the Ray cluster first (playbooks/serve.yml)"
