"""The three file formats (tables, records, choices files) and the checks every reader and writer
applies: ``read_document`` parses through ``jsonfile`` and checks each field a reader uses for its
type, so that no malformed file reaches them; ``check_descriptor`` is the one config check.
"""

from __future__ import annotations

import os
from itertools import chain
from marshal import dumps as exact_bytes

from .errors import FileFormatError
from .jsonfile import JOURNAL_SUFFIX, ForeignOwner, read_journal, read_json
from . import megatron
from .model import EXTRA_FIELDS, OPTION_FIELDS, digest_of

TABLE_FORMAT = "autotune_guard.table/1"
RECORD_FORMAT = "autotune_guard.record/1"
CHOICES_FORMAT = "autotune_guard.choices/1"
JOURNAL_FORMAT = "autotune_guard.journal/1"
FORMATS = (TABLE_FORMAT, RECORD_FORMAT, CHOICES_FORMAT)


def read_document(path: str, formats=FORMATS) -> dict:
    """Parse and check one file; raises FileFormatError naming it, and nothing else: every
    field a reader of this package uses is checked for its type here, so that no malformed file
    (wrong types, deep nesting, huge numbers, a FIFO or a device) reaches them. Where a table is
    read, Megatron Core's table shape (no ``format``) is read as ours (``megatron``)."""
    document = read_json(path)
    if TABLE_FORMAT in formats and megatron.recognised(document):
        return _megatron_table(path, document)
    if not isinstance(document, dict) or "format" not in document:
        raise FileFormatError(f"{path}: has no 'format' field; not an autotune_guard file")
    fmt = document["format"]
    if not isinstance(fmt, str):
        raise FileFormatError(f"{path}: 'format' must be a string, like {formats[0]!r}")
    if fmt not in formats:
        family = fmt.rpartition("/")[0]
        if any(family == known.rpartition("/")[0] for known in formats):
            raise FileFormatError(f"{path}: format {fmt!r} is not supported by this autotune_guard (reads {', '.join(formats)})")
        if fmt in FORMATS:  # ours, but not what this reader takes (a record given as a table)
            raise FileFormatError(f"{path}: is a {fmt} file; expected {' or '.join(formats)}")
        raise FileFormatError(f"{path}: format {fmt[:100]!r} is not one of {', '.join(formats)}")
    _CHECKS[fmt](path, document)
    return document


def _require(path, condition, what):
    if not condition:
        raise FileFormatError(f"{path}: {what}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional(path, document, name, types, what):
    """``document[name]``, when present and not null, must be of ``types``."""
    value = document.get(name)
    types = types if isinstance(types, tuple) else (types,)
    _require(path, value is None or (isinstance(value, types) and not (isinstance(value, bool) and bool not in types)),
             f"{name!r} must be {what}")


def _string_map(path, document, name, what):
    value = document.get(name)
    _require(path, value is None or (isinstance(value, dict) and all(v is None or isinstance(v, str) for v in value.values())),
             f"{name!r} must be an object of {what} -> version string")


def _common_fields(path, document):
    """Fields records and choices files share (who wrote them, when, for which run)."""
    _require(path, _is_int(document.get("rank")) and document["rank"] >= 0, "needs a non-negative integer 'rank'")
    _optional(path, document, "world_size", int, "an integer")
    _optional(path, document, "complete", bool, "true or false")
    for name in ("run_id", "host", "written", "mode", "ended"):
        _optional(path, document, name, str, "a string")
    _optional(path, document, "pid", int, "an integer")
    _require(path, document.get("attempt") is None or (_is_int(document["attempt"]) and document["attempt"] >= 0),
             "'attempt' must be a non-negative integer (the restart attempt)")
    for name in ("started", "updated"):
        _optional(path, document, name, (int, float), "a number")


_DESCRIPTOR_FIELDS = frozenset({"kwargs", *OPTION_FIELDS, *EXTRA_FIELDS})
_KWARG_TYPES = frozenset({int, float, str, bool, type(None)})
_OPTION_TYPES = frozenset({int, type(None)})  # an option absent or null is Triton's default


def check_descriptor(path: str, where: str, desc) -> None:
    """The one config check: an object of ``kwargs`` (numbers, strings, booleans, lists of them) and
    integer options."""
    if not _plain_descriptor(desc):
        _check_descriptor_saying_why(path, where, desc)


def _plain_descriptor(desc) -> bool:
    """``check_descriptor``'s common, valid case, decided without building a message."""
    if type(desc) is dict and _DESCRIPTOR_FIELDS.issuperset(desc):
        kwargs = desc.get("kwargs", {})
        return type(kwargs) is dict and _KWARG_TYPES.issuperset(map(type, kwargs.values())) and \
            _OPTION_TYPES.issuperset(map(type, map(desc.get, OPTION_FIELDS)))
    return False


def _plain_value(value, depth: int = 0) -> bool:
    """A meta-parameter's value: a number, string, boolean or null, or (Helion) a list of such
    values, lists nested at most three deep."""
    if type(value) in _KWARG_TYPES:
        return True
    return type(value) is list and depth < 3 and all(_plain_value(v, depth + 1) for v in value)


def _check_descriptor_saying_why(path: str, where: str, desc) -> None:
    _require(path, isinstance(desc, dict), f"{where}: a config must be an object")
    _require(path, isinstance(desc.get("kwargs", {}), dict), f"{where}: 'kwargs' must be an object")
    for name, value in desc.get("kwargs", {}).items():
        _require(path, _plain_value(value), f"{where}: meta-parameter {name!r} must be a number, string, "
                 "boolean, or a list of them (lists of lists too, as Helion's configs have)")
    for name in OPTION_FIELDS:
        if name in desc and desc[name] is not None:
            _require(path, isinstance(desc[name], int) and not isinstance(desc[name], bool), f"{where}: {name!r} must be an integer")
    unknown = set(desc) - {"kwargs", *OPTION_FIELDS, *EXTRA_FIELDS}
    _require(path, not unknown, f"{where}: unknown config fields {sorted(unknown)}")


def _check_kernels(path, document, entry_check):
    kernels = document.get("kernels")
    _require(path, isinstance(kernels, dict), "'kernels' must be an object of kernel name -> entries")
    plain = _PLAIN.get(entry_check)
    checked: dict[bytes, list] = {}  # candidate lists found plain in this file (a record repeats them)
    for kernel, entries in kernels.items():
        _require(path, isinstance(entries, dict), f"kernel {kernel!r}: entries must be an object of key -> config")
        for key, entry in entries.items():
            if plain is None or not plain(entry, checked):  # the message is built only for an entry in doubt
                entry_check(path, f"kernel {kernel!r} key {key!r}", entry)


def _check_table(path, document):
    _require(path, isinstance(document.get("arch"), str) and document["arch"], "a table needs an 'arch' string")
    for name in ("triton", "torch", "python"):
        _optional(path, document, name, str, "a version string")
    _string_map(path, document, "packages", "package")
    _check_kernels(path, document, check_descriptor)


def check_table(where: str, document) -> dict:
    """A table document assembled elsewhere than from a file (a table store): the checks
    ``read_document`` applies to a table file; FileFormatError names ``where``. Returns the table
    to use: ``document``, or a Megatron-shaped one read as ours."""
    if megatron.recognised(document):
        return _megatron_table(where, document)
    _require(where, isinstance(document, dict) and document.get("format") == TABLE_FORMAT, f"is not a {TABLE_FORMAT}")
    _check_table(where, document)
    return document


def _megatron_table(path, document) -> dict:
    """A Megatron table (``megatron.recognised``) as our table: its configs checked under its own
    key texts (the messages name them as the file does), then converted and checked as a table."""
    _check_kernels(path, document, check_descriptor)
    table = megatron.converted(path, document, TABLE_FORMAT)
    _check_table(path, table)
    return table


def _check_record(path, document):
    _require(path, isinstance(document.get("arch"), str), "a record needs an 'arch' string")
    _require(path, _is_int(document.get("rank")), "a record needs an integer 'rank'")
    _common_fields(path, document)
    _string_map(path, document, "versions", "name")
    _string_map(path, document, "packages", "package")

    _check_kernels(path, document, _check_record_entry)


def _check_record_entry(path, where, entry):
    _require(path, isinstance(entry, dict) and "config" in entry, f"{where}: a record entry needs a 'config'")
    check_descriptor(path, where, entry["config"])
    for name in ("how", "signature"):
        _require(path, entry.get(name) is None or isinstance(entry[name], str), f"{where}: {name!r} must be a string")
    timings = entry.get("timings")
    _require(path, timings is None or isinstance(timings, dict), f"{where}: 'timings' must be an object or null")
    for measured in (timings or {}).values():
        values = measured if isinstance(measured, list) else [measured]
        # null: a candidate that failed while timed (older files say Infinity)
        _require(path, values and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))
                                      for v in values),
                 f"{where}: a timing must be a number, null or a list of them (median first)")
    candidates = entry.get("candidates", [])
    _require(path, isinstance(candidates, list), f"{where}: 'candidates' must be a list of configs")
    for candidate in candidates:
        check_descriptor(path, f"{where} candidate", candidate)


_TIMING_TYPES = frozenset({int, float, type(None)})
_ONLY_LISTS = frozenset({list})


def _plain_record_entry(entry, checked: dict) -> bool:
    """``_check_record_entry``'s common, valid case, decided without building a message: a
    record of thousands of entries is checked at a fraction of its parse time."""
    if type(entry) is not dict or "config" not in entry or not _plain_descriptor(entry["config"]):
        return False
    how, stated = entry.get("how"), entry.get("signature")
    if (how is not None and type(how) is not str) or (stated is not None and type(stated) is not str):
        return False
    timings = entry.get("timings")
    if timings is not None and not _plain_timings(timings):
        return False
    candidates = entry.get("candidates", [])
    if type(candidates) is not list:
        return False
    exact = exact_bytes(candidates)  # exact: marshal tells 1, 1.0 and true apart, as == does not
    first = checked.get(exact)
    if first is None:
        if not all(map(_plain_descriptor, candidates)):
            return False
        checked[exact] = candidates
    elif first is not candidates:
        entry["candidates"] = first  # equal lists made one object: readers may tell them apart by identity
    return True


def _plain_timings(timings) -> bool:
    if type(timings) is not dict:
        return False
    measured = timings.values()
    if _ONLY_LISTS.issuperset(map(type, measured)):  # as Triton's timer gives them: in passes in C
        return all(measured) and _TIMING_TYPES.issuperset(map(type, chain.from_iterable(measured)))
    for value in measured:
        if type(value) is list:
            if not value or not _TIMING_TYPES.issuperset(map(type, value)):
                return False
        elif type(value) not in _TIMING_TYPES:
            return False
    return True


_PLAIN = {_check_record_entry: _plain_record_entry, check_descriptor: lambda desc, _checked: _plain_descriptor(desc)}


def _check_choices(path, document):
    _require(path, _is_int(document.get("rank")), "a choices file needs an integer 'rank'")
    _common_fields(path, document)
    _optional(path, document, "count", int, "an integer")
    _require(path, isinstance(document.get("log"), dict), "a choices file needs a 'log' object")
    _require(path, isinstance(document.get("digest"), str), "a choices file needs a 'digest' string")
    for entry, choice in document["log"].items():
        _check_log_entry(path, entry, choice)


def _check_log_entry(path, entry, choice):
    _require(path, isinstance(entry, str) and entry.count("|") >= 2 and isinstance(choice, str) and ";" in choice,
             f"log entry {entry!r}: expected 'arch|module.function|key' -> 'config;how'")


_CHECKS = {TABLE_FORMAT: _check_table, RECORD_FORMAT: _check_record, CHOICES_FORMAT: _check_choices}


JOURNAL_LEFT_OUT = "journal_left_out"  # set by read_evidence: why a journal beside the file was not read


def journal_of(path: str) -> str:
    """The journal an evidence file ``path`` may have: ``<name>.jsonl.gz``."""
    return path + JOURNAL_SUFFIX


def read_evidence(path: str, formats=FORMATS) -> tuple[dict, str | None]:
    """``read_document``, with the entries of the file's journal (``journal_of``) added when the
    journal is the one the file names (its ``journal_id``; any other is left over from before
    the file's last whole write, and all it holds is in the file); returns the journal's path
    when one was read.  A journal's cut-off last line (a process killed mid-write) is left out.

    A complete file (a normal exit writes its file whole, and removes its journal) reads none; a
    journal of another user than the file's is not read, and ``JOURNAL_LEFT_OUT`` says so: in a
    shared directory anyone can put a journal beside a file."""
    document = read_document(path, formats)
    token = document.get("journal_id")
    journal = journal_of(path)
    if document["format"] not in (RECORD_FORMAT, CHOICES_FORMAT) or not isinstance(token, str) \
            or (document.get("complete") is True and not document.get("ended")) \
            or not os.path.isfile(journal) or os.path.islink(journal):
        return document, None
    try:
        values, _torn = read_journal(journal, owner=os.stat(path).st_uid)
    except ForeignOwner as exc:
        document[JOURNAL_LEFT_OUT] = f"{exc}, who wrote {os.path.basename(path)}: not read into it"
        return document, None
    header = values[0] if values else {}
    if not isinstance(header, dict) or header.get("format") != JOURNAL_FORMAT or header.get("journal_id") != token:
        return document, None
    for number, value in enumerate(values[1:], 2):
        _apply_journal_line(f"{journal} line {number}", document, value)
    if document["format"] == CHOICES_FORMAT:
        document["count"], document["digest"] = len(document["log"]), digest_of(document["log"])
    return document, journal


def _apply_journal_line(where: str, document: dict, value) -> None:
    _require(where, isinstance(value, dict), "a journal line must be an object")
    if document["format"] == CHOICES_FORMAT:
        _check_log_entry(where, value.get("entry"), value.get("choice"))
        document["log"].setdefault(value["entry"], value["choice"])
        return
    if "packages" in value:
        _string_map(where, value, "packages", "package")
        document.setdefault("packages", {}).update(value["packages"] or {})
    if "kernel" in value:
        kernel, key, entry = value.get("kernel"), value.get("key"), value.get("entry")
        _require(where, isinstance(kernel, str) and isinstance(key, str), "a journal entry needs a 'kernel' and a 'key'")
        _check_record_entry(where, f"kernel {kernel!r} key {key!r}", entry)
        document["kernels"].setdefault(kernel, {}).setdefault(key, entry)
