"""Module ray_cluster_info: Ray not reachable is said, not guessed (the join gate runs on the simulated cluster)."""

from helpers import run_module


def test_a_missing_container_fails_with_the_reason(tmp_path):
    docker = tmp_path / "docker"
    docker.write_text("#!/bin/sh\necho 'Error: No such container: ray-x' >&2\nexit 1\n")
    docker.chmod(0o755)
    result = run_module("ray_cluster_info", {"container": "ray-x", "docker": str(docker), "expected_nodes": 2})
    assert result["failed"] and "ray-x" in result["msg"]
