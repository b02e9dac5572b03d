"""The JSON files autotune_guard reads and writes: tables, records and choices.

Every file carries a ``format`` field; nothing is pickled.  Writes go to a temporary file in the
same directory and are renamed over the target, so a reader (or a rank killed mid-write) never
sees half a file.  Every read error names the file.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
from typing import Mapping

from .selection import EXTRA_FIELDS, OPTION_FIELDS

TABLE_FORMAT = "autotune_guard.table/1"
RECORD_FORMAT = "autotune_guard.record/1"
CHOICES_FORMAT = "autotune_guard.choices/1"
FORMATS = (TABLE_FORMAT, RECORD_FORMAT, CHOICES_FORMAT)

logger = logging.getLogger("autotune_guard")


class FileFormatError(ValueError):
    """A file that cannot be used; the message starts with its path."""


_file_mode: int | None = None


def _new_file_mode() -> int:
    """What ``open(path, "w")`` would give (0o666 less the umask): mkstemp makes files 0o600,
    which would hide a record or table from the colleague who merges or pins with it."""
    global _file_mode
    if _file_mode is None:
        umask = None
        try:  # Linux reports it without the set-and-restore race of os.umask()
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("Umask:"):
                        umask = int(line.split()[1], 8)
        except (OSError, ValueError):
            pass
        if umask is None:
            umask = os.umask(0o022)
            os.umask(umask)
        _file_mode = 0o666 & ~umask
    return _file_mode


def atomic_write_json(path: str, document: Mapping) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(path) + ".", dir=directory)
    try:
        os.chmod(tmp, _new_file_mode())
        with os.fdopen(fd, "w") as out:
            json.dump(document, out, indent=1, sort_keys=True)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


MAX_FILE_BYTES = 256 * 1024 * 1024  # far above any record, choices file or table
MAX_DEPTH = 16  # the deepest of our formats nests 7 levels (record -> kernels -> ... -> kwargs)
MAX_INT = 2 ** 63  # integers beyond int64 are no config, rank or count of ours


def read_document(path: str, formats=FORMATS) -> dict:
    """Parse and check one file; raises FileFormatError naming it, and nothing else: every
    field a reader of this package uses is checked for its type here, so that no malformed file
    (wrong types, deep nesting, huge numbers, a FIFO or a device) reaches them."""
    document = _parse(path)
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


def _parse(path: str):
    """The JSON value in ``path``: a regular file, opened without blocking (a FIFO would hang a
    plain open), of bounded size, depth and integer width."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if os.path.isdir(path):
            raise FileFormatError(f"{path}: is a directory, not a file") from None
        raise FileFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise FileFormatError(f"{path}: is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) \
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "not a regular file"
            raise FileFormatError(f"{path}: is {kind}, not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise FileFormatError(f"{path}: is {info.st_size} bytes, more than any autotune_guard file "
                                  f"({MAX_FILE_BYTES // 2**20} MiB)")
        with os.fdopen(fd, "rb") as src:
            fd = None
            data = src.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    finally:
        if fd is not None:
            os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FileFormatError(f"{path}: is not UTF-8 text") from None
    if not text.strip():
        raise FileFormatError(f"{path}: is empty")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileFormatError(f"{path}: is not valid JSON, truncated or corrupt ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise FileFormatError(f"{path}: nests deeper than any autotune_guard file (limit {MAX_DEPTH})") from None
    except ValueError as exc:  # an integer of thousands of digits, among others
        raise FileFormatError(f"{path}: is not usable JSON ({str(exc)[:120]})") from None
    _check_depth_and_numbers(path, document)
    return document


def _check_depth_and_numbers(path, document) -> None:
    pending = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise FileFormatError(f"{path}: nests deeper than any autotune_guard file (limit {MAX_DEPTH})")
            pending.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
        elif isinstance(value, int) and not isinstance(value, bool) and not -MAX_INT <= value < MAX_INT:
            raise FileFormatError(f"{path}: holds an integer of {len(str(abs(value)))} digits; none of its fields "
                                  "can be that large")


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
    for name in ("started", "updated"):
        _optional(path, document, name, (int, float), "a number")


def check_descriptor(path: str, where: str, desc) -> None:
    _require(path, isinstance(desc, dict), f"{where}: a config must be an object")
    _require(path, isinstance(desc.get("kwargs", {}), dict), f"{where}: 'kwargs' must be an object")
    for name, value in desc.get("kwargs", {}).items():
        _require(path, value is None or isinstance(value, (int, float, str)),
                 f"{where}: meta-parameter {name!r} must be a number, string or boolean")
    for name in OPTION_FIELDS:
        if name in desc and desc[name] is not None:
            _require(path, isinstance(desc[name], int) and not isinstance(desc[name], bool), f"{where}: {name!r} must be an integer")
    unknown = set(desc) - {"kwargs", *OPTION_FIELDS, *EXTRA_FIELDS}
    _require(path, not unknown, f"{where}: unknown config fields {sorted(unknown)}")


def _check_kernels(path, document, entry_check):
    kernels = document.get("kernels")
    _require(path, isinstance(kernels, dict), "'kernels' must be an object of kernel name -> entries")
    for kernel, entries in kernels.items():
        _require(path, isinstance(entries, dict), f"kernel {kernel!r}: entries must be an object of key -> config")
        for key, entry in entries.items():
            entry_check(path, f"kernel {kernel!r} key {key!r}", entry)


def _check_table(path, document):
    _require(path, isinstance(document.get("arch"), str) and document["arch"], "a table needs an 'arch' string")
    for name in ("triton", "torch", "python"):
        _optional(path, document, name, str, "a version string")
    _string_map(path, document, "packages", "package")
    _check_kernels(path, document, check_descriptor)


def _check_record(path, document):
    _require(path, isinstance(document.get("arch"), str), "a record needs an 'arch' string")
    _require(path, _is_int(document.get("rank")), "a record needs an integer 'rank'")
    _common_fields(path, document)
    _string_map(path, document, "versions", "name")
    _string_map(path, document, "packages", "package")

    def entry_check(path, where, entry):
        _require(path, isinstance(entry, dict) and "config" in entry, f"{where}: a record entry needs a 'config'")
        check_descriptor(path, where, entry["config"])
        for name in ("how", "signature"):
            _require(path, entry.get(name) is None or isinstance(entry[name], str), f"{where}: {name!r} must be a string")
        timings = entry.get("timings")
        _require(path, timings is None or isinstance(timings, dict), f"{where}: 'timings' must be an object or null")
        for measured in (timings or {}).values():
            values = measured if isinstance(measured, list) else [measured]
            _require(path, values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values),
                     f"{where}: a timing must be a number or a list of numbers (median first)")
        candidates = entry.get("candidates", [])
        _require(path, isinstance(candidates, list), f"{where}: 'candidates' must be a list of configs")
        for candidate in candidates:
            check_descriptor(path, f"{where} candidate", candidate)

    _check_kernels(path, document, entry_check)


def _check_choices(path, document):
    _require(path, _is_int(document.get("rank")), "a choices file needs an integer 'rank'")
    _common_fields(path, document)
    _optional(path, document, "count", int, "an integer")
    _require(path, isinstance(document.get("log"), dict), "a choices file needs a 'log' object")
    _require(path, isinstance(document.get("digest"), str), "a choices file needs a 'digest' string")
    for entry, choice in document["log"].items():
        _require(path, entry.count("|") >= 2 and isinstance(choice, str) and ";" in choice,
                 f"log entry {entry!r}: expected 'arch|module.function|key' -> 'config;how'")


_CHECKS = {TABLE_FORMAT: _check_table, RECORD_FORMAT: _check_record, CHOICES_FORMAT: _check_choices}


# --- tables -------------------------------------------------------------------------------------

PACKAGED_TABLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tables")


def table_candidates(table_path, arch: str) -> list[str]:
    """Files to read for ``arch``, highest priority first: each AUTOTUNE_TABLE_PATH entry (a
    directory holding ``<arch>.json``, or a table file), then the tables packaged here."""
    found = []
    for entry in (*table_path, PACKAGED_TABLES):
        if os.path.isdir(entry):
            candidate = os.path.join(entry, f"{arch}.json")
            if os.path.exists(candidate):
                found.append(candidate)
        elif os.path.exists(entry) or entry is not PACKAGED_TABLES:
            found.append(entry)
    return found


_stale_warned: set = set()  # table files whose version mismatch was already reported


def installed_version(package: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:
        return None


def load_tables(table_path, arch: str, versions: Mapping[str, str]) -> dict:
    """``{kernel: {key: descriptor}}`` for ``arch``; earlier files win, entry by entry, except
    that a ``*`` entry stands for every key, so it hides what later files have for that kernel.
    A file that cannot be used is skipped with a warning naming it; a version mismatch (Triton,
    torch, or a kernel package the table names) warns once per file, since tables go stale."""
    merged: dict = {}
    wildcarded: set = set()
    for path in table_candidates(table_path, arch):
        try:
            document = read_document(path, formats=(TABLE_FORMAT,))
        except FileFormatError as exc:
            logger.warning("skipping table %s", exc)
            continue
        if document["arch"] != arch:
            logger.warning("skipping table %s: it is for arch %s, this process runs %s", path, document["arch"], arch)
            continue
        _warn_if_stale(path, document, versions)
        logger.debug("using table %s (source: %s)", path, json.dumps(document.get("source"), sort_keys=True))
        for kernel, entries in document["kernels"].items():
            if kernel in wildcarded:
                continue
            slot = merged.setdefault(kernel, {})
            for key, entry in entries.items():
                slot.setdefault(key, entry)
            if "*" in entries:
                wildcarded.add(kernel)
    return merged


def _warn_if_stale(path: str, document: Mapping, versions: Mapping[str, str]) -> None:
    made_for = [(name, document.get(name), versions.get(name)) for name in ("triton", "torch")]
    made_for += [(name, made, installed_version(name)) for name, made in sorted((document.get("packages") or {}).items())]
    stale = [f"{name} {made} (running {running})" for name, made, running in made_for
             if made and running and made != running]
    key = (os.path.abspath(path), tuple(stale))
    if stale and key not in _stale_warned:
        _stale_warned.add(key)
        logger.warning("table %s was made with %s: its choices may be stale; record and merge it again",
                       path, ", ".join(stale))


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
