"""``report merge -o EXISTING``: every write to a table is a merge. The merged records' entries go
into the table that is there through the one write rule (``core.table_writes``): what the records do
not decide is kept as it was, with who added it and what was measured; an entry they decide alike
keeps its place and gains their measurement in its history. An entry they decide otherwise, or a
kernel they saw in another version, is refused (nothing is written) unless ``--replace``: then it
is replaced and the old one kept beside it (a kernel's older version whole, under ``superseded``).
The write takes the lock consensus growth takes, so a job growing the table loses nothing either."""

from __future__ import annotations

import getpass
import socket
import time

from ..core import tables
from ..core.errors import InputError
from ..core.model import signature, tuned_winner
from ..core.table_edit import edit_table
from ..core.table_writes import grow_table

SHOWN = 10  # conflicts named in the refusal; the rest counted


def write_into(path: str, merged: dict, replace: bool) -> list[str]:
    """Merge the table ``merged`` (what ``report merge`` made of the records) into the table at
    ``path``, under its lock. Returns one line per entry replaced or kept differently; raises
    ``InputError`` (nothing written) on a conflict without ``replace``."""
    said: list[str] = []

    def change(document):
        if document is not None and document["arch"] != merged["arch"]:
            raise InputError(f"{path}: a table for arch {document['arch']}; the records are of arch {merged['arch']} "
                             "(-o another file)", path=path)
        grown = grow_table(document, merged["arch"], _additions(merged, document, replace), _author(merged), {},
                           merged.get(tables.PROVENANCE) or {})
        conflicts = _conflicts(grown, merged)
        if conflicts:
            more = f"; and {len(conflicts) - SHOWN} more" if len(conflicts) > SHOWN else ""
            count = f"{len(conflicts)} entr{'y' if len(conflicts) == 1 else 'ies'}"
            raise InputError(f"{path}: the records decide {count} otherwise than the table holds: "
                             f"{'; '.join(conflicts[:SHOWN])}{more}; nothing was written (--replace replaces them, "
                             "each old entry kept in its history)", path=path)
        said.extend(f"replaced kernel {k} key ({key}): {old} -> {new} (the old entry kept in its history)"
                    for k, key, old, new, _ in grown.replaced if old != new)
        said.extend(f"note: {note}" for note in grown.notes)
        document = grown.document
        history = list(document["source"].get("merged") or []) if isinstance(document.get("source"), dict) else []
        document["source"] = {**(document.get("source") if isinstance(document.get("source"), dict) else {}),
                              "merged": history + [merged["source"]]}
        return document

    edit_table(path, change, merged["arch"])
    return said


def _conflicts(grown, merged: dict) -> list[str]:
    """One phrase per entry the records decide otherwise, and per kernel held in another version."""
    shown = lambda entry: signature({"kwargs": {}, **entry})  # noqa: E731
    found = [f"kernel {k} key ({key}): the table holds {shown(kept)}, the records decide "
             f"{shown(merged['kernels'][k][key])}" for k, key, kept in grown.differing]
    return found + [f"kernel {k}: the table holds it in another version ({', '.join(why)})"
                    for k, why, _ in grown.stale]


def _additions(merged: dict, document: dict | None, replace: bool) -> dict:
    """kernel -> key -> the merged entry as a winner to write; with ``replace``, one that replaces
    (a kernel held in another version: superseding it)."""
    held = (document or {}).get(tables.PROVENANCE) or {}
    found: dict = {}
    for kernel, entries in merged["kernels"].items():
        measured = tables.measured_of(merged, kernel)
        provenance = (merged.get(tables.PROVENANCE) or {}).get(kernel)
        why = None
        if replace:
            other = isinstance(held.get(kernel), dict) and held.get(kernel) != provenance
            why = "stale" if other else "merge --replace"
        found[kernel] = {key: tuned_winner(entry, provenance, measured.get(key), replaces=why)
                         for key, entry in entries.items()}
    return found


def _author(merged: dict) -> dict:
    """Who added the entries: this merge, by its records (``tables.added_by`` reads run_id, rank, host, time)."""
    source = merged.get("source") or {}
    files = len(source.get("files") or [])
    return {"run_id": f"report merge --rule {source.get('rule', '?')} of {files} file(s)", "rank": "-",
            "host": f"{getpass.getuser()}@{socket.gethostname()}", "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **({"triton": merged["triton"]} if merged.get("triton") else {})}
