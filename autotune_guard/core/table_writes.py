"""How a table is written without losing what it knows: the winners a consensus job tuned added to
a table document (``grow_table``; a directory's file and a store's kernel alike), one key at a time
(``add_winner``).

An entry the table holds is kept (the first writer wins) unless the new winner was chosen to
replace it: its selection covered more candidates (``extends``), it pooled cold runs, it was asked
for by ``report retune`` (``RETUNE``), or the kernel changed since the entry was measured
(``replaces == "stale"``: the kernel's older version moves to ``SUPERSEDED`` whole). Whatever an
entry replaces goes beside it (``EARLIER``), with who added it; a pooled winner is pooled again
here, over every comparable run the table holds, so that two pooling runs at once pool over both.
"""

from __future__ import annotations

import time
from typing import Mapping, NamedTuple

from .model import compact, provenance_differences, signature
from .numerics import numerics_differences
from .pooling import EARLIER, comparable, pool
from .schema import TABLE_FORMAT
from .tables import (ADDED, CANDIDATES_GREW, EARLIER_KEPT, GROWN_BY, MEASURED, PROVENANCE, RETUNE, measured_of,
                     table_index)

SUPERSEDED = "superseded"  # a table's list of kernel versions consensus replaced, each whole


class Grown(NamedTuple):
    """What ``grow_table`` did: the new document; kept entries that differ from this job's winner as
    (kernel, key, kept entry); how many entries were added or replaced; kernels left out as (kernel,
    what differs, how many new keys); entries replaced as (kernel, key, old signature, new signature,
    why); and what had to be left out of the document's measurements (one phrase each)."""

    document: dict
    differing: list
    count: int
    stale: list
    replaced: list
    notes: list


def grow_table(document: Mapping | None, arch: str, additions: Mapping, provenance: Mapping,
               defaults: Mapping, kernel_provenance: Mapping | None = None) -> Grown:
    """``document`` (the table as it is now; None: none yet) with ``additions`` (kernel -> key ->
    ``model.TunedWinner``) written in, each with ``provenance`` (who added it), and each kernel new
    to the table with its ``kernel_provenance`` (kernel -> ``model.provenance``), the shape ``report
    merge`` writes. A kernel held against another version of it gets none of this job's winners
    (one version per kernel), unless they were tuned to supersede it."""
    grown = dict(document) if document is not None else {
        "format": TABLE_FORMAT, "arch": arch, "source": {"by": GROWN_BY}, "kernels": {}}
    state = _State(grown)
    differing, stale, replaced, count = [], [], [], 0
    for kernel, entries in sorted(additions.items()):
        live = (kernel_provenance or {}).get(kernel)
        if not _admits(state, kernel, entries, live, stale):
            continue
        for key, desc in sorted(entries.items()):
            said, change = add_winner(state, kernel, key, desc, provenance, defaults)
            count += said in ("added", "replaced")
            if said == "differs":
                differing.append((kernel, key, state.kernels[kernel][key]))
            elif said == "replaced":
                replaced.append((kernel, key, *change))
    return Grown(state.document(), differing, count, stale, replaced, state.notes)


class _State:
    """A table document taken apart for writing (copies: the caller's document is not changed)."""

    def __init__(self, grown: dict):
        self.grown = grown
        self.notes: list = []
        self.kernels = {kernel: dict(entries) for kernel, entries in grown["kernels"].items()}
        self.who = {kernel: dict(keys) for kernel, keys in _mapping(grown, ADDED).items() if isinstance(keys, dict)}
        self.recorded = dict(_mapping(grown, PROVENANCE))
        self.measured = {kernel: measured_of(grown, kernel, self.notes) for kernel in _mapping(grown, MEASURED)}
        self.retune = {kernel: dict(keys) for kernel, keys in _mapping(grown, RETUNE).items() if isinstance(keys, dict)}
        self.superseded = [item for item in grown.get(SUPERSEDED) or [] if isinstance(item, dict)] \
            if isinstance(grown.get(SUPERSEDED), list) else []

    def document(self) -> dict:
        grown = self.grown
        grown["kernels"] = {k: v for k, v in self.kernels.items() if v}
        grown[ADDED] = {k: v for k, v in self.who.items() if v}
        for name, value in ((PROVENANCE, self.recorded), (RETUNE, {k: v for k, v in self.retune.items() if v}),
                            (MEASURED, {k: v for k, v in self.measured.items() if v}), (SUPERSEDED, self.superseded)):
            if value:
                grown[name] = value
            else:
                grown.pop(name, None)
        return grown


def _mapping(document: Mapping, name: str) -> dict:
    return document.get(name) if isinstance(document.get(name), dict) else {}


def _admits(state: _State, kernel: str, entries: Mapping, live, stale: list) -> bool:
    """Whether ``kernel``'s new winners may go in: the table's version of the kernel is this job's
    (or unknown, or only its candidates grew and the winners cover them), or they supersede it (the
    old version is moved whole to ``SUPERSEDED``). Left out: said in ``stale``."""
    differs = _version_differs(state.recorded.get(kernel), live) if state.kernels.get(kernel) else []
    extends = any(getattr(desc, "extends", False) for desc in entries.values())
    if differs and any(getattr(desc, "replaces", None) == "stale" for desc in entries.values()):
        state.superseded.append({
            "kernel": kernel, "provenance": state.recorded.get(kernel), "entries": state.kernels.pop(kernel),
            ADDED: state.who.pop(kernel, {}), MEASURED: state.measured.pop(kernel, {}),
            "why": differs, "replaced_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        state.retune.pop(kernel, None)
        differs = []
    if differs and not (extends and all(d.startswith(CANDIDATES_GREW) for d in differs)):
        stale.append((kernel, differs, sum(key not in state.kernels[kernel] for key in entries)))
        return False
    if live and (not state.kernels.get(kernel) or extends):  # new to the table, or its candidate list grew
        state.recorded[kernel] = dict(live)
    return True


def add_winner(state: _State, kernel: str, key: str, desc, author: Mapping, defaults: Mapping) -> tuple[str, tuple]:
    """Write one winner: ``added`` (new key), ``kept`` (the first writer wins; its measurement goes
    beside the entry), ``differs`` (kept, and another config), or ``replaced`` (it was chosen to
    replace the entry: the old one goes beside it with who added it), with (old signature, new
    signature, why) where it replaced one."""
    entries = state.kernels.setdefault(kernel, {})
    measured = state.measured.setdefault(kernel, {})
    who = state.who.setdefault(kernel, {})
    kept = entries.get(key)
    new_measured = dict(getattr(desc, "measured", None) or {}) or None
    why = _why_replaced(state, kernel, key, desc)
    if kept is not None and why is None:
        if new_measured:
            old = measured.get(key) or {}
            measured[key] = {**old, EARLIER: _bounded([*(old.get(EARLIER) or []), new_measured])}
        return ("differs" if table_index(kept, [desc], defaults) is None else "kept"), ()
    previous = measured.get(key)
    beside = [*(previous.get(EARLIER) or [])] if previous else []
    if kept is not None:  # what it replaces, and who had added it, go beside it
        old = {k: v for k, v in (previous or {}).items() if k != EARLIER}
        beside.append({**old, "replaced": {"entry": kept, ADDED: who.get(key), "why": why}})
    chosen = compact(desc)
    if new_measured and isinstance(new_measured.get("pooled"), dict):
        chosen, new_measured = _pooled_again(desc, chosen, new_measured, beside)
    entries[key] = chosen
    who[key] = dict(author)
    if new_measured:
        measured[key] = {**new_measured, **({EARLIER: _bounded(beside)} if beside else {})}
    elif beside:
        measured[key] = {EARLIER: _bounded(beside)}
    state.retune.get(kernel, {}).pop(key, None)
    if kept is None:
        return "added", ()
    return "replaced", (signature({"kwargs": {}, **kept}), signature({"kwargs": {}, **chosen}), why)


def _why_replaced(state: _State, kernel: str, key: str, desc) -> str | None:
    """Why ``desc`` replaces the table's entry for the key (None: it does not)."""
    if getattr(desc, "replaces", None):
        return desc.replaces
    if key in state.retune.get(kernel, {}):
        return RETUNE
    if getattr(desc, "extends", False):
        pooled = (getattr(desc, "measured", None) or {}).get("pooled")
        return "pooled" if pooled else "extends"
    return None


def _pooled_again(desc, chosen: dict, new_measured: dict, beside: list) -> tuple[dict, dict]:
    """A pooling run's winner pooled again over every comparable run the table holds now (another
    pooling run may have written since this one read the table)."""
    on = {name: new_measured.get(name) for name in ("arch", "triton", "torch")}
    runs = [new_measured, *[m for m in beside if comparable(m, on)]]
    choices = getattr(desc, "choices", None) or {}
    order = list(choices) or list(new_measured.get("candidates") or {})
    found = pool(runs, order)
    if found is None or found.winner not in choices:
        return chosen, new_measured
    return compact(choices[found.winner]), {**new_measured, "pooled": found.as_dict()}


def _bounded(items: list) -> list:
    return items[-EARLIER_KEPT:]


def _version_differs(recorded, live) -> list[str]:
    """What differs between the table's provenance of a kernel and this job's, numerics and the
    Triton release included (one version per kernel, as consensus times a kernel again on each of
    them); nothing when either is unknown."""
    if not isinstance(recorded, dict) or not isinstance(live, Mapping):
        return []
    release = [f"Triton {recorded['triton']} then, {live['triton']} now"] \
        if recorded.get("triton") and live.get("triton") and recorded["triton"] != live["triton"] else []
    return provenance_differences(recorded, live) + numerics_differences(recorded, live) + release
