"""Module model_files_info: a model that is not on the node, and one that is, as the Hugging Face cache lays it out."""

import json

from helpers import run_module


def test_a_model_not_on_the_node(tmp_path):
    result = run_module("model_files_info", {"models_dir": str(tmp_path), "model": "org/m"})
    assert result["model"]["complete"] is False and result["model"]["message"].startswith("not on this node")


def test_a_complete_copy_from_its_index(tmp_path):
    snapshot = tmp_path / "huggingface" / "hub" / "models--org--m" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (tmp_path / "huggingface" / "hub" / "models--org--m" / "refs").mkdir()
    (tmp_path / "huggingface" / "hub" / "models--org--m" / "refs" / "main").write_text("a" * 40)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "tokenizer.json").write_text("{}")
    (snapshot / "model-00001-of-00001.safetensors").write_bytes(b"x" * 10)
    (snapshot / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors"}}))
    result = run_module("model_files_info", {"models_dir": str(tmp_path), "model": "org/m"})
    assert result["model"]["complete"] is True, result["model"]["message"]
    assert result["model"]["commit"] == "a" * 40
