"""A table store's values checked (``adapters.redis_tables`` reads them): each field of a kernel's
hash is a tuning key (of the arch's older one-hash layout, ``["kernel", "key"]`` as JSON), each
value ``{"entry": <config>, "added": {...}, "retune": {...}}`` as JSON (``retune`` where report
retune asked), each measurement (the kernel's ``measured`` hash, same field) and provenance a JSON
object, each superseded kernel version a JSON object; parsed with the files' bounds (never
unpickled or evaluated) and checked by ``core.schema`` (measurements are cleaned where they are
used: ``core.tables.measured_of``). A value that cannot be used is one note naming the store, key
and field, and is left out. Standard library only."""

from __future__ import annotations

import json

from . import jsonfile, schema
from .errors import FileFormatError

MAX_VALUE_BYTES = 64 * 1024  # an entry is a few hundred bytes; anything far larger is not ours
MAX_MEASURED_BYTES = 1024 * 1024  # a key's measurements: every candidate's timing in up to 10 runs
MAX_SUPERSEDED_BYTES = 16 * 1024 * 1024  # a kernel version replaced whole, with its measurements

MEASURED, RETUNE, SUPERSEDED = "measured", "retune", "superseded"  # as core.tables and core.table_writes name them


def new_document(arch: str, shown: str) -> dict:
    """The empty table document of a store's arch, ``shown``: its URL without the password."""
    return {"format": schema.TABLE_FORMAT, "arch": arch, "source": {"store": shown}, "kernels": {},
            "provenance": {}, "added": {}, MEASURED: {}, RETUNE: {}}


def absorb_kernel(document: dict, kernel: str, entries: tuple, notes: list, measured: tuple = ("", ())) -> None:
    """One piece of a kernel's hash added to ``document``: ``entries`` is (where, flat field-value
    list), each field a tuning key; a value the read script replaced by its length is an int.
    ``measured``: (where, flat field-value list) of the same keys' measurements."""
    where, flat = entries
    for field, value in pairs(flat):
        key = _text(field)
        parsed = checked_config(f"{where} field {said(field)}", value, notes) if key else None
        if key is None:
            notes.append(f"skipping {where} field {said(field)}: a tuning key must be non-empty UTF-8 text")
        if parsed is not None:
            _put(document, kernel, key, *parsed)
    where, flat = measured
    held = document["kernels"].get(kernel, {})
    for field, value in pairs(flat):
        key = _text(field)
        if key not in held:  # its entry was left out (said): its measurement goes with it
            continue
        found = checked_value(f"{where} field {said(field)}", value, notes, MAX_MEASURED_BYTES, "measurement")
        if isinstance(found, dict):
            document[MEASURED].setdefault(kernel, {})[key] = found
        elif found is not None:
            notes.append(f"skipping {where} field {said(field)}: a measurement must be a JSON object")


def absorb_superseded(document: dict, superseded: tuple, notes: list) -> dict:
    """Superseded kernel versions (where, flat field-value list) added to ``document`` in field
    order (the writer names them by time); returns item id -> field name (a writer's dedup)."""
    where, flat = superseded
    fields = {}
    for field, value in sorted(pairs(flat)):
        found = checked_value(f"{where} field {said(field)}", value, notes, MAX_SUPERSEDED_BYTES, "kernel version")
        if isinstance(found, dict):
            document.setdefault(SUPERSEDED, []).append(found)
            fields[id(found)] = field
        elif found is not None:
            notes.append(f"skipping {where} field {said(field)}: a superseded kernel version must be a JSON object")
    return fields


def absorb_pairs(document: dict, entries: tuple, notes: list) -> None:
    """One piece of an arch's older hash (field ``["kernel", "key"]``) added to ``document``."""
    where, flat = entries
    for field, value in pairs(flat):
        parsed = checked_entry(f"{where} field {said(field)}", field, value, notes)
        if parsed is not None:
            (kernel, key), *config = parsed
            _put(document, kernel, key, *config)


def absorb_provenance(document: dict, provenance: tuple, notes: list) -> None:
    """Provenance values (where, flat kernel-value list) added to ``document``."""
    where_provenance, flat = provenance
    for field, value in pairs(flat):
        where = f"{where_provenance} field {said(field)}"
        found = checked_value(where, value, notes)
        if isinstance(found, dict):
            document["provenance"][field.decode("utf-8", "replace")] = found
        elif found is not None:
            notes.append(f"skipping {where}: a provenance must be a JSON object")


def merge(document: dict, part: dict, kernel: str | None = None) -> dict:
    """``part``'s entries (``kernel``'s alone where one is named), who added them, their
    measurements and provenance, added to ``document`` where it has none: what ``document`` holds
    already stays; ``part``'s superseded kernel versions are added after ``document``'s."""
    for name, entries in part["kernels"].items():
        if kernel is not None and name != kernel:
            continue
        for key, entry in entries.items():
            if key not in document["kernels"].get(name, {}):
                beside = [part.get(what, {}).get(name, {}).get(key) for what in ("added", MEASURED, RETUNE)]
                _put(document, name, key, entry, *beside)
        if name in part["provenance"]:
            document["provenance"].setdefault(name, part["provenance"][name])
    older = [item for item in part.get(SUPERSEDED) or () if kernel is None or item.get("kernel") == kernel]
    if older:
        document.setdefault(SUPERSEDED, []).extend(older)
    return document


def _put(document: dict, kernel: str, key: str, entry, added, measured=None, retune=None) -> None:
    document["kernels"].setdefault(kernel, {})[key] = entry
    for name, value in (("added", added), (MEASURED, measured), (RETUNE, retune)):
        if value is not None:
            document.setdefault(name, {}).setdefault(kernel, {})[key] = value


def _text(field: bytes) -> str | None:
    try:
        text = field.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text or None


def pairs(flat):
    return zip(flat[0::2], flat[1::2])


def said(field: bytes) -> str:
    text = field[:200].decode("utf-8", "replace")
    return repr(text + ("..." if len(field) > 200 else ""))


def loads_or_none(value):
    try:
        return jsonfile.parse_bytes("store value", value)
    except FileFormatError:
        return None


def checked_value(where: str, value, notes: list, limit: int = MAX_VALUE_BYTES, what: str = "table entry"):
    """A value parsed as JSON with the files' bounds; None (and one note) when it is unusable."""
    if isinstance(value, int):  # the read script sent its length instead
        notes.append(f"skipping {where}: its value is {value} bytes, more than any {what} ({limit}); not read")
        return None
    try:
        return jsonfile.parse_bytes(where, value)
    except FileFormatError as exc:
        notes.append(f"skipping {str(exc)}")
        return None


def checked_entry(where: str, field: bytes, value, notes: list):
    """((kernel, key), config, who added it, None, a retune asked) of one field of an arch's older hash,
    checked; None when unusable."""
    try:
        name = json.loads(field.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        name = None
    if not (isinstance(name, list) and len(name) == 2 and all(isinstance(n, str) and n for n in name)):
        notes.append(f"skipping {where}: the field is not [\"kernel\", \"key\"] as JSON")
        return None
    parsed = checked_config(where, value, notes)
    return None if parsed is None else (tuple(name), *parsed)


def checked_config(where: str, value, notes: list):
    """(config, who added it, a retune asked for it) of one stored value, checked; None when unusable."""
    found = checked_value(where, value, notes)
    if found is None:
        return None
    try:
        schema.check_descriptor(where, "entry", found.get("entry") if isinstance(found, dict) else None)
    except FileFormatError as exc:
        notes.append(f"skipping {exc} (the value must be {{\"entry\": <config>, \"added\": {{...}}}})")
        return None
    added, retune = found.get("added"), found.get(RETUNE)
    return (found["entry"], added if isinstance(added, dict) else None, None,
            retune if isinstance(retune, dict) else None)


def stored_value(entry, added=None, retune=None) -> dict:
    """What a kernel's hash holds for one key (``value_bytes`` writes it)."""
    value = {"entry": entry}
    for name, part in (("added", added), (RETUNE, retune)):
        if isinstance(part, dict):
            value[name] = part
    return value


def value_bytes(value) -> bytes:
    """A stored value as the store keeps it: strict compact JSON (a timing that is not finite as null)."""
    return jsonfile.dumps(value, compact=True).rstrip("\n").encode()
