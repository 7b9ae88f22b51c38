"""A plan's folders and files made in one call: made or written where they differ, nothing where they do not, nothing
in check mode."""

import os
import stat

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import files


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_missing_folders_and_files_are_made_then_a_second_call_changes_nothing(tmp_path):
    folders = [{"path": str(tmp_path / "state/run"), "mode": "0755"}, {"path": str(tmp_path / "state/secrets"), "mode": "0700"}]
    wanted = [{"path": str(tmp_path / "state/run/baseline.json"), "content": "{}\n", "mode": "0644"}]
    assert files.apply(folders, wanted, check=True) == ([f["path"] for f in folders], [wanted[0]["path"]], {wanted[0]["path"]: ""})
    assert not os.path.exists(tmp_path / "state")  # check mode touched nothing
    made, written, before = files.apply(folders, wanted)
    assert made == [f["path"] for f in folders] and written == [wanted[0]["path"]]
    assert mode_of(folders[1]["path"]) == 0o700 and mode_of(wanted[0]["path"]) == 0o644
    assert open(wanted[0]["path"]).read() == "{}\n"
    assert files.apply(folders, wanted) == ([], [], {})


def test_a_changed_content_or_mode_is_written_again_and_the_text_before_is_returned(tmp_path):
    path = str(tmp_path / "launcher.sh")
    files.apply([], [{"path": path, "content": "one\n", "mode": "0644"}])
    assert files.apply([], [{"path": path, "content": "two\n", "mode": "0644"}]) == ([], [path], {path: "one\n"})
    assert files.apply([], [{"path": path, "content": "two\n", "mode": "0755"}])[1] == [path] and mode_of(path) == 0o755
    os.chmod(str(tmp_path), 0o777)
    assert files.apply([{"path": str(tmp_path), "mode": "0755"}], [])[0] == [str(tmp_path)] and mode_of(str(tmp_path)) == 0o755


def test_an_owner_by_number_is_given_and_compared(tmp_path):
    folder = str(tmp_path / "data")
    uid = os.getuid()
    assert files.apply([{"path": folder, "mode": "0700", "owner": str(uid)}], [])[0] == [folder]
    assert os.stat(folder).st_uid == uid
    assert files.apply([{"path": folder, "mode": "0700", "owner": str(uid)}], []) == ([], [], {})
    assert files.uid_of("root") == 0 and files.uid_of(None) is None and files.uid_of("65534") == 65534


def test_a_file_no_longer_wanted_is_removed_a_link_as_the_link_and_a_folder_is_refused(tmp_path):
    kept = tmp_path / "target"
    kept.write_text("what the link names\n")
    old, link, folder = tmp_path / "old_key", tmp_path / "planted", tmp_path / "folder"
    old.write_text("key\n")
    link.symlink_to(kept)
    folder.mkdir()
    wanted = [str(old), str(link), str(tmp_path / "never-there")]
    assert files.remove(wanted, check=True) == [str(old), str(link)] and old.exists() and os.path.lexists(link)
    assert files.remove(wanted) == [str(old), str(link)]
    assert not os.path.lexists(old) and not os.path.lexists(link) and kept.read_text() == "what the link names\n"
    assert files.remove(wanted) == []  # a second call changes nothing
    try:
        files.remove([str(folder)])
    except ValueError as exc:
        assert str(folder) in str(exc) and folder.is_dir()
    else:
        raise AssertionError("a folder was not refused")
