# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the model role: byte counts as a person reads them, and what a copy moved. Thin adapters of
module_utils/probe/model_files.py; each is documented beside this file (``ansible-doc -t filter dgx_spark.vllm.<name>``)."""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import model_files


def human_bytes(size):
    """A byte count as a person reads it (GiB, MiB, ...)."""
    return model_files.human(None if size is None else int(size))


def rsync_summary(results):
    """What rsync's runs moved: bytes, seconds and the rate."""
    return model_files.copy_summary(results)


class FilterModule:
    """dgx_spark.vllm's model filters."""

    def filters(self):
        return {"human_bytes": human_bytes, "rsync_summary": rsync_summary}
