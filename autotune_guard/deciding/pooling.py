"""AUTOTUNE_POOL_RUNS=N: a table's key is timed again by the next cold runs of a job until every
candidate that still contends was timed by N runs, and its entry becomes the winner pooled over
their measurements (``core.pooling``); then the key is the table's, untimed. A candidate the runs
found far behind is not timed again, and a candidate new since (the kernel gained it) makes the
key pool again. A run that pools a key is slower than one that reads it, so the log says so."""

from __future__ import annotations

import logging
from typing import Callable, Mapping, NamedTuple

from ..core import pooling, tables
from ..core.model import signature
from ..core.selection import TIE_FLOOR, UNTIMED
from ..core.store_url import store_urls
from ..runtime import current


class Plan(NamedTuple):
    """What a pooling run does for a key: the comparable runs the table kept, and the indices of the
    candidates it times (those that still contend)."""

    kept: list
    indices: list


def plan(epoch, tunable, measured_on: Callable[[str], Mapping]) -> Plan | None:
    """The pooling this run does for ``tunable``'s key (``measured_on(arch)``: what comparable runs
    were measured on); None where the entry stands: pooling off, the key settled, no kept
    measurement of this arch and versions, a table that cannot grow (said once), or a family that
    cannot time one candidate (its one pass is kept)."""
    wanted = epoch.policy.pool_runs
    if wanted <= 1 or not tunable.splits or len(tunable.descriptors) < 2 or not grows(epoch):
        return None
    key = tunable.key
    measured = tables.table_measured(epoch.tables.get(key.arch, {}), key.kernel, key.key)
    kept = pooling.comparable(measured, measured_on(key.arch))
    signatures = [signature(d) for d in tunable.descriptors]
    todo = pooling.to_time(kept, signatures, wanted) if kept else None
    if todo is None:
        return None
    return Plan(kept, [signatures.index(sig) for sig in todo])


def grows(epoch) -> bool:
    """Whether this policy's table can take pooled winners: a directory or a store first in
    AUTOTUNE_TABLE_PATH. Table files alone are pinned as they are, said once (timing keys again
    that nothing can keep would cost every run its tuning)."""
    policy = epoch.policy
    if store_urls(policy.table_path) or tables.writable_table_dir(policy.table_path) is not None:
        return True
    current().warn_once("pooling: table files", (
        f"AUTOTUNE_POOL_RUNS={policy.pool_runs}: AUTOTUNE_TABLE_PATH names table files only, which consensus "
        "does not grow: their entries are pinned as they are and no key is pooled; name a table directory "
        "to pool"))
    return False


def say_first_run(guard, epoch, tunable) -> None:
    """Run 1 of a pooling: a key new to the table is timed now, and again by the next cold runs."""
    wanted = epoch.policy.pool_runs
    if wanted > 1 and tunable.splits and len(tunable.descriptors) > 1 and grows(epoch):
        guard.warn_once("pooling: first run", (
            f"AUTOTUNE_POOL_RUNS={wanted}: keys new to the table are timed by this run and again by the next "
            f"{wanted - 1} cold run(s), which pool their winners; later runs time nothing"), logging.INFO,
            name="pooling-run")


def pooled(guard, epoch, tunable, tuned, kept: list):
    """``tuned`` (this run's selection, not launched yet) with the winner pooled over it and the ``kept``
    runs' measurements, said once per key; as it was where no candidate could be compared."""
    signatures = [signature(d) for d in tunable.descriptors]
    if tuned.measured.get("how") == UNTIMED:  # this run timed nothing: nothing to pool (said by the engine)
        return tuned
    found = pooling.pool([tuned.measured, *kept], signatures)
    if found is None:
        return tuned
    own = tuned.measured.get("winner")
    tie = f"a tie of {len(found.tied) + 1} within {TIE_FLOOR * 100:g} %, the one declared first"
    verdict = [tie if found.tied else "clear"]
    verdict += [] if found.margin is None else [f"the next {found.margin * 100:.2f} % slower"]
    verdict += [] if own == found.winner else [f"this run's own: {own}"]
    timed = len(tuned.measured.get("candidates") or {})
    guard.warn_once(f"pooled {tunable.key.text()}", (
        f"{tunable.key.what()}: {timed} of {len(signatures)} candidates timed again to pool {found.runs} cold runs "
        f"(AUTOTUNE_POOL_RUNS={epoch.policy.pool_runs}); the table's winner is now {found.winner} "
        f"({'; '.join(verdict)})"), logging.INFO, name="pooling-run")
    winner = tunable.descriptors[signatures.index(found.winner)]
    settled = pooling.left_out(tuned.measured, signatures)
    return tuned._replace(winner=winner, measured={**tuned.measured, "pooled": found.as_dict(),
                                                   **({pooling.SETTLED: settled} if settled else {})})
