"""Module vllm_image_info: an image the node lacks is named before anything runs."""

from helpers import run_module


def test_an_image_the_node_lacks_is_named():
    result = run_module("vllm_image_info", {"image": "img:missing", "docker": "false"})
    assert result["failed"] and result["msg"] == "image img:missing is not on this node; build or load it first (the image role does)"
