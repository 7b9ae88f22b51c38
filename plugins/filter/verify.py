# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the verify steps: what runs, read back against the plan (environment parity, the NCCL transport) and the
canary's answers against the model's reference. Thin adapters of module_utils/verify; each is documented beside this
file (``ansible-doc -t filter dgx_spark.vllm.<name>``)."""

from __future__ import annotations

from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import canary, nccl_log, parity


def env_parity(planned, actual, what="container"):
    """The differences between each node's planned environment and what runs there, one sentence each."""
    return parity.check(planned, actual, what)


def environ_vars(text):
    """A process's environment (``/proc/<pid>/environ`` as ``tr '\\0' '\\n'`` prints it) as a mapping."""
    return parity.parse_environ_dump(text)


def nccl_transport(text, expect_ib=True, strict=False):
    """The transport NCCL used, from a rank's log (or the head's, as the read of the ranks' environments carries it):
    its verdict, the transport and what the log says."""
    log = parity.split_read(text)[1]
    return nccl_log.verdict(text if log is None else log, expect_ib=expect_ib, strict=strict)


def canary_reference(stored, answers, basis_now, recorded_at):
    """The reference file with these answers kept as the reference of their model."""
    return canary.keep(stored, basis_now["model"], canary.reference(answers, basis_now, recorded_at))


def canary_verdict(stored, basis_now, answers, settings):
    """The comparison with the model's reference, or None when the model has none yet."""
    kept = canary.stored_for(stored, basis_now["model"])
    return canary.compare(kept, basis_now, answers, settings) if kept else None


class FilterModule:
    """dgx_spark.vllm's verify filters."""

    def filters(self):
        return {"env_parity": env_parity, "environ_vars": environ_vars, "nccl_transport": nccl_transport,
                "canary_reference": canary_reference, "canary_verdict": canary_verdict}
