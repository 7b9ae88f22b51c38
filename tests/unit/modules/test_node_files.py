"""Module node_files, run as on a node: a secret file's content is written but never returned, logged or diffed; its
path and the other files' diffs are shown; a second run changes nothing."""

import json
import os
import stat

from helpers import run_module

KEY = "sk-test-3f9c1a7e5b2d4c6e8f0a1b2c3d4e5f60"


def test_the_key_is_written_never_returned_and_the_other_files_are_diffed(tmp_path):
    key_file, launcher = str(tmp_path / "secrets" / "vllm_api_key"), str(tmp_path / "bin" / "vllm-serve")
    args = {"folders": [{"path": str(tmp_path / "secrets"), "mode": "0700"}],
            "files": [{"path": launcher, "content": "#!/bin/sh\nexec vllm serve \"$@\"\n", "mode": "0755"}],
            "secret_files": [{"path": key_file, "content": KEY, "mode": "0600"}], "_ansible_diff": True}
    result = run_module("node_files", args)
    assert result["changed"] and result["written"] == [launcher, key_file] and result["made"] == [str(tmp_path / "secrets")]
    assert KEY not in json.dumps(result)  # not in the result, its diff or the logged invocation
    assert [d["after_header"] for d in result["diff"]] == [launcher] and "exec vllm serve" in result["diff"][0]["after"]
    assert open(key_file).read() == KEY and stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert run_module("node_files", args)["changed"] is False


def test_an_exclusive_folder_keeps_only_what_the_plan_writes_there(tmp_path):
    """Prometheus's keys (one per deployment): a key of a deployment gone, or a link put there, is removed in the call
    that writes the others; a folder inside one is refused before anything is written."""
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "gone").write_text("old key")
    os.symlink("/etc/shadow", str(keys / "planted"))
    wanted = str(keys / "dgx-spark")
    args = {"secret_files": [{"path": wanted, "content": KEY, "mode": "0400"}], "exclusive": [str(keys)]}
    result = run_module("node_files", args)
    assert result["changed"] and result["written"] == [wanted]
    assert result["removed"] == [str(keys / "gone"), str(keys / "planted")] and os.listdir(str(keys)) == ["dgx-spark"]
    assert os.path.exists("/etc/shadow") and run_module("node_files", args)["changed"] is False
    (keys / "a-folder").mkdir()
    os.unlink(wanted)
    refused = run_module("node_files", args)
    assert refused.get("failed") and "is a folder, not a file" in refused["msg"] and not os.path.exists(wanted)
