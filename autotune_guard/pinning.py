"""The pinned decision: which candidate a pinned kernel runs for one key, and why.

One rule for both adapters: an eager launch (``interception``) and a kernel compiled by Inductor
(``inductor``) reach it through ``pinned_index`` alone, so the two can never pick differently.
It looks up the installed tables (read once per policy and arch, kept on the process state), then
applies ``selection.select`` and ``AUTOTUNE_CHAOS``.  Plain data: imports neither Triton nor
torch; what only Triton can say (the arch, the defaults of a Config's options) the Triton adapter
has put on ``state.now.lasting`` before any decision is asked for.
"""

from __future__ import annotations

import logging

from . import files, selection, state, writer

logger = logging.getLogger("autotune_guard")


def pinned_index(qualified: str, text: str, descriptors: list, policy, arch: str | None = None) -> tuple[int, str]:
    """Which of ``descriptors`` pinned mode runs for kernel ``qualified`` and key ``text``, and why
    (``table``, ``block_sizes``, the on-miss rule, or ``chaos``).  ``arch``: the process's by default."""
    process = state.now
    lasting = process.lasting
    arch = arch or lasting.arch
    entry = files.table_entry(tables_for(process, arch), qualified, text)
    index, why, warning = selection.select(
        descriptors, table_entry=entry, block_sizes=policy.block_sizes, on_miss=policy.on_miss,
        defaults=lasting.config_defaults or {}, what=f"kernel {qualified} key ({text}) arch {arch}",
    )
    if warning and warning not in process.warned:
        process.warned.add(warning)
        logger.warning("%s; using %s", warning, why)
    if policy.chaos:
        # The rank the evidence is filed under: the choice about to be logged fixes it anyway.
        index = selection.chaos_shift(index, len(descriptors), writer.fix_rank()[0])
        why = "chaos"
    return index, why


def tables_for(process, arch: str) -> dict:
    """``{kernel: {key: entry}}`` of the policy's tables for ``arch``, read at the first need."""
    tables = process.tables.get(arch)
    if tables is None:
        tables = process.tables[arch] = files.load_tables(process.policy.table_path, arch, writer.versions())
    return tables
