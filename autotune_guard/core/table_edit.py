"""A table file changed on purpose (``report merge -o``, ``report retune``, ``report prune``) under the
lock a consensus job's growth takes (``<dir>/.<arch>.lock``), so that a job adding winners at the
same moment loses nothing and nor does the command: read, change, write in one rename."""

from __future__ import annotations

import os
from typing import Callable, Mapping

from . import jsonfile, safe_files
from .errors import InputError
from .schema import TABLE_FORMAT, read_document

LOCK_WAIT_S = 30.0  # a command waits this long for a running job's write (each takes milliseconds)


def lock_path(table: str, arch: str) -> str:
    """The lock file consensus growth takes for ``arch``'s table beside ``table``."""
    return os.path.join(os.path.dirname(os.path.abspath(table)), f".{arch}.lock")


def edit_table(path: str, change: Callable[[dict | None], Mapping | None], arch: str | None = None) -> Mapping | None:
    """Apply ``change`` to the table at ``path`` (None where there is none yet; then ``arch`` names
    the lock) under its lock, and write what it returns (None: nothing is written). Returns what was
    written. An unusable table is an ``InputError`` naming it, and nothing is written."""
    document = _read(path)
    arch = document["arch"] if document is not None else arch
    if arch is None:
        raise InputError(f"{path}: no table there, and no arch to make one for")
    fd, _ = safe_files.open_regular(lock_path(path, arch), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        holder = safe_files.lock_within(fd, LOCK_WAIT_S)
        if holder is not None:
            raise InputError(f"{lock_path(path, arch)}: held by {f'process {holder}' if holder else 'another process'} "
                             f"for {LOCK_WAIT_S:g} s; {path} is left as it was")
        changed = change(_read(path))  # again, under the lock: a job may have written meanwhile
        if changed is not None:
            jsonfile.atomic_write_json(path, changed)
        return changed
    finally:
        os.close(fd)


def _read(path: str) -> dict | None:
    if not os.path.lexists(path):
        return None
    return read_document(path, formats=(TABLE_FORMAT,))
