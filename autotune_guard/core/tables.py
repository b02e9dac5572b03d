"""Tables: where they are searched, how several merge, when they are stale, which entry a kernel
and key get, and how a table grows by what a consensus job tuned (``grow_table``, with who added
each entry and what each kernel was). Reading goes through ``schema``; warnings are returned, so
the caller says each once.

Over 350 lines: search, merge, staleness and provenance of the one table format (writes live in
table_writes).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Mapping

from .errors import FileFormatError
from .megatron import READ_NOTES
from .pinned import entry_matches
from .pooling import EARLIER, MOST_RUNS
from . import safe_files
from .schema import TABLE_FORMAT, check_table, read_document
from .selection import TIE_FLOOR, usable
from .store_url import hide_password, is_store_url

logger = logging.getLogger("autotune_guard")

PACKAGED_TABLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tables")


def table_candidates(table_path, arch: str) -> list[str]:
    """Files to read for ``arch``, highest priority first: each AUTOTUNE_TABLE_PATH entry (a
    directory holding ``<arch>.json``, or a table file), then the tables packaged here."""
    found = []
    for entry in (*table_path, PACKAGED_TABLES):
        if is_store_url(entry):  # a table store: read through the registered reader (load_tables)
            found.append(entry)
        elif os.path.isdir(entry):
            candidate = os.path.join(entry, f"{arch}.json")
            if os.path.exists(candidate):
                found.append(candidate)
        elif os.path.exists(entry) or entry is not PACKAGED_TABLES:
            found.append(entry)
    return found


def installed_version(package: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:
        return None


PROVENANCE = "provenance"  # a table's kernel -> what its entries were recorded against (model.provenance)
MEASURED = "measured"  # a table's kernel -> key -> what was measured to choose the entry (deciding.retime)
RETUNE = "retune"  # a table's kernel -> key -> who asked (report retune): the next consensus run times the key again
EARLIER_KEPT = 2 * MOST_RUNS - 1  # kept beside an entry's measurement (EARLIER): other runs', entries it replaced


class KernelEntries(dict):
    """One kernel's entries in the loaded tables (key -> descriptor), with the provenance of the
    file that gave it first (None when that file says none) and, by key, what was measured to
    choose each entry (``measured``), from the file that gave the entry."""

    provenance = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.measured: dict = {}
        self.retune: set = set()  # keys report retune asked the next consensus run to time again


def measured_of(document: Mapping, kernel: str, notes: list | None = None) -> dict:
    """A table document's measurements of ``kernel``'s entries (key -> summary, ``clean_measured``);
    {} where none. What had to be left out is said to ``notes``."""
    found = document.get(MEASURED)
    found = found.get(kernel) if isinstance(found, dict) else None
    kept = {}
    for key, value in (found.items() if isinstance(found, dict) else ()):
        clean, said = clean_measured(value)
        if clean is not None:
            kept[key] = clean
        if said and notes is not None:
            notes.append(f"table {document.get('arch', '?')} kernel {kernel} key ({key}): its {MEASURED} part {said}")
    return kept


def clean_measured(value, nested: bool = False) -> tuple[dict | None, str | None]:
    """One key's kept measurement with what cannot be used left out (a file may have been edited by
    hand, or written by a broken writer), and what was left out as a phrase (None: nothing). Kept:
    ``candidates`` (signature -> {median: a number or null, ...}), the verdict's scalars, ``pooled``,
    ``replaced`` and ``earlier`` (a list of measurements of the same shape)."""
    if not isinstance(value, dict):
        return None, f"is {type(value).__name__}, not an object: left out"
    clean, dropped = dict(value), []
    candidates = value.get("candidates")
    if "candidates" in value and not isinstance(candidates, dict):
        dropped.append("candidates")
        clean.pop("candidates")
    elif isinstance(candidates, dict):
        good = {sig: entry if isinstance(entry, dict) and (entry.get("median") is None or usable(entry.get("median")))
                else {"median": None} for sig, entry in candidates.items()}  # timed, its timing unknown: never a winner
        bad = sum(good[sig] is not candidates[sig] for sig in candidates)
        if bad:
            dropped.append(f"{bad} candidate timing(s)")
        clean["candidates"] = good
    for name, kind in (("pooled", dict), ("replaced", dict), ("margin", (int, float)), ("how", str), ("winner", str)):
        if name in value and value[name] is not None and not isinstance(value[name], kind):
            dropped.append(name)
            clean.pop(name)
    beside = value.get(EARLIER)
    if EARLIER in value:
        clean.pop(EARLIER)
        items = [clean_measured(item, nested=True) for item in beside] \
            if isinstance(beside, list) and not nested else []
        kept = [item for item, _ in items if item is not None]
        if kept:
            clean[EARLIER] = kept
        if nested or not isinstance(beside, list) or len(kept) != len(beside) or any(said for _, said in items):
            dropped.append(EARLIER)
    return clean, (f"holds {', '.join(dropped)} that cannot be used: left out" if dropped else None)


def kernel_entries(tables: Mapping, qualified: str):
    """The kernel's entries the tables hold, by its qualified name, else by its bare function name
    (as ``table_entry`` looks a kernel up); None where neither has any."""
    for name in (qualified, qualified.rpartition(".")[2]):
        entries = tables.get(name)
        if entries:
            return entries
    return None


def table_measured(tables: Mapping, qualified: str, key: str):
    """What was measured to choose the entry ``table_entry`` gives, where the table kept it."""
    entries = kernel_entries(tables, qualified)
    measured = getattr(entries, "measured", None) or {}
    return measured.get(key if entries is not None and key in entries else "*")


def retune_asked(tables: Mapping, qualified: str, key: str) -> bool:
    """Whether ``report retune`` asked that the entry ``table_entry`` gives be timed again."""
    entries = kernel_entries(tables, qualified)
    return entries is not None and (key if key in entries else "*") in getattr(entries, "retune", ())


class Tables(dict):
    """kernel -> KernelEntries, merged from the table candidates in order. Files are read whole at
    once; a table store one kernel at a time, at that kernel's first lookup (``get``): a job reads
    of a big store only the kernels it meets. What a store's read says goes to ``said``."""

    def __init__(self, layers: list, arch: str, stores, said):
        super().__init__()
        self._layers, self._arch, self._stores, self._said = layers, arch, stores, said
        self._looked: set = set()
        self._lock = threading.Lock()  # a thread asking for a kernel being read waits for it, never sees a miss

    def get(self, kernel, default=None):
        notes: list = []
        with self._lock:
            if kernel not in self._looked:
                self._read(kernel, notes)
                self._looked.add(kernel)
        for note in notes:  # said outside the lock: saying takes the Guard's
            self._said(note)
        return super().get(kernel, default)

    def _read(self, kernel: str, notes: list) -> None:
        wildcarded: set = set()
        for path, document in self._layers:
            if document is None:  # a store: this kernel's part, read now
                document, said = read_store(self._stores, path, self._arch, kernel)
                notes.extend(said)
                if document is None:  # checked by read_store; its arch is this one (the reader asked for it)
                    continue
            _absorb(self, wildcarded, document, kernel, notes)


def load_tables(table_path, arch: str, versions: Mapping[str, str | None], stores=None,
                said=None) -> tuple[Tables, list[str]]:
    """``(Tables, warnings)`` for ``arch``: ``{kernel: {key: descriptor}}`` as ``get`` gives it.
    Earlier files win, entry by entry, except that a ``*`` entry stands for every key, so it hides
    what later files have for that kernel. A file that cannot be used is skipped, and a version
    mismatch (Triton, torch, or a kernel package the table names) noted: each is one warning line,
    since tables go stale. ``stores``: the registered reader of table stores named by URL
    (``read(url, arch, kernel) -> (document or None, warnings)``); what it says later goes to
    ``said`` (default: the warnings list)."""
    warnings: list = []
    layers = []  # (path, document); a store's document is None: read per kernel
    for path in table_candidates(table_path, arch):
        if is_store_url(path):
            layers.append((path, None))
            continue
        try:
            document = read_document(path, formats=(TABLE_FORMAT,))
        except FileFormatError as exc:
            warnings.append(f"skipping table {exc}")
            continue
        warnings.extend(trust_notes(path))
        warnings.extend(note for note in document.get(READ_NOTES) or () if isinstance(note, str))  # Megatron's keys
        if not _refused(path, document, arch, versions, warnings.append):
            layers.append((path, document))
    tables = Tables(layers, arch, stores, said or warnings.append)
    if all(document is not None for _, document in layers):  # files alone: merged now
        wildcarded: set = set()
        for path, document in layers:
            tables._looked.update(document["kernels"])
            _absorb(tables, wildcarded, document, notes=warnings)
    return tables, warnings


def _refused(path: str, document: Mapping, arch: str, versions: Mapping, said) -> bool:
    """Whether a table is for another arch (said); a stale one is said and used."""
    if document["arch"] != arch:
        said(f"skipping table {path}: it is for arch {document['arch']}, this process runs {arch}")
        return True
    stale = stale_versions(document, versions)
    if stale:
        said(f"table {path} was made with {', '.join(stale)}: its choices may be stale; record and merge it again")
    logger.debug("using table %s (source: %s)", path, json.dumps(document.get("source"), sort_keys=True))
    return False


def _absorb(merged: dict, wildcarded: set, document: Mapping, only: str | None = None, notes: list | None = None) -> None:
    """A table's entries (``only``'s, where named) added where ``merged`` has none; a ``*`` entry
    hides what later tables have for its kernel."""
    recorded = document.get(PROVENANCE) if isinstance(document.get(PROVENANCE), dict) else {}
    for kernel, entries in document["kernels"].items():
        if kernel in wildcarded or (only is not None and kernel != only):
            continue
        slot = dict.setdefault(merged, kernel, KernelEntries())
        if slot.provenance is None and isinstance(recorded.get(kernel), dict):
            slot.provenance = recorded[kernel]
        measured = measured_of(document, kernel, notes)
        asked = document.get(RETUNE).get(kernel) if isinstance(document.get(RETUNE), dict) else None
        for key, entry in entries.items():
            if key not in slot and key in measured:
                slot.measured[key] = measured[key]
            if key not in slot and isinstance(asked, dict) and key in asked:
                slot.retune.add(key)
            slot.setdefault(key, entry)
        if "*" in entries:
            wildcarded.add(kernel)


def read_store(stores, url: str, arch: str, kernel: str) -> tuple[dict | None, list[str]]:
    """``kernel``'s part of the table a store holds for ``arch``, checked as a table file is;
    (None, why) without one."""
    shown = hide_password(url)
    if stores is None:
        return None, [f"skipping table store {shown}: no reader of table stores is registered in this process"]
    document, notes = stores.read(url, arch, kernel)
    if document is None:
        return None, notes
    try:
        check_table(shown, document)
    except FileFormatError as exc:
        return None, notes + [f"skipping table store {exc}"]
    return document, notes


def stale_versions(document: Mapping, versions: Mapping[str, str | None]) -> list[str]:
    """``name made (running running)`` for each version the table names that differs from the running one."""
    made_for = [(name, document.get(name), versions.get(name)) for name in ("triton", "torch")]
    made_for += [(name, made, installed_version(name)) for name, made in sorted((document.get("packages") or {}).items())]
    return [f"{name} {made} (running {running})" for name, made, running in made_for if made and running and made != running]


def table_entry(tables: Mapping, qualified: str, key: str):
    """The entry for a kernel and tuning key: its own key, else ``*``; by qualified name, else
    by bare function name."""
    for name in (qualified, qualified.rpartition(".")[2]):
        entries = tables.get(name)
        if entries:
            entry = entries[key] if key in entries else entries.get("*")
            if entry is not None:
                return entry
    return None


def table_provenance(tables: Mapping, qualified: str):
    """The provenance the tables hold for a kernel, looked up as ``table_entry`` looks it up."""
    return getattr(kernel_entries(tables, qualified), "provenance", None)


# --- tables that grow: consensus adds what a job tuned --------------------------------------------

GROWN_BY = "autotune_guard consensus"  # a grown table's ``source.by``
ADDED = "added"  # a grown table's provenance: kernel -> key -> who added the entry, and when


def trust_notes(path: str) -> list[str]:
    """What to say about a table a user's setting names (the packaged ones are the install's): a
    file of another user, a symlink to one, a directory others can write."""
    if os.path.dirname(os.path.abspath(path)) == PACKAGED_TABLES:
        return []
    notes = []
    try:
        info = os.stat(path)
    except OSError:
        return []
    owner = safe_files.foreign_owner(info)
    if owner is not None:
        via = f" (through the symlink {path})" if os.path.islink(path) else ""
        notes.append(f"table {os.path.realpath(path)}{via} is a file of {owner}: its entries are run as they are")
    shared = shared_directory_note(os.path.dirname(os.path.abspath(path)))
    return notes + ([shared] if shared else [])


def shared_directory_note(directory: str) -> str | None:
    """The one line naming a table directory others can write (said once, however it was met)."""
    who = safe_files.others_can_write(directory)
    if who is None:
        return None
    return (f"the table directory {directory} can be written by {who} ({safe_files.describe_directory(directory)}): "
            "another user can put or change the table entries this process runs; prefer a directory only you can write")


def writable_table_dir(table_path) -> str | None:
    """The AUTOTUNE_TABLE_PATH entry consensus adds its winners to: the first directory (its
    ``<arch>.json`` is the job's table); None when every entry is a table file."""
    for entry in table_path:
        if os.path.isdir(entry):
            return entry
    return None


def table_index(entry: Mapping | None, descriptors, defaults: Mapping) -> int | None:
    """Index of the live candidate a table entry names, as the pinned rule matches it; None when
    there is no entry or it names none of them."""
    if entry is None:
        return None
    for i, desc in enumerate(descriptors):
        if entry_matches(entry, desc, defaults):
            return i
    return None


CANDIDATES_GREW = "its candidate list changed"  # provenance_differences' phrase, without its counts


def added_by(document: Mapping, kernel: str, key: str) -> str | None:
    """Who added a grown table's entry, as one phrase (``report show``); None when not said. It is
    what the writer said of itself (any job holding the store's credential or the file can write
    any name), so the phrase says so."""
    keys = document.get(ADDED)
    who = keys.get(kernel) if isinstance(keys, dict) else None
    who = who.get(key) if isinstance(who, dict) else None
    if not isinstance(who, dict):
        return None
    text = lambda name: str(who[name]) if isinstance(who.get(name), (str, int, float)) else "?"
    phrase = f"added by run {text('run_id')} (rank {text('rank')} on {text('host')}, {text('time')}"
    return phrase + (f", triton {text('triton')}" if who.get("triton") else "") + "; the writer's claim, not checked)"


def verdict_text(document: Mapping, kernel: str, key: str) -> str | None:
    """How a table's entry was chosen, as one phrase for ``report show`` (``MEASURED``); None when
    the table kept no measurement of it (an older table, or a family timed in one pass)."""
    found = measured_of(document, kernel).get(key)
    if not isinstance(found, dict) or not isinstance(found.get("how"), str):
        return None
    how, rounds = found["how"], found.get("rounds")
    margin = found.get("margin")
    margin = f"{margin * 100:+.2f} %" if isinstance(margin, (int, float)) else "?"
    said = {"tie": f"TIE of {len(found.get('tied') or [])} within 0.5 % (the one declared first)",
            "clear": f"clear by {margin}", "one finalist": f"one finalist, by {margin}",
            "one pass": f"one pass, by {margin}", "kept": f"kept, the new candidates by {margin}"}.get(how, how)
    count = len(found.get("candidates") or {})
    text = f"{said}; {count} candidates timed" + (f", {rounds} rounds" if rounds else "")
    pooled = found.get("pooled")
    if isinstance(pooled, dict) and isinstance(pooled.get("runs"), int):
        margin = pooled.get("margin")
        by = f"clear by {margin * 100:+.2f} %" if isinstance(margin, (int, float)) else "no other candidate"
        if pooled.get("how") == "tie":
            by = f"TIE of {len(pooled.get('tied') or []) + 1} within {TIE_FLOOR * 100:g} % (the one declared first)"
        spread = pooled.get("spread")
        spread = f", ±{spread * 100:.2f} % between runs" if isinstance(spread, float) else ""
        text = f"POOLED over {pooled['runs']} cold runs: {by}{spread}; the last run's own: {text}"
    return text
