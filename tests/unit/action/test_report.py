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
