"""Action report: a report written on the controller in Ansible's own process."""

import json

from helpers import run_action


def test_writes_indented_json_making_the_folder_and_reports_no_change(tmp_path):
    path = tmp_path / "artifacts" / "plan.json"
    result = run_action("report", {"path": str(path), "data": {"b": 1, "a": [1, 2]}})
    assert result["changed"] is False and json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    assert path.read_text().startswith('{\n    "a"')


def test_a_report_is_private_to_its_owner_even_over_an_older_world_readable_one(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("{}")
    path.chmod(0o644)
    run_action("report", {"path": str(path), "data": {"a": 1}})
    assert oct(path.stat().st_mode & 0o777) == "0o600" and json.loads(path.read_text()) == {"a": 1}


def test_a_copy_that_differed_from_the_cluster_s_record_is_replaced_with_a_warning_naming_the_fields(tmp_path):
    path = tmp_path / "last-known-good.json"
    path.write_text(json.dumps({"profile": "sim_tiny", "overrides": {"max_model_len": 512}, "image": "a"}))
    record = {"profile": "sim_tiny", "overrides": {"max_model_len": 768}, "image": "a", "verified_at": "now"}
    result = run_action("report", {"path": str(path), "data": record, "copy_of": "the head's last-known-good record"})
    assert json.loads(path.read_text()) == record and result["written"] is True
    assert result["warnings"] == [
        "The controller's copy %s differed from the head's last-known-good record in overrides, verified_at: "
        "the cluster's record wins, and the copy is now the same." % path]
    again = run_action("report", {"path": str(path), "data": record, "copy_of": "the head's last-known-good record"})
    assert again["written"] is False and not again.get("warnings")


def test_a_copy_written_for_the_first_time_warns_of_nothing(tmp_path):
    result = run_action("report", {"path": str(tmp_path / "lkg.json"), "data": {"a": 1}, "copy_of": "the head's record"})
    assert result["written"] is True and not result.get("warnings")


def test_a_copy_that_differed_in_layout_alone_is_rewritten_without_a_warning(tmp_path):
    path = tmp_path / "lkg.json"
    path.write_text('{"a": 1}')  # the same record, another writer's layout
    result = run_action("report", {"path": str(path), "data": {"a": 1}, "copy_of": "the head's record"})
    assert result["written"] is True and not result.get("warnings") and json.loads(path.read_text()) == {"a": 1}
