"""What a write of this job's winners into a table kept, replaced or left out, said once each: the
one wording for a directory's table file (``table_growth``) and a table store (``store_growth``)."""

from __future__ import annotations

import logging

from ..core import tables
from ..core.model import signature


def say(guard, where: str, arch: str, tuned, found) -> None:
    """``where``: the table as messages name it (``table PATH``, ``table store URL``); ``tuned(kernel,
    key)``: this job's winner for a key; ``found``: ``core.table_writes.Grown``."""
    shown = lambda entry: signature({"kwargs": {}, **entry})  # noqa: E731
    for kernel, key, kept in found.differing:
        who = tables.added_by(found.document, kernel, key) or "from an earlier table"
        guard.warn_once(f"growth differs: {where}|{arch}|{kernel}|{key}", (
            f"{where} holds {shown(kept)} for kernel {kernel} key ({key}) arch {arch} ({who}); this job tuned "
            f"{signature(tuned(kernel, key))}: the table's entry is kept (the first writer wins)"), scope="process")
    for kernel, key, old, new, why in found.replaced:
        if old != new:
            guard.warn_once(f"growth replaced: {where}|{kernel}|{key}", (
                f"{where}: kernel {kernel} key ({key}) arch {arch} now holds {new} ({why}); {old}, which it held, "
                "is kept beside it in the entry's history (report show)"), logging.INFO, scope="process",
                name="table-replaced")
    for note in found.notes:
        guard.warn_once(f"growth note: {where} {note}", f"{where}: {note}", scope="process")
    for kernel, differs, left_out in found.stale:
        guard.warn_once(f"growth stale: {where}|{kernel}", (
            f"{where} holds entries for kernel {kernel} recorded against another version of it "
            f"({', '.join(differs) or 'its provenance there is unreadable'}): this job's {left_out} new "
            f"winner{'' if left_out == 1 else 's'} for it {'is' if left_out == 1 else 'are'} not added (a table "
            "keeps one version of a kernel, and another job wrote its own since this one read the table); "
            "report prune --kernel drops the other version, and the next consensus run times it again"),
            scope="process")
