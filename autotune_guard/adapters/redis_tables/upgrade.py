"""``report store-upgrade``: an arch's older one-hash layout (``<prefix>{<arch>}:entries``, written
before per-kernel keys) moved to per-kernel keys by the one rule a job reads the two layouts by: the
older hash's entry is the one used, so an upgrade never changes what a job runs. A key the kernel's
hash holds as another config is named with both configs, and the kernel's hash's entry is kept
beside the older's in its history, as a table write keeps what it replaces. The older hash is then
renamed to a name no key holds (never replaced, never deleted) and what a job of an earlier version
added to it meanwhile is moved too. An upgrade that finds the older hash gone (another upgrade at
the same time renamed it) says so. A kernel whose hash is too big to read is left in the older hash,
which is then not renamed (jobs go on reading it)."""

from __future__ import annotations

import time
from typing import NamedTuple

from .errors import StoreTooBig
from .parts import upgraded


class Upgraded(NamedTuple):
    """What one arch's upgrade did: the older hash's entries read; how many were copied to their
    kernel's hash, were there already alike, were there as another config (kernel, key, older
    config, the kernel's hash's config; the older's kept), were left in the older hash (their kernel's
    hash too big to read); the name the older hash is kept under (None: another upgrade renamed it
    first, or entries were left); and what could not be used (one line each)."""

    total: int
    copied: int
    alike: int
    replaced: list
    left: int
    kept_as: str | None
    notes: list


def upgrade(store, arch: str) -> Upgraded:
    """``arch``'s older hash moved to per-kernel keys, renamed, and moved again from its new name."""
    notes: list = []
    outcomes: dict = {}  # (kernel, key) -> outcome of the first pass that met it
    _move(store, arch, store.read_older(arch, notes), outcomes, notes)
    kept_as = None
    if "left" not in outcomes.values():
        kept_as = store.keep_older(arch, store.key(arch, f"entries-before-upgrade-{int(time.time())}"))
    if kept_as is not None:  # what a job of an earlier version added before the rename
        _move(store, arch, store.read_older(arch, [], kept_as), outcomes, notes)
    said = list(outcomes.values())
    replaced = [(kernel, key, *outcome) for (kernel, key), outcome in sorted(outcomes.items())
                if isinstance(outcome, tuple)]
    return Upgraded(len(said), said.count("copied"), said.count("alike"), replaced, said.count("left"), kept_as,
                    notes)


def _move(store, arch: str, older: dict, outcomes: dict, notes: list) -> None:
    for kernel in sorted(older["kernels"]):
        try:
            found = store.update_kernel(arch, kernel, lambda part: upgraded(part, older, kernel), superseded=False)
        except StoreTooBig as exc:  # its entries stay where jobs read them
            notes.append(f"{exc}; its {len(older['kernels'][kernel])} entries stay in the older hash")
            found = dict.fromkeys(older["kernels"][kernel], "left")
        for key, outcome in found.items():
            outcomes.setdefault((kernel, key), outcome)
