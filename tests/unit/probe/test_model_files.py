"""Is a model complete on a node: the hub cache layout huggingface_hub writes, judged against the manifest the fetch
recorded. The fixtures are captures of a real fetch (the simulated hub, huggingface_hub 2.4): the manifest and the
safetensors index; the files are rebuilt here at their captured sizes."""

import json
import os

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import model_files as mf

from helpers import fixture, make_cache

FIXTURES = fixture("model")
REPO = "dgx-spark-sim/sim-tiny"


def load(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return json.load(handle)


@pytest.fixture(name="manifest")
def fixture_manifest():
    return load("manifest.json")


def judge(snapshot, manifest):
    index = mf.read_text(os.path.join(snapshot, mf.INDEX))
    return mf.check(mf.walk(snapshot), manifest, index)


def test_the_captured_fetch_is_sharded_with_an_index(manifest):
    shards = mf.index_shards(json.dumps(load("model.safetensors.index.json")))
    assert len(shards) >= 2 and all(s in manifest["files"] for s in shards)
    assert all(manifest["files"][s]["sha256"] for s in shards)


def test_a_complete_copy(tmp_path, manifest):
    root, snapshot = make_cache(str(tmp_path), manifest)
    where = mf.locate(str(tmp_path), REPO)
    assert where == {"kind": "hub", "root": root, "snapshot": snapshot, "commit": manifest["commit"], "revision": "main"}
    result = judge(snapshot, manifest)
    assert result["complete"], result
    assert result["bytes_present"] == result["bytes_expected"] == sum(f["size"] for f in manifest["files"].values())
    assert mf.describe(result) == "complete"


def test_a_truncated_shard_is_named_with_both_sizes(tmp_path, manifest):
    shard = mf.index_shards(json.dumps(load("model.safetensors.index.json")))[1]
    size = manifest["files"][shard]["size"]
    dummy, snapshot = make_cache(str(tmp_path), manifest, sizes={shard: size // 3})
    result = judge(snapshot, manifest)
    assert not result["complete"]
    assert result["wrong_size"] == [{"path": shard, "expected": size, "actual": size // 3}]
    assert shard in mf.describe(result)
    assert result["bytes_present"] == result["bytes_expected"] - size + size // 3


def test_a_missing_shard_and_tokenizer(tmp_path, manifest):
    shard = mf.index_shards(json.dumps(load("model.safetensors.index.json")))[0]
    dummy, snapshot = make_cache(str(tmp_path), manifest, skip=(shard, "tokenizer.json"))
    result = judge(snapshot, manifest)
    assert sorted(result["missing"]) == sorted([shard, "tokenizer.json"])


def test_without_a_manifest_the_index_and_config_still_decide(tmp_path, manifest):
    shard = mf.index_shards(json.dumps(load("model.safetensors.index.json")))[0]
    dummy, snapshot = make_cache(str(tmp_path), manifest, skip=(shard,))
    result = judge(snapshot, None)
    assert result["missing"] == [shard]
    dummy, snapshot = make_cache(str(tmp_path / "b"), manifest, skip=("config.json",))
    assert "config.json" in judge(snapshot, None)["missing"]


def test_an_index_naming_a_shard_the_repository_lacks_is_broken(tmp_path, manifest):
    shard = mf.index_shards(json.dumps(load("model.safetensors.index.json")))[-1]
    listing = dict(manifest, files={p: m for p, m in manifest["files"].items() if p != shard})
    dummy, snapshot = make_cache(str(tmp_path), listing)
    result = judge(snapshot, listing)
    assert result["broken"] == ["%s names %s, which the repository does not have" % (mf.INDEX, shard)]
    assert not result["complete"]


def test_a_checksum_mismatch_is_corrupt(tmp_path, manifest):
    dummy, snapshot = make_cache(str(tmp_path), manifest)
    shard = mf.index_shards(json.dumps(load("model.safetensors.index.json")))[0]
    result = mf.check(mf.walk(snapshot), manifest, None, checksums={shard: "0" * 64})
    assert result["corrupt"] == [shard] and not result["complete"]


def test_transient_files_of_an_interrupted_fetch_are_not_files(tmp_path, manifest):
    dummy, snapshot = make_cache(str(tmp_path), manifest)
    open(os.path.join(snapshot, "x.safetensors.incomplete"), "w", encoding="utf-8").close()
    assert "x.safetensors.incomplete" not in mf.walk(snapshot)


def test_a_dangling_link_is_missing(tmp_path, manifest):
    root, snapshot = make_cache(str(tmp_path), manifest)
    os.remove(os.path.join(root, "blobs", manifest["files"]["config.json"]["sha256"] or "oid-config.json"))
    assert "config.json" in judge(snapshot, manifest)["missing"]


def test_revisions_and_path_models(tmp_path):
    commit = "a" * 40
    assert mf.locate("/m", REPO, commit)["snapshot"] == "/m/huggingface/hub/models--dgx-spark-sim--sim-tiny/snapshots/" + commit
    assert mf.locate("/m", REPO, "v1", read=lambda path: None)["snapshot"] is None
    assert mf.locate("/m", "/models/my-model")["root"] == "/m/my-model"
    assert mf.manifest_key(REPO, commit) == "models--dgx-spark-sim--sim-tiny@" + commit


@pytest.mark.parametrize("model_id, revision", [("no-slash", None), ("a/b/c", None), (REPO, "../x"), (REPO, "a/b")])
def test_bad_ids_and_revisions_are_refused(model_id, revision):
    with pytest.raises(mf.ModelError):
        mf.locate("/m", model_id, revision)


def test_rsync_stats_give_the_bytes_an_append_sent_and_the_rate():
    with open(os.path.join(FIXTURES, "rsync-append-stats.txt"), encoding="utf-8") as handle:
        stats = handle.read()
    summary = mf.copy_summary([{"stdout": stats, "delta": "0:00:00.500000"}, {"stdout": "", "delta": "0:00:01.500000"}])
    # The file was 300,000 bytes; 100,000 were there: only the tail went over.
    assert summary == {"bytes": 200000, "seconds": 2.0, "rate_bytes_per_second": 100000}
    assert mf.copy_summary([])["rate_bytes_per_second"] is None


def test_the_probe_reads_a_copy_as_the_model_step_would(tmp_path, manifest):
    """node_probe.model_copy: what the plan judges each node's copy by (plan/changes.model_copies)."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import node_probe
    assert node_probe.model_copy(str(tmp_path / "none"), REPO) == {
        "commit": None, "snapshot": None, "present": {}, "shards": None, "manifest": None}
    assert node_probe.model_copy(str(tmp_path), "not a repository") is None
    dummy, snapshot = make_cache(str(tmp_path), manifest, record=True)
    read = node_probe.model_copy(str(tmp_path), REPO)
    assert read["manifest"] == manifest and read["present"] == mf.walk(snapshot)
    assert read["shards"] == mf.index_shards(json.dumps(load("model.safetensors.index.json")))
    index = os.path.join(snapshot, mf.INDEX)
    os.remove(index)
    with open(index, "w", encoding="utf-8") as handle:
        handle.write("{not json")
    assert node_probe.model_copy(str(tmp_path), REPO)["shards"] == "unreadable"
