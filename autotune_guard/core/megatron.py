"""Megatron Core's tuning tables (``megatron.core.tuning.table``'s ``<arch>.json``) read as ours.

Its files have nearly our table's shape but no ``format`` field: ``arch``, ``triton``,
``packages``, ``source`` (a string), and ``kernels`` -> kernel (``module.function`` or a bare
name) -> key -> config (``kwargs``, ``num_warps``, ``num_stages``, ``num_ctas``, ``maxnreg``,
``ir_override``), a ``*`` key standing for every key without its own entry. Its keys are written
``name=value|...|dtype|dtype``; ours (``model.key_text``) are the same values and dtypes in the
same order (Triton's), joined by ``,``. Converting here, once, lets every reader of tables (pinned,
consensus, the report, the store) serve Megatron's files unchanged. Pure: standard library only.
"""

from __future__ import annotations

from typing import Mapping

from .errors import FileFormatError

SHAPE = "megatron.core.tuning.table"  # what a converted table's READ_AS field says
READ_AS = "read_as"  # a converted table: the shape it was read as
READ_NOTES = "read_notes"  # a converted table: one line naming what could not be read as ours (absent if none)
FIELDS = ("arch", "triton", "packages", "source", "kernels")  # what Megatron's ``table.write`` writes
SHOWN_UP_TO = 5  # untranslatable keys named in the note line; the rest counted


def recognised(document) -> bool:
    """Whether ``document`` has Megatron's table shape, strictly: an object with no ``format``,
    ``arch`` a non-empty string, ``kernels`` a non-empty object of objects of objects (kernel ->
    key -> config). Anything else, an empty one too (nothing to serve), is left to the readers'
    own refusals."""
    if not isinstance(document, dict) or "format" in document:
        return False
    arch, kernels = document.get("arch"), document.get("kernels")
    if not isinstance(arch, str) or not arch or not isinstance(kernels, dict) or not kernels:
        return False
    return all(isinstance(entries, dict) and all(isinstance(entry, dict) for entry in entries.values())
               for entries in kernels.values())


def converted(path: str, document: Mapping, table_format: str) -> dict:
    """A ``recognised`` Megatron table as our table document (``table_format``): the same arch,
    versions and entries (configs unchanged; ``ir_override`` kept, as our checks allow it and the
    pinned rule compares it), keys translated (``our_key``), ``source`` kept as ``{"by": SHAPE,
    "text": ...}``, ``READ_AS`` saying so, and ``READ_NOTES`` naming in one line the keys left out
    (a key text that cannot be read as ours, or two that read as one). The entries' configs are
    checked by the caller (``schema``). Raises FileFormatError naming ``path`` for a field
    Megatron does not write or one of the wrong type."""
    unknown = sorted(set(document) - set(FIELDS))
    if unknown:
        raise FileFormatError(f"{path}: has no 'format' field and Megatron's table shape, but a field Megatron's "
                              f"tables do not have: {unknown[0][:80]!r} (they hold {', '.join(FIELDS)})")
    for name in ("triton", "source"):
        if document.get(name) is not None and not isinstance(document[name], str):
            raise FileFormatError(f"{path}: {name!r} must be a string (a Megatron table, read without 'format')")
    kernels, left_out = _kernels(document["kernels"])
    table = {"format": table_format, "arch": document["arch"]}
    if document.get("triton"):  # Megatron writes "" where it knew no version
        table["triton"] = document["triton"]
    packages = document.get("packages")
    if isinstance(packages, dict) and table.get("triton") and packages.get("triton") == table["triton"]:
        packages = {name: version for name, version in packages.items() if name != "triton"}  # said once, as 'triton'
    table["packages"] = packages if packages is not None else {}
    table["source"] = {"by": SHAPE, "text": document.get("source") or ""}
    table[READ_AS] = SHAPE
    if left_out:
        table[READ_NOTES] = [_note(path, left_out)]
    table["kernels"] = kernels
    return table


def _kernels(kernels: Mapping) -> tuple[dict, list[str]]:
    """kernel -> our key -> entry, and the keys left out as phrases: the first of two Megatron
    keys that read as one of ours is kept (file order)."""
    found: dict[str, dict] = {}
    left_out: list[str] = []
    for kernel, entries in kernels.items():
        ours: dict = {}
        for key, entry in entries.items():
            text = our_key(key)
            if text is None:
                left_out.append(f"kernel {kernel} key {key!r} (not name=value parts, then dtypes)")
            elif text in ours:
                left_out.append(f"kernel {kernel} key {key!r} (reads as ({text}), as an earlier key does)")
            else:
                ours[text] = dict(entry)
        found[kernel] = ours
    return found, left_out


def _note(path: str, left_out: list[str]) -> str:
    shown = "; ".join(left_out[:SHOWN_UP_TO])
    more = f"; and {len(left_out) - SHOWN_UP_TO} more" if len(left_out) > SHOWN_UP_TO else ""
    count = len(left_out)
    return (f"{path}: read as Megatron's table; {count} entr{'y' if count == 1 else 'ies'} left out, "
            f"{'its key' if count == 1 else 'their keys'} not readable as ours: {shown}{more}")


def our_key(text: str) -> str | None:
    """Megatron's key text (``N=4096|HEADDIM=128|torch.bfloat16``) as ours
    (``4096,128,torch.bfloat16``); ``*`` stays ``*``. None where it cannot be said: a ``name=value``
    part after a dtype, a name that is no identifier, an empty part, or a part holding a comma or
    starting with a quote (its value was a text our key would quote, or a tuple: Megatron's
    ``str(value)`` cannot tell). A value is taken as Megatron wrote it, ``str(value)``, as ours is
    for a number, a boolean or None."""
    if text in ("*", ""):
        return text
    values, dtypes = [], []
    for part in text.split("|"):
        name, equals, value = part.partition("=")
        if equals:
            if dtypes or not name.isidentifier():
                return None
            values.append(value)
        else:
            dtypes.append(part)
    parts = values + dtypes
    if any(not part or "," in part or part.startswith('"') for part in parts):
        return None
    return ",".join(parts)
