# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Exceptions of dgx_spark.vllm; their messages are written for the user and name the value."""

from __future__ import annotations


class ProbeError(Exception):
    """A probe input is missing or malformed; the message names the path or value."""
