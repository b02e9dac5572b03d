"""AUTOTUNE_POOL_RUNS=N: a table's key is timed again by each of the first N cold runs of a job,
and its entry becomes the winner pooled over their measurements (``core.pooling``); from run N+1
on, the key is the table's, untimed. A run that pools a key is slower than one that reads it, so
the log names each such key."""

from __future__ import annotations

import logging
from typing import Callable, Mapping

from ..core import pooling, tables
from ..core.model import signature
from ..core.selection import TIE_FLOOR


def runs_kept(epoch, tunable, measured_on: Callable[[str], Mapping]) -> list | None:
    """The comparable measurements (``measured_on(arch)``: what they must have been measured on) the
    table kept for ``tunable``'s key where AUTOTUNE_POOL_RUNS asks for more runs than that (this run
    times the key again and pools); None where the entry stands (pooling off, enough runs, or a
    family that cannot time one candidate: its one pass is kept)."""
    wanted = epoch.policy.pool_runs
    if wanted <= 1 or not tunable.splits or len(tunable.descriptors) < 2:
        return None
    key = tunable.key
    measured = tables.table_measured(epoch.tables.get(key.arch, {}), key.kernel, key.key)
    kept = pooling.comparable(measured, measured_on(key.arch))
    return kept if kept and len(kept) < wanted else None


def pooled(guard, epoch, tunable, tuned, kept: list):
    """``tuned`` (this run's selection, not launched yet) with the winner pooled over it and the ``kept``
    runs' measurements, said once per key; as it was where no candidate was timed by every run."""
    signatures = [signature(d) for d in tunable.descriptors]
    found = pooling.pool([tuned.measured, *kept], signatures)
    if found is None:
        return tuned
    own = tuned.measured.get("winner")
    tie = f"a tie of {len(found.tied) + 1} within {TIE_FLOOR * 100:g} %, the one declared first"
    verdict = [tie if found.tied else "clear"]
    verdict += [] if found.margin is None else [f"the next {found.margin * 100:.2f} % behind"]
    verdict += [] if own == found.winner else [f"this run's own: {own}"]
    guard.warn_once(f"pooled {tunable.key.text()}", (
        f"{tunable.key.what()}: timed again to pool {found.runs} of AUTOTUNE_POOL_RUNS={epoch.policy.pool_runs} "
        f"cold runs; the table's winner is now {found.winner} ({'; '.join(verdict)})"), logging.INFO,
        name="pooling-run")
    winner = tunable.descriptors[signatures.index(found.winner)]
    return tuned._replace(winner=winner, measured={**tuned.measured, "pooled": found.as_dict()})
