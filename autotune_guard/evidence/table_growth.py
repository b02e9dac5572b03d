"""The job's table grows by what consensus tunes (``AUTOTUNE_MODE=consensus`` with a table
directory in ``AUTOTUNE_TABLE_PATH``).

A winner this process tuned for its whole job (``Guard.tuned_for_job``) is added to
``<dir>/<arch>.json`` shortly after the choice, by a background thread subscribed to the
``Guard``, and once more at exit. Each key of a job is tuned by exactly one process, the one that
claimed it in the Store, and that process writes it: the job's winners are written once each,
with no Store scan, including keys rank 0 never ran. Several jobs may share the directory: each
write takes an exclusive lock on ``<dir>/.<arch>.lock`` (a POSIX record lock: a forked child
never inherits it), re-reads the table, adds what it lacks (an entry present already is kept:
the first writer wins, a differing one is said once) and renames a complete file over it.

The directory may be shared with other users, so nothing there is trusted blindly
(``core.safe_files``): the lock is waited for ``LOCK_WAIT_S`` at most (then this job's winners
are left out, said once with the lock's holder, and the job exits as it would have), the lock file
is never opened through a symlink, a symlinked table is neither followed nor replaced, and a table
of another user and a directory others can write are named once.

Each kernel new to the table gets this job's provenance of it (``provenance``, as ``report merge``
writes it), so pinned mode and consensus name its entries once the kernel changes. A kernel the
table holds against another version of it (source, candidates or tuning options) gets none of
this job's winners, and that is said once: one version per kernel.

What it keeps (the writer shell, the keys written, where the table grows) is one object the
``Guard`` holds (``_growth()``); its exit step is the Guard's ``EXIT_TABLE``, after the evidence.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time

from .. import evidence
from ..core import jsonfile, safe_files, table_writes, tables
from ..core.store_url import store_urls
from ..core.errors import FileFormatError, PolicyError, UnsafePathError
from ..core.megatron import READ_AS
from ..core.schema import TABLE_FORMAT, read_document
from ..runtime import current
from . import growth_words, store_growth
from .writer import WriterShell, held_growth

logger = logging.getLogger("autotune_guard")

LOCK_WAIT_S = 10.0  # the longest a write waits for another process's table lock


class TableGrowth(WriterShell):
    """The writer shell of the table growth (its lock: one write at a time in this process, since
    record locks do not exclude its threads), and what the growth knows."""

    def __init__(self):
        # Adds new winners shortly after they are chosen, off the launch path.
        super().__init__(flush, interval_s=0.2, thread_name="autotune_guard-table",
                         failure="could not add this job's winners to the table: %s")
        self.written: set = set()  # ChoiceKeys this process has put in its table
        self.directory: str | None = None  # where this policy's table grows; None: it does not
        self.added: dict[str, int] = {}  # table file -> entries this process added to it
        self.tuned_seen: tuple = ()  # (identity, size) of the epoch's tuned winners at the last wake-up
        self.given_up: set = set()  # lock files this process waited for in vain: later tries do not wait


def _growth(make: bool = True) -> TableGrowth | None:
    """The growth's state; None where none was needed yet and ``make`` is false."""
    return held_growth("evidence.table_growth", TableGrowth, _changed, _at_exit, make)


def configure(guard, policy) -> None:
    """Called as ``policy`` is installed: where its table grows, if anywhere. A table directory
    that cannot be written fails here, before any kernel runs; table files alone are said once."""
    growth = _growth(make=False)
    if growth is not None:
        growth.directory = None
        growth.added.clear()  # what the exit says is this policy's
        growth.written.clear()  # a new policy's epoch tunes anew, perhaps for another directory
    store_growth.configure(guard, policy)  # a table store (a Redis URL) grows instead; a policy without one stops it
    if policy is not None and store_urls(policy.table_path):
        return
    if policy is None or policy.mode != "consensus" or not policy.table_path:
        return
    growth = _growth()
    directory = tables.writable_table_dir(policy.table_path)
    if directory is None:
        guard.warn_once("table growth: no directory", (
            f"AUTOTUNE_TABLE_PATH={os.pathsep.join(policy.table_path)} names table files only: consensus pins "
            "the keys they hold, but has nowhere to add what this job tunes; name a directory (its <arch>.json "
            "grows) to keep the winners for the next run"), scope="process", name="table-files-only")
        return
    check_writable(directory, policy.table_path)
    _name_if_shared(guard, directory)
    growth.directory = directory


def _name_if_shared(guard, directory: str) -> None:
    """Say once that others can write the table directory (the words ``tables.load_tables`` uses)."""
    note = tables.shared_directory_note(directory)
    if note is not None:
        guard.warn_once(note, note, scope="process")


def check_writable(directory: str, table_path) -> None:
    """Refuse a table directory this process cannot write files in (tried: root passes os.access)."""
    try:
        safe_files.try_writing_in(directory)
    except OSError as exc:
        raise PolicyError(f"AUTOTUNE_TABLE_PATH={os.pathsep.join(table_path)!r}: cannot write files in {directory} "
                          f"({exc.strerror}); AUTOTUNE_MODE=consensus adds the winners it tunes to <dir>/<arch>.json "
                          "there: allowed: a directory this process can write, or table files only (then nothing "
                          "is added)") from None


def flush() -> None:
    """Add this process's winners not written yet to the table, now."""
    growth = _growth()
    guard = current()
    with growth.lock:
        directory = growth.directory
        epoch = guard.epoch
        pending = {key: desc for key, desc in list(epoch.tuned.items()) if key not in growth.written}
        if directory is None or not pending:
            return
        by_arch: dict = {}
        for key, desc in pending.items():
            by_arch.setdefault(key.arch, {}).setdefault(key.kernel, {})[key.key] = desc
        for arch, additions in sorted(by_arch.items()):
            try:
                if not _grow(directory, arch, additions):
                    continue  # its lock is held by another: tried again at exit, without waiting
            except (OSError, FileFormatError) as exc:
                guard.warn_once(f"table growth: {directory} {arch}", f"could not add this job's winners to the "
                                f"table in {directory}: {exc}; the next run tunes them again", scope="process")
                continue
            growth.written.update(key for key in pending if key.arch == arch)


def _grow(directory: str, arch: str, additions: dict) -> bool:
    """Under the table's lock: re-read it, add what it lacks, rename the whole file over it.
    False when the lock could not be had (``LOCK_WAIT_S``)."""
    guard = current()
    path = os.path.join(directory, f"{arch}.json")
    fd = _locked(os.path.join(directory, f".{arch}.lock"))
    if fd is None:
        return False
    try:
        document = _read_table(guard, path)
        if document is not None and document["arch"] != arch:
            raise FileFormatError(f"{path}: is a table for arch {document['arch']}, not {arch}")
        if document is not None and document.get(READ_AS):  # another tool's file: pinned as it is, never rewritten
            guard.warn_once(f"table growth: foreign {path}", (
                f"table {path} is {document[READ_AS]}'s file: consensus pins what it holds but does not rewrite it in "
                "this package's format; this job's new winners are not added (name a table directory of its own "
                "first in AUTOTUNE_TABLE_PATH to keep them)"), scope="process")
            return True
        found = table_writes.grow_table(document, arch, additions, evidence.entry_author(guard),
                                        guard.facts.get("config_defaults") or {}, _kernel_provenance(additions))
        grown = found.document
        if found.count:
            if document is None:
                grown.update({name: value for name, value in guard.facts.versions().items() if value})
                grown["source"] = {**grown["source"], "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            jsonfile.atomic_write_json(path, grown)
            logger.debug("added %d entr%s to the table %s", found.count, "y" if found.count == 1 else "ies", path)
            added = _growth().added
            added[path] = added.get(path, 0) + found.count
    finally:
        os.close(fd)  # releases the lock
    growth_words.say(guard, f"table {path}", arch, lambda kernel, key: additions[kernel][key], found)
    return True


def _locked(lock: str) -> int | None:
    """The lock file's descriptor, locked; None (said once) when another process held it for
    ``LOCK_WAIT_S`` (and at once on later tries). Never opened through a symlink."""
    given_up = _growth().given_up
    fd, _ = safe_files.open_regular(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        holder = safe_files.lock_within(fd, 0 if lock in given_up else LOCK_WAIT_S)
    except BaseException:
        os.close(fd)
        raise
    if holder is None:
        return fd
    os.close(fd)
    if lock not in given_up:
        given_up.add(lock)
        current().warn_once(f"table lock: {lock}", (
            f"could not lock {lock} within {LOCK_WAIT_S:g} s: "
            f"{f'process {holder} holds it' if holder else 'another process holds it'}; this job's new winners "
            "are not added to the table (the next run tunes them again)"), scope="process")
    return None


def _read_table(guard, path: str):
    """The table at ``path`` (None where there is none yet): a symlink is refused (growth would
    turn it into this user's file holding whatever it pointed at); another user's file is named once."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePathError(errno.EEXIST, f"is {safe_files.kind_of(info.st_mode)}: not followed and not replaced "
                              "(make it a regular file to let consensus add to it)", path)
    if safe_files.foreign_owner(info) is not None:
        for note in tables.trust_notes(path):  # the words the table's reading said, if it was read
            guard.warn_once(note, note, scope="process")
    return read_document(path, formats=(TABLE_FORMAT,))


def _kernel_provenance(additions: dict) -> dict:
    """kernel -> what it is (``model.tuned_winner``'s provenance), for the kernels that say."""
    found = {}
    for kernel, entries in additions.items():
        said = [getattr(desc, "provenance", None) for desc in entries.values()]
        said = [p for p in said if isinstance(p, dict)]
        if said:
            found[kernel] = said[0]
    return found


def _at_exit() -> None:
    """The exit step ``EXIT_TABLE``: what is left is added, and what was added is said."""
    flush()
    for path, count in sorted(_growth().added.items()):
        logger.info("added %d entr%s this process tuned to the table %s", count, "y" if count == 1 else "ies", path)


def _changed() -> None:
    """A new choice: when the winners tuned here grew, the table is written soon (a constant-time
    check: it runs after every choice)."""
    growth = _growth()
    tuned = current().epoch.tuned
    if growth.directory is None or growth.tuned_seen == (id(tuned), len(tuned)):
        return
    growth.tuned_seen = (id(tuned), len(tuned))
    growth.wake()
