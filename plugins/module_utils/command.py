# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way modules of this collection run external commands: an argv list, never a shell
string, in the C locale so that parsers see the output they were written against."""

from __future__ import annotations

C_LOCALE = {"LC_ALL": "C", "LANG": "C", "LANGUAGE": "C"}


def run(module, argv, data=None, environ_update=None):
    """Run ``argv`` through ``module.run_command``; return (rc, stdout, stderr)."""
    environ = dict(C_LOCALE)
    environ.update(environ_update or {})
    return module.run_command([str(arg) for arg in argv], data=data, environ_update=environ)
