"""copy_progress_info: one look at an async copy (the job file async_wrapper writes, dd's byte count or the file
rsync --append grows), run as Ansible runs it on a node."""

import json

from helpers import run_module

GIB = 1024 ** 3


def test_a_running_stream_shows_its_bytes_and_an_ended_one_its_status(tmp_path):
    job, counted = tmp_path / "job", tmp_path / "copy.progress"
    job.write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "j1"}))
    counted.write_text("536870912 bytes (537 MB, 512 MiB) copied, 1 s, 537 MB/s\r1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2 s")
    running = run_module("copy_progress_info", {"results_file": str(job), "progress_file": str(counted),
                                                "total_bytes": 4 * GIB, "wait": 0})
    assert (running["finished"], running["exit_status"], running["copied_bytes"]) == (False, None, GIB)
    assert running["progress"] == "1.0 GiB of 4.0 GiB (25%)" and running["changed"] is False
    job.write_text(json.dumps({"rc": 1, "stdout": "", "delta": "0:00:03.5", "failed": True,
                               "stderr": "1073741824 bytes copied, 2 s\nssh: connect to host 10.0.0.2 port 22: No route to host"}))
    ended = run_module("copy_progress_info", {"results_file": str(job), "progress_file": str(counted), "wait": 5})
    assert (ended["finished"], ended["exit_status"]) == (True, 1)
    assert "rc" not in ended  # Ansible fails a task whose result has rc != 0: the look itself has not failed
    assert ended["stderr"] == "ssh: connect to host 10.0.0.2 port 22: No route to host"  # dd's counts left out


def test_an_rsync_pull_is_measured_by_the_file_it_grows(tmp_path):
    job, shard = tmp_path / "job", tmp_path / "model-00001-of-00002.safetensors"
    job.write_text(json.dumps({"started": 1, "finished": 0}))
    shard.write_bytes(b"\0" * 3 * 1024 * 1024)
    look = run_module("copy_progress_info", {"results_file": str(job), "path": str(shard), "total_bytes": 12 * 1024 * 1024,
                                             "wait": 0})
    assert look["progress"] == "3 MiB of 12 MiB (25%)" and not look["finished"]
    job.write_text(json.dumps({"rc": 0, "stdout": "Literal data: 12,582,912 bytes", "delta": "0:00:01.2"}))
    done = run_module("copy_progress_info", {"results_file": str(job), "path": str(shard), "wait": 0})
    assert (done["finished"], done["exit_status"], done["delta"]) == (True, 0, "0:00:01.2") and "Literal data" in done["stdout"]


def test_a_fetch_is_measured_by_the_files_under_the_models_folder(tmp_path):
    job, folder = tmp_path / "job", tmp_path / "models--org--name"
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / "a.incomplete").write_bytes(b"\0" * 2 * 1024 * 1024)
    (folder / "blobs" / "b").write_bytes(b"\0" * 1024 * 1024)
    (folder / "snapshots").mkdir()
    (folder / "snapshots" / "b").symlink_to(folder / "blobs" / "b")  # the cache's links count nothing
    job.write_text(json.dumps({"started": 1, "finished": 0}))
    look = run_module("copy_progress_info", {"results_file": str(job), "path": str(folder), "wait": 0})
    assert look["copied_bytes"] == 3 * 1024 * 1024 and look["progress"] == "3 MiB copied"
    assert run_module("copy_progress_info", {"results_file": str(job), "path": str(tmp_path / "none"), "wait": 0})["copied_bytes"] == 0
