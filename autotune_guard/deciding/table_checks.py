"""What a table's entry for a key is worth before the engine uses it: recorded against another
version of the kernel (named, refused, or under consensus timed again), or measured among fewer
candidates than the kernel has now (only the new ones are timed, ``known``)."""

from __future__ import annotations

import logging
from typing import Callable

from ..core import pooling as core_pooling
from ..core import tables
from ..core.errors import SelectionError
from ..core.model import ChoiceKey, provenance_differences, signature
from ..core.numerics import numerics_differences, numerics_message
from ..runtime import Epoch, current
from . import retime


def measured_on(arch: str) -> dict:
    """What a selection's timings hold for: timings of another arch or versions are not compared."""
    versions = current().facts.versions()
    return {"arch": arch, "triton": versions.get("triton"), "torch": versions.get("torch")}


def check_table_provenance(epoch: Epoch, key: ChoiceKey, live: Callable[[], dict | None]) -> None:
    """A family's ``check_provenance``: a table entry for ``key`` recorded against another version
    of the kernel than ``live()`` (its provenance now, asked only where there is an entry) is named
    once per kernel, and refused with AUTOTUNE_ON_MISS=error."""
    guard = current()
    if guard.table_entry(epoch, key.arch, key.kernel, key.key) is None:
        return
    stores = guard.facts.get("table_store")  # adapters.redis_tables: an entry a store holds under a bare name
    bare = stores.bare_name_note(epoch, key) if stores is not None else None
    if bare is not None:
        _stale(guard, epoch, key, f"bare store name {key.kernel}", bare)
    recorded = tables.table_provenance(epoch.tables.get(key.arch, {}), key.kernel)
    now = live() if isinstance(recorded, dict) else None
    differs = provenance_differences(recorded, now) if now is not None else []
    other_numerics = numerics_differences(recorded, now) if now is not None else []
    consensus_retimes = epoch.policy.mode == "consensus" and epoch.policy.on_miss != "error"
    if consensus_retimes and now is not None and recorded.get("triton") and now.get("triton") \
            and recorded["triton"] != now["triton"]:  # as Triton's own cache: another release, timed again
        differs = differs + [f"Triton {recorded['triton']} then, {now['triton']} now"]
    if other_numerics and not consensus_retimes:  # before the version check: refused, or named once and used
        _stale(guard, epoch, key, f"numerics {key.kernel}", numerics_message(key.kernel, other_numerics))
    if consensus_retimes and differs and not other_numerics and _measured_grows(epoch, key, differs):
        return  # only its candidates grew: the new ones are timed against the kept timings (_known)
    if consensus_retimes and (differs or other_numerics):  # as Triton does: timed again
        epoch.retimed[key] = "stale"
        guard.warn_once(f"stale retimed {key.kernel}", (
            f"kernel {key.kernel}: its table entries were recorded against another version of it "
            f"({', '.join(differs + other_numerics)}); consensus times its keys again, and the table keeps the "
            "older version's entries apart (report show; report prune --superseded drops them)"))
    elif differs:
        _stale(guard, epoch, key, f"stale provenance {key.kernel}",
               f"kernel {key.kernel}: its table entries were recorded against another version of it "
               f"({', '.join(differs)}); record and merge it again (a table consensus grows: the next consensus "
               "run times it again)")


def _stale(guard, epoch: Epoch, key: ChoiceKey, once: str, message: str) -> None:
    """Refuse a table entry with AUTOTUNE_ON_MISS=error; else name it once per kernel and use it."""
    if epoch.policy.on_miss == "error":
        raise SelectionError(f"autotune_guard: {key.what()}: {message}; refused with AUTOTUNE_ON_MISS=error")
    guard.warn_once(once, message + "; its entries are used where a config still matches")


def _measured_grows(epoch: Epoch, key: ChoiceKey, differs: list) -> bool:
    """Only the candidate list changed and the table kept the key's timings: consensus times the new
    candidates against them (``_known``) instead of naming the entry stale (AUTOTUNE_ON_MISS=error
    still refuses it: nothing is tuned that the table was to decide)."""
    return all(d.startswith(tables.CANDIDATES_GREW) for d in differs) and \
        tables.table_measured(epoch.tables.get(key.arch, {}), key.kernel, key.key) is not None


def known(guard, epoch: Epoch, tunable) -> tuple | None:
    """The timings the table kept for the key, where they were measured here (arch, versions) and the
    live candidates include new ones: only those are timed (``retime.known_timings``)."""
    key = tunable.key
    measured = tables.table_measured(epoch.tables.get(key.arch, {}), key.kernel, key.key)
    signatures = [signature(d) for d in tunable.descriptors]
    covered = {sig for m in core_pooling.comparable(measured, measured_on(key.arch)) for sig in m["candidates"]}
    if covered >= set(signatures):  # a pooling run timed only those that contended: none is new
        return None
    known = retime.known_timings(measured, signatures, measured_on(key.arch))
    if known is None:
        return None
    guard.warn_once(f"candidates grew {key.text()}", (
        f"{key.what()}: the table's entry was chosen among {len(known)} of today's {len(signatures)} candidates; "
        f"the {len(signatures) - len(known)} new one(s) are timed against the kept timings"), logging.INFO,
        name="candidates-grew")
    return known, retime.kept_winner(measured, signatures)
