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

Each kernel new to the table gets this job's provenance of it (``provenance``, as ``report merge``
writes it), so pinned mode and consensus name its entries once the kernel changes. A kernel the
table holds against another version of it (source, candidates or tuning options) gets none of
this job's winners, and that is said once: one version per kernel.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import tempfile
import threading
import time

from . import evidence
from .core import jsonfile, tables
from .core.debounced import DebouncedWriter
from .core.errors import FileFormatError, PolicyError
from .core.model import signature
from .core.schema import TABLE_FORMAT, read_document
from .runtime import current

try:
    import fcntl
except ImportError:  # not POSIX: writes are still atomic, but not merged under a lock
    fcntl = None

logger = logging.getLogger("autotune_guard")

_write_lock = threading.Lock()  # one write at a time in this process (record locks do not exclude its threads)
_written: set = set()  # ChoiceKeys this process has put in its table
_directory: str | None = None  # where this policy's table grows; None: it does not
_added: dict[str, int] = {}  # table file -> entries this process added to it
_registered = False
_tuned_seen: tuple = ()  # (identity, size) of the epoch's tuned winners at the last wake-up


def configure(policy) -> None:
    """Called as ``policy`` is installed: where its table grows, if anywhere. A table directory
    that cannot be written fails here, before any kernel runs; table files alone are said once."""
    global _directory, _registered
    _directory = None
    _added.clear()  # what the exit says is this policy's
    if policy is None or policy.mode != "consensus" or not policy.table_path:
        return
    if not _registered:
        atexit.register(_at_exit)
        current().subscribe(_changed)
        current().on_fork(_after_fork_in_child)
        _registered = True
    directory = tables.writable_table_dir(policy.table_path)
    if directory is None:
        current().warn_once("table growth: no directory", (
            f"AUTOTUNE_TABLE_PATH={os.pathsep.join(policy.table_path)} names table files only: consensus pins "
            "the keys they hold, but has nowhere to add what this job tunes; name a directory (its <arch>.json "
            "grows) to keep the winners for the next run"), scope="process")
        return
    check_writable(directory, policy.table_path)
    _directory = directory


def check_writable(directory: str, table_path) -> None:
    """Refuse a table directory this process cannot write files in (tried: root passes os.access)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".autotune_guard-probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise PolicyError(f"AUTOTUNE_TABLE_PATH={os.pathsep.join(table_path)!r}: cannot write files in {directory} "
                          f"({exc.strerror}); AUTOTUNE_MODE=consensus adds the winners it tunes to <dir>/<arch>.json "
                          "there: allowed: a directory this process can write, or table files only (then nothing "
                          "is added)") from None


def flush() -> None:
    """Add this process's winners not written yet to the table, now."""
    with _write_lock:
        directory = _directory
        epoch = current().epoch
        pending = {key: desc for key, desc in list(epoch.tuned.items()) if key not in _written}
        if directory is None or not pending:
            return
        by_arch: dict = {}
        for key, desc in pending.items():
            by_arch.setdefault(key.arch, {}).setdefault(key.kernel, {})[key.key] = desc
        for arch, additions in sorted(by_arch.items()):
            try:
                _grow(directory, arch, additions)
            except (OSError, FileFormatError) as exc:
                current().warn_once(f"table growth: {directory} {arch}", f"could not add this job's winners to the "
                                    f"table in {directory}: {exc}; the next run tunes them again", scope="process")
                continue
            _written.update(key for key in pending if key.arch == arch)


def _grow(directory: str, arch: str, additions: dict) -> None:
    """Under the table's lock: re-read it, add what it lacks, rename the whole file over it."""
    path = os.path.join(directory, f"{arch}.json")
    fd = os.open(os.path.join(directory, f".{arch}.lock"), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        if fcntl is not None:
            fcntl.lockf(fd, fcntl.LOCK_EX)
        document = read_document(path, formats=(TABLE_FORMAT,)) if os.path.lexists(path) else None
        if document is not None and document["arch"] != arch:
            raise FileFormatError(f"{path}: is a table for arch {document['arch']}, not {arch}")
        grown, differing, count, stale = tables.grow_table(document, arch, additions, _provenance(),
                                                           current().facts.get("config_defaults") or {},
                                                           _kernel_provenance(additions))
        if count:
            if document is None:
                grown.update({name: value for name, value in current().facts.versions().items() if value})
                grown["source"] = {**grown["source"], "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            jsonfile.atomic_write_json(path, grown)
            logger.debug("added %d entr%s to the table %s", count, "y" if count == 1 else "ies", path)
            _added[path] = _added.get(path, 0) + count
    finally:
        os.close(fd)  # releases the lock
    for kernel, key, kept in differing:
        tuned = signature(additions[kernel][key])
        current().warn_once(f"table growth differs: {arch}|{kernel}|{key}", (
            f"table {path} holds {signature({'kwargs': {}, **kept})} for kernel {kernel} key ({key}) arch {arch} "
            f"({tables.added_by(grown, kernel, key) or 'from an earlier table'}); this job tuned {tuned}: the "
            "table's entry is kept (the first writer wins)"), scope="process")
    for kernel, differs, left_out in stale:
        current().warn_once(f"table growth stale: {path}|{kernel}", (
            f"table {path} holds entries for kernel {kernel} recorded against another version of it "
            f"({', '.join(differs)}): this job's {left_out} new winner{'' if left_out == 1 else 's'} for it "
            f"{'is' if left_out == 1 else 'are'} not added (a table keeps one version of a kernel); delete the "
            "kernel's entries there (or start a new table directory) and the next consensus run tunes and adds "
            "them"), scope="process")


def _kernel_provenance(additions: dict) -> dict:
    """kernel -> what it is (``model.tuned_winner``'s provenance), for the kernels that say."""
    found = {}
    for kernel, entries in additions.items():
        said = [getattr(desc, "provenance", None) for desc in entries.values()]
        said = [p for p in said if isinstance(p, dict)]
        if said:
            found[kernel] = said[0]
    return found


def _provenance() -> dict:
    """Who adds an entry: the run (the id the evidence files carry), rank, host, time, Triton."""
    facts = current().facts
    rank = (facts.peek("rank_world") or facts.ask("rank_now", (0, 1)))[0]
    return {"run_id": evidence.run_id(), "rank": rank, "host": socket.gethostname(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "triton": facts.get("triton_version")}


# Adds new winners shortly after they are chosen, off the launch path.
_writer = DebouncedWriter(flush, interval_s=0.2, thread_name="autotune_guard-table",
                          failure="could not add this job's winners to the table: %s")


def _at_exit() -> None:
    flush()
    for path, count in sorted(_added.items()):
        logger.info("added %d entr%s this process tuned to the table %s", count, "y" if count == 1 else "ies", path)


def _changed() -> None:
    """A new choice: when the winners tuned here grew, the table is written soon (a constant-time
    check: it runs after every choice)."""
    global _tuned_seen
    tuned = current().epoch.tuned
    if _directory is None or _tuned_seen == (id(tuned), len(tuned)):
        return
    _tuned_seen = (id(tuned), len(tuned))
    _writer.wake()


def _after_fork_in_child() -> None:
    # The parent's writer thread may have held the lock at fork(); the child writes its own winners.
    global _write_lock
    _write_lock = threading.Lock()
    _writer.after_fork_in_child()
