"""Module node_teardown, run as on a node: without a Docker daemon it fails naming the node, before touching anything."""

from helpers import run_module


def test_a_node_without_docker_is_named(tmp_path):
    result = run_module("node_teardown", {"cluster": "dgx-spark", "node": "spark2", "logs_dir": str(tmp_path / "logs"),
                                          "docker": "false"})
    assert result["failed"] and result["msg"].startswith("spark2: docker ps failed (rc=1)")
    assert not (tmp_path / "logs").exists()
