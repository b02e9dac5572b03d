"""One kernel's part of a store's table, written as a table file is: a writer reads the part (a
table document of that kernel: entries, who added each, measurements, a retune asked for, its
provenance and superseded versions), makes the part it wants (``core.table_writes.grow_table`` for
a job, ``imported`` for ``report store-import``), and the store writes what differs between the two
(``writes``) in one transaction (``client.Store.update_kernel``). No ``redis`` here: the client
sends what this module says."""

from __future__ import annotations

import os
import time
from typing import Mapping, NamedTuple

from ...core.model import provenance_differences, signature
from ...core.pooling import EARLIER
from ...core.store_values import MEASURED, RETUNE, SUPERSEDED, stored_value, value_bytes
from ...core.tables import EARLIER_KEPT

UPGRADE_KEPT = "store-upgrade: held two ways, the older hash's entry kept (jobs read it first)"  # a replaced entry's why


class Part(NamedTuple):
    """A kernel's part as a writer read it: the table document, whether the arch's older one-hash
    layout exists, the provenance as the store holds it (bytes; its length where over the bound;
    None: none), each superseded version's field (``id(item) -> field``), and the kernel's hash's
    field count where it is over ``client.MAX_KERNEL_FIELDS`` (not read; 0: read)."""

    document: dict
    older: bool
    provenance: bytes | int | None
    superseded: dict
    length: int = 0

    def unreadable_provenance(self, kernel: str) -> bool:
        """Whether the store holds a provenance for ``kernel`` that could not be used (said by the read)."""
        return self.provenance is not None and kernel not in self.document["provenance"]


class Writes(NamedTuple):
    """What a write changes in the store: the kernel's hash (fields set, fields removed), its
    measurements (set, removed), superseded versions added, and its provenance (None: as it is)."""

    entries: list
    removed: list
    measured: list
    measured_removed: list
    superseded: list
    provenance: bytes | None

    def __bool__(self) -> bool:
        return any((self.entries, self.removed, self.measured, self.measured_removed, self.superseded,
                    self.provenance is not None))

    def arguments(self) -> list:
        """The write script's counts then items (``client._WRITE``)."""
        counts = [len(self.entries), len(self.removed), len(self.measured), len(self.measured_removed),
                  len(self.superseded)]
        flat = [item for pair in self.entries for item in pair] + list(self.removed)
        flat += [item for pair in self.measured for item in pair] + list(self.measured_removed)
        flat += [item for pair in self.superseded for item in pair]
        return [*counts, *flat]


def values(document: Mapping, kernel: str) -> dict:
    """key -> what the kernel's hash holds for it (``store_values.stored_value``)."""
    part = lambda name: (document.get(name) or {}).get(kernel) or {}  # noqa: E731
    added, retune = part("added"), part(RETUNE)
    return {key: stored_value(entry, added.get(key), retune.get(key)) for key, entry in part("kernels").items()}


def writes(before: Part, after: Mapping, kernel: str) -> Writes:
    """What turns ``before`` (read) into ``after`` (a table document) for ``kernel``: a field is
    written only where its value changed, so that two writers of different keys never meet."""
    entries, removed = _changed(values(before.document, kernel), values(after, kernel))
    measured, measured_removed = _changed((before.document.get(MEASURED) or {}).get(kernel) or {},
                                          (after.get(MEASURED) or {}).get(kernel) or {})
    held = {value_bytes(item) for item in before.document.get(SUPERSEDED) or () if item.get("kernel") == kernel}
    stamp = f"{time.time_ns():020d}-{os.getpid()}"
    new = [value_bytes(item) for item in after.get(SUPERSEDED) or () if item.get("kernel") == kernel]
    superseded = [(f"{stamp}-{n:04d}", item) for n, item in enumerate(i for i in new if i not in held)]
    provenance = (after.get("provenance") or {}).get(kernel)
    was = (before.document.get("provenance") or {}).get(kernel)
    changed = provenance is not None and (was is None or value_bytes(provenance) != value_bytes(was))
    return Writes(entries, removed, measured, measured_removed, superseded,
                  value_bytes(provenance) if changed else None)


def _changed(before: Mapping, after: Mapping) -> tuple[list, list]:
    """(field, bytes) for each key whose value is new or changed; the keys gone."""
    written = [(key, value_bytes(value)) for key, value in sorted(after.items())
               if key not in before or value_bytes(before[key]) != value_bytes(value)]
    return written, sorted(set(before) - set(after))


def imported(part: Part, table: Mapping, kernel: str, who: Mapping) -> tuple[dict | None, int, list[str]]:
    """``part`` with the keys of ``table``'s ``kernel`` it lacks, each with who added it (the
    table's word, else ``who``), its measurements and a retune asked for, the kernel's provenance
    where the store has none, and its superseded versions the store lacks: (the part to write, or
    None; entries added; notes). A kernel the store holds against another version of it gets
    nothing. The first writer wins: an entry the store holds, and its measurements, stay."""
    shown = part.document["source"].get("store", "the table store")
    recorded = _map(table, "provenance").get(kernel)
    held = part.document["provenance"].get(kernel)
    entries = _map(table, "kernels").get(kernel) or {}
    if part.unreadable_provenance(kernel) or version_differs(held, recorded):
        return None, 0, [f"{shown}: kernel {kernel} is held there against another version of it: its "
                         f"{len(entries)} entries are not added"]
    after = {name: {k: dict(v) for k, v in (part.document.get(name) or {}).items()}
             for name in ("kernels", "added", MEASURED, RETUNE, "provenance")}
    said = _map(table, "added").get(kernel) if isinstance(_map(table, "added").get(kernel), dict) else {}
    count, kept_measured = 0, 0
    for key, entry in sorted(entries.items()):
        if key in after["kernels"].get(kernel, {}):
            theirs = (_map(table, MEASURED).get(kernel) or {}).get(key)
            ours = after[MEASURED].get(kernel, {}).get(key)
            kept_measured += theirs is not None and (ours is None or value_bytes(ours) != value_bytes(theirs))
            continue
        beside = {"added": said.get(key) if isinstance(said.get(key), dict) else dict(who)}
        for name in (MEASURED, RETUNE):
            found = (_map(table, name).get(kernel) or {}) if isinstance(_map(table, name).get(kernel), dict) else {}
            if isinstance(found.get(key), dict):
                beside[name] = found[key]
        for name, value in (("kernels", entry), *beside.items()):
            after[name].setdefault(kernel, {})[key] = value
        count += 1
    if isinstance(recorded, dict) and held is None:
        after["provenance"][kernel] = recorded
    older = [item for item in table.get(SUPERSEDED) or () if isinstance(item, dict) and item.get("kernel") == kernel]
    after[SUPERSEDED] = [*(part.document.get(SUPERSEDED) or []), *older]
    entries_said = "entry" if kept_measured == 1 else "entries"
    notes = [f"{shown}: kernel {kernel}: the measurements of {kept_measured} {entries_said} "
             "it holds already are the store's (the table's are not added: the first writer wins)"] \
        if kept_measured else []
    return after, count, notes


def version_differs(stored, live) -> list[str]:
    """What differs between the store's provenance of a kernel and another's (its hashed fields)."""
    if not isinstance(stored, dict) or not isinstance(live, dict):
        return []
    return provenance_differences(stored, live)


def _map(document: Mapping, name: str) -> dict:
    return document.get(name) if isinstance(document.get(name), dict) else {}


def kernels_of(table: Mapping) -> list[str]:
    """The kernels a table file gives the store: those with entries, and those only superseded."""
    older = {item.get("kernel") for item in table.get(SUPERSEDED) or () if isinstance(item, dict)}
    return sorted(set(_map(table, "kernels")) | {k for k in older if isinstance(k, str) and k})


def _said(entry) -> str:
    return signature({"kwargs": {}, **entry}) if isinstance(entry, dict) else repr(entry)


def two_ways(older: Mapping, part: Mapping, kernel: str) -> list[tuple]:
    """(key, the older hash's config, who added it, the kernel's hash's config, who added it) for
    each key of ``kernel`` that both layouts hold as different configs (a job of an earlier version
    added to the older hash a key this version had written to the kernel's hash)."""
    theirs, ours = _map(older, "kernels").get(kernel) or {}, _map(part, "kernels").get(kernel) or {}
    who_theirs, who_ours = _map(older, "added").get(kernel) or {}, _map(part, "added").get(kernel) or {}
    return [(key, theirs[key], who_theirs.get(key), ours[key], who_ours.get(key)) for key in sorted(theirs)
            if key in ours and _said(theirs[key]) != _said(ours[key])]


def two_ways_note(shown: str, hash_key: str, kernel: str, found: list, who: str = "this process uses") -> str:
    """One line naming ``kernel``'s keys held two ways (``two_ways``) and the one rule that decides."""
    named = "; ".join(f"key {key!r}: {_said(old)} in the older hash (added by {_run(by_old)}), {_said(new)} in "
                      f"{hash_key} (added by {_run(by_new)})" for key, old, by_old, new, by_new in found[:3])
    more = f"; and {len(found) - 3} more" if len(found) > 3 else ""
    return (f"table store {shown}: kernel {kernel} has {len(found)} key(s) held two ways, in the arch's older "
            f"one-hash layout and in its own hash: {named}{more}; {who} the older hash's (the one rule across the "
            "layouts: it is read first, and report store-upgrade keeps it, the other beside it in its history)")


def _run(who) -> str:
    return f"run {who.get('run_id')!r}" if isinstance(who, dict) and who.get("run_id") else "an unnamed writer"


def upgraded(part: Part, older: Mapping, kernel: str) -> tuple[dict, dict]:
    """(``part`` with the keys of the older hash's ``kernel``, outcome per key): a key the kernel's
    hash lacks is ``copied``; one it holds as the same config is ``alike``; one it holds as another
    config is ``(old config, its config)``: the older hash's is kept (what jobs ran, as they read it
    first) and the replaced entry goes beside it in its history (``EARLIER``, with who added it and
    its measurements), as a table write keeps what it replaces."""
    after = {name: {k: dict(v) for k, v in (part.document.get(name) or {}).items()}
             for name in ("kernels", "added", MEASURED, RETUNE, "provenance")}
    after[SUPERSEDED] = list(part.document.get(SUPERSEDED) or [])
    outcomes: dict = {}
    held = after["kernels"].get(kernel, {})
    for key, entry in sorted((_map(older, "kernels").get(kernel) or {}).items()):
        mine = held.get(key)
        if mine is not None and _said(mine) == _said(entry):
            outcomes[key] = "alike"
            continue
        outcomes[key] = "copied" if mine is None else (entry, mine)
        if mine is not None:
            was = after[MEASURED].get(kernel, {}).get(key) or {}
            beside = [*(was.get(EARLIER) or [])] if isinstance(was.get(EARLIER), list) else []
            beside.append({**{k: v for k, v in was.items() if k != EARLIER},
                           "replaced": {"entry": mine, "added": after["added"].get(kernel, {}).get(key),
                                        "why": UPGRADE_KEPT}})
            after[MEASURED].setdefault(kernel, {})[key] = {EARLIER: beside[-EARLIER_KEPT:]}
        after["kernels"].setdefault(kernel, {})[key] = entry
        who = (_map(older, "added").get(kernel) or {}).get(key)
        after["added"].setdefault(kernel, {}).pop(key, None)
        if isinstance(who, dict):
            after["added"][kernel][key] = who
        retune = (_map(older, RETUNE).get(kernel) or {}).get(key)
        if isinstance(retune, dict):
            after[RETUNE].setdefault(kernel, {})[key] = retune
    provenance = _map(older, "provenance").get(kernel)
    if isinstance(provenance, dict) and kernel not in after["provenance"]:
        after["provenance"][kernel] = provenance
    return after, outcomes
