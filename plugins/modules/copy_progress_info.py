#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: copy_progress_info
short_description: Look once at a copy running as an async job, and say how far it is
version_added: 1.0.0
description:
  - A copy of many gigabytes (an image streamed from the head, a model's weights) runs for minutes. Run as one task,
    it shows nothing until it ends; polled with C(async_status), it shows a red line per poll and no figure.
  - So the copy runs as an async job (C(async), C(poll=0)) that writes its byte count to O(progress_file) (the copy
    pipes through C(dd status=progress), which rewrites one line with the bytes so far), and a loop of this module
    (C(until)) reads the job's state and that count, and returns RV(progress) for the output to show.
  - It waits up to O(wait) seconds for the job to end, so a loop of it makes few calls. It changes nothing.
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.INFO_MODULE
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
options:
  results_file:
    description: The async job's results file (the C(results_file) its task registered).
    type: path
    required: true
  progress_file:
    description: Where the copy's C(dd status=progress) writes its byte count.
    type: path
  path:
    description:
      - Instead of O(progress_file), the file the copy writes in place (C(rsync --append) writes into the file itself),
        or the folder it fills (a model's cache folder); its size, or the size of the files under it, is the bytes so far.
    type: path
  total_bytes:
    description: The bytes the copy moves in all, when known (the image's size); the progress then says the share.
    type: int
  wait:
    description: Seconds to wait for the job to end before answering.
    type: int
    default: 5
"""

EXAMPLES = r"""
- name: Stream the image, its byte count in a file
  ansible.builtin.shell:
    cmd: set -o pipefail && docker save IMAGE | dd bs=4M status=progress 2>/tmp/copy.progress | ssh node docker load
    executable: /bin/bash
  async: 3600
  poll: 0
  register: copy_job

- name: Wait for the copy, showing the bytes copied
  dgx_spark.vllm.copy_progress_info:
    results_file: "{{ copy_job.results_file }}"
    progress_file: /tmp/copy.progress
    total_bytes: 12884901888
  register: copy_state
  until: copy_state.finished
  retries: 720
  delay: 0
"""

RETURN = r"""
finished:
  description: Whether the job has ended.
  returned: always
  type: bool
exit_status:
  description:
    - The copy's exit status, once it has ended.
    - Not named C(rc) because Ansible fails a task whose result has a non-zero C(rc), and this look has not failed
      even when the copy has; the task after the loop says what went wrong.
  returned: always
  type: int
stderr:
  description: The end of the copy's error output, once it has ended (without dd's byte counts).
  returned: always
  type: str
stdout:
  description: The copy's output, once it has ended (rsync's C(--stats), say).
  returned: always
  type: str
delta:
  description: How long the copy took (C(H:MM:SS.ffffff)), once it has ended.
  returned: always
  type: str
copied_bytes:
  description: Bytes copied so far.
  returned: always
  type: int
progress:
  description: How far the copy is.
  returned: always
  type: str
  sample: 3.2 GiB of 12.0 GiB (26%)
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import progress


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def size_of(path):
    """A file's size, or the sum of the regular files under a folder (links not followed); 0 when absent."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, dummy, files in os.walk(path):
        for name in files:
            try:
                found = os.lstat(os.path.join(root, name))
            except OSError:  # gone while walking (a .incomplete file renamed)
                continue
            total += found.st_size if not os.path.islink(os.path.join(root, name)) else 0
    return total


def job(path):
    """(finished, the job's result): async_wrapper writes {"started": 1, "finished": 0} until the module's result."""
    try:
        data = json.loads(read(path) or "{}")
    except ValueError:  # being written
        return False, {}
    return bool(data) and not (data.get("started") and not data.get("finished")), data


def main():
    module = AnsibleModule(
        argument_spec=dict(results_file=dict(type="path", required=True), progress_file=dict(type="path"), path=dict(type="path"),
                           total_bytes=dict(type="int"), wait=dict(type="int", default=5)),
        required_one_of=[("progress_file", "path")],
        mutually_exclusive=[("progress_file", "path")],
        supports_check_mode=True,
    )
    deadline = time.monotonic() + max(0, module.params["wait"])
    finished, data = job(module.params["results_file"])
    while not finished and time.monotonic() < deadline:
        time.sleep(0.5)
        finished, data = job(module.params["results_file"])
    if module.params["path"]:
        done = size_of(module.params["path"])
    else:
        done = progress.dd_bytes(read(module.params["progress_file"]))
    errors = [line for line in (data.get("stderr") or "").replace("\r", "\n").splitlines()
              if line.strip() and "copied," not in line and "records in" not in line and "records out" not in line]
    module.exit_json(changed=False, finished=finished, exit_status=data.get("rc", 0 if not data.get("failed") else 1) if finished else None,
                     stderr="\n".join(errors[-20:]), stdout=data.get("stdout") or "", delta=data.get("delta") or "0:00:00",
                     copied_bytes=done,
                     progress=progress.copied(done, module.params["total_bytes"]))


if __name__ == "__main__":
    main()
