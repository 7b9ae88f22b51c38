# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The front door's key file: only a no_log task may use this filter. A thin adapter of module_utils/plan/door.py,
documented beside this file (``ansible-doc -t filter dgx_spark.vllm.door_keys``)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import door


def door_keys(key):
    """The door's keys.conf for the deployment's key (the key is in it: only a no_log task may use this)."""
    try:
        return door.keys_conf((key or "").strip())
    except ValueError as error:
        raise AnsibleFilterError("the front door cannot take this key: %s" % error) from None


class FilterModule:
    """dgx_spark.vllm's front door filter."""

    def filters(self):
        return {"door_keys": door_keys}
