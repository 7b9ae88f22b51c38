# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """Attribute documentation shared by the modules of dgx_spark.vllm."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
"""

    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details:
      - This module only reads state; it never changes anything.
  diff_mode:
    support: N/A
    details:
      - This module never changes anything, so there is nothing to diff.
"""

    ACTIONGROUP_VLLM = r"""
options: {}
attributes:
  action_group:
    description: Use C(group/dgx_spark.vllm.vllm) in C(module_defaults) to set defaults for this module.
    support: full
    membership:
      - dgx_spark.vllm.vllm
"""
