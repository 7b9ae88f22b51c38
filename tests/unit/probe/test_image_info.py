"""image_info: reading an image's vLLM, flags and parsers."""

import json

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import image_info


def test_image_info_parsing():
    out = "noise\n" + json.dumps({"version": "0.32.0", "options": {"--x": None}}) + "\n"
    assert image_info.parse_probe_output(0, out, "", "img")["version"] == "0.32.0"
    with pytest.raises(image_info.ImageInfoError, match="image img is not on this node"):
        image_info.parse_probe_output(125, "", "Unable to find image 'img:latest' locally", "img")
    with pytest.raises(image_info.ImageInfoError, match="has no importable vLLM: import vllm: ModuleNotFoundError"):
        image_info.parse_probe_output(0, json.dumps({"version": None, "errors": ["import vllm: ModuleNotFoundError"]}), "", "img")
