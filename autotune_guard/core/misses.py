"""Why a pinned key got no table entry, in words a person can act on: which table paths were
read and why each did not serve (no file for this arch, no entry, an entry for another version of
the kernel), and the command that fixes it. Said by the runtime's pinned rule at the first
fallback of a kernel and by the uncaught-error hook for a refusal; computed only then, never on
a steady launch."""

from __future__ import annotations

import os
from typing import Sequence

from .errors import FileFormatError
from .schema import TABLE_FORMAT, read_document
from .store_url import hide_password, is_store_url
from .tables import PACKAGED_TABLES

FALLBACKS = ("min_cost", "first")  # the pinned picks that mean "the tables lacked it"

FIX = ("record then merge a table: AUTOTUNE_RECORD_PATH=runs/rec <your command>, then python -m autotune_guard.report "
       "merge runs/rec -o {table}; or let consensus tune the missing keys once and keep them: "
       "AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH={directory} <your command>")


def fix_hint(table_path: Sequence[str], arch: str) -> str:
    """The commands that give the missing keys a table entry, naming this process's table file."""
    directory = next((p for p in table_path if os.path.isdir(p)), "tables")
    return FIX.format(table=os.path.join(directory, f"{arch}.json"), directory=directory)


def miss_reasons(table_path: Sequence[str], arch: str, kernel: str, key: str, down=()) -> list[str]:
    """One phrase per table read (or looked for) for ``kernel`` and ``key`` under ``arch``;
    ``down``: the table store URLs that did not answer (never read, so never said to lack an entry)."""
    reasons = [] if table_path else ["no AUTOTUNE_TABLE_PATH was given"]
    for entry in (*table_path, PACKAGED_TABLES):
        if is_store_url(entry) and entry in down:
            reasons.append(f"{hide_password(entry)}: the table store did not answer, so it was not read "
                           "(AUTOTUNE_TABLE_STORE_DOWN=local)")
            continue
        if is_store_url(entry):
            reasons.append(f"{hide_password(entry)}: the table store holds no usable entry for this kernel and key")
            continue
        if os.path.isdir(entry):
            path = os.path.join(entry, f"{arch}.json")
            if not os.path.exists(path):
                if entry is not PACKAGED_TABLES:
                    reasons.append(f"{entry}: no file for this arch ({arch}.json){_holds(entry)}")
                continue
        elif entry is PACKAGED_TABLES:
            continue
        else:
            path = entry
        reasons.append(f"{path}: {_why_not(path, arch, kernel, key)}")
    return reasons


def _holds(directory: str) -> str:
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except OSError:
        return ""
    if not names:
        return "; the directory holds no table"
    return f"; it holds {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"


def _why_not(path: str, arch: str, kernel: str, key: str) -> str:
    try:
        document = read_document(path, formats=(TABLE_FORMAT,))
    except FileFormatError as exc:
        return f"not used ({str(exc).removeprefix(path + ': ')})"
    if document["arch"] != arch:
        return f"for arch {document['arch']}, this process runs {arch}"
    kernels = document["kernels"]
    entries = next((kernels[n] for n in (kernel, kernel.rpartition(".")[2]) if kernels.get(n)), None)
    if entries is None:
        return f"no entry for this kernel ({len(kernels)} other kernel{'s' * (len(kernels) != 1)})"
    if key not in entries and "*" not in entries:
        return f"no entry for this key ({len(entries)} other key{'s' * (len(entries) != 1)} of the kernel)"
    return "its entry matches none of the kernel's candidates (recorded against another version of it?)"


def fallback_line(what: str, rule: str, explicit: bool) -> str:
    """The short line said once per kernel for the job at its first fallback; the detail
    (``fallback_message``) is logged at DEBUG on every rank that falls back."""
    cost = "the smallest tile" if rule == "min_cost" else "the first declared config"
    why = "as AUTOTUNE_ON_MISS asks" if explicit else "it can be several times slower"
    return f"{what}: no table entry; pinned runs the {rule} fallback ({cost}; {why}). Why, the fix: AUTOTUNE_LOG_LEVEL=debug"


def at_exit_line(what: str) -> str:
    """The line said once per kernel for the job when AUTOTUNE_ON_MISS=error_at_exit meets a key the tables lack."""
    return (f"refused: {what}: no table entry; it runs min_cost until exit, where every key refused is named "
            "and the process fails (AUTOTUNE_ON_MISS=error_at_exit)")


def fallback_message(what: str, rule: str, reasons: list[str], explicit: bool, hint: str) -> str:
    """The detail of a kernel's first fallback: why each table did not serve, and the fix (unless
    the fallback was asked for)."""
    cost = "the smallest tile" if rule == "min_cost" else "the first declared config"
    why = "as AUTOTUNE_ON_MISS asks" if explicit else "reproducible, but it can be several times slower than a tuned config"
    return (f"{what}: no usable table entry, so pinned runs the {rule} fallback ({cost}; {why}). Tables: {'; '.join(reasons)}. "
            "Later keys of this kernel that fall back are counted at exit" + ("" if explicit else f". To pin tuned configs: {hint}"))
