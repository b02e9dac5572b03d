"""Node-local snapshots of a table store's read (issue 36): the processes of one torchrun job on
one node read an arch's table from the store once between them, not once each.

Whose: a job on a node is told apart by torchrun's ``TORCHELASTIC_RUN_ID`` and
``TORCHELASTIC_RESTART_COUNT`` (a restart reads anew), the host, and the torchrun agent that started
the process (its parent's pid and start time): torchrun's run id is ``none`` for every job started
without ``--standalone`` or ``--rdzv-id``, so two jobs one after the other would meet by it alone.
Without ``TORCHELASTIC_RUN_ID`` (not under torchrun) the process reads the store itself, as does a
rank started through a wrapper (``torchrun ... bash run.sh``: a parent of its own).

Where: ``<runtime dir>/autotune_guard`` or ``<tmp>/autotune_guard-<uid>``, then ``store-snapshots``,
directories only this user can use (``safe_files.private_directory``): one of another user, a
symlink or a mode others can reach is named and not used. One file per store (its URL without the
password: scheme, user, host, port, db, prefix), arch, kernel (a job reads the kernels it meets)
and job, named by a hash of those.

How: the first process of the job on the node to need a kernel takes an exclusive ``flock`` on the
snapshot's lock file, reads the store, writes the snapshot (atomically, as ``jsonfile`` writes) and lets go;
the others wait on the lock (at most ``wait_s``) and read the file. What they read is checked as a
store read is (``schema.check_table``; provenance, ``added``, ``measured`` and ``retune`` as
objects); a snapshot that cannot be used is named and the process reads the store itself. A
holder that dies lets go of the lock with it. A store that gave no table (down, refused, stalled past its timeout) is recorded as
giving none, with why, and the node's other processes go without it too (each says so, once): one
node, one view, even when the store came back meanwhile (a rank that read it then would run other
configs than the first). Writing a snapshot removes this user's files there older than a day.

Standard library only; nothing here warns: the notes returned are said by the table reader."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import stat
import time
from typing import Callable, NamedTuple

from . import jsonfile, safe_files, schema
from .consensus import attempt_scope
from .errors import FileFormatError
from .store_url import hide_password, parse_store_url

try:
    import fcntl
except ImportError:  # not POSIX: every process reads the store itself
    fcntl = None

FORMAT = "autotune_guard.store_snapshot/1"
SUBDIRECTORY = "store-snapshots"
MAX_AGE_S = 24 * 3600  # older files of this user are removed when a snapshot is written
REMOVAL_EVERY_S = 3600  # ...looked for at most this often (``REMOVED_MARKER``'s time)
REMOVED_MARKER = ".removed"
MAX_NOTES = 10_000  # what a snapshot may carry of its read's notes (a store's read says one per bad value)

ReadServer = Callable[[], "tuple[dict | None, list[str]]"]


class Node(NamedTuple):
    """The job (as its snapshots' names and contents say it) and where its snapshots lie."""

    job: str
    directory: str


def this_node(environ=None) -> Node | None:
    """This process's job on this node, from torchrun's variables; None where it has none."""
    environ = os.environ if environ is None else environ
    if fcntl is None or not environ.get("TORCHELASTIC_RUN_ID"):
        return None
    parent = os.getppid()
    job = f"{attempt_scope(environ)}|{socket.gethostname()}|agent {parent} started {_started(parent)}"
    return Node(job, os.path.join(safe_files.node_files_directory(), SUBDIRECTORY))


def _started(pid: int) -> str:
    """When process ``pid`` started (``/proc``'s clock ticks since boot): a pid is reused, this is not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as status:
            return status.read().rpartition(b")")[2].split()[19].decode("ascii", "replace")
    except (OSError, IndexError):
        return "?"


def store_identity(url: str) -> str:
    """The store a URL names, without its password: what a snapshot's name and content hold."""
    a = parse_store_url("AUTOTUNE_TABLE_PATH", url)
    return f"{a.scheme}://{a.username or ''}@{a.host}:{a.port}/{a.db}?prefix={a.prefix}"


def snapshot_path(node: Node, url: str, arch: str, kernel: str | None = None) -> str:
    text = json.dumps([store_identity(url), arch, node.job, *([kernel] if kernel is not None else [])])
    return os.path.join(node.directory, f"{hashlib.sha256(text.encode()).hexdigest()[:40]}.json")


def read(url: str, arch: str, read_server: ReadServer, wait_s: float, node: Node | None = None,
         why: Callable[[], str | None] | None = None, kernel: str | None = None):
    """(the arch's table document, or ``kernel``'s part of it, or None; notes), as ``read_server()``
    gives them, read once per job and node: from the snapshot where one is written, else from the
    store (and written). ``why()``: what the store met when it gave no table (recorded for the
    node's others)."""
    node = node if node is not None else this_node()
    if node is None:
        return read_server()
    shown = hide_password(url)
    try:
        safe_files.private_directory(os.path.dirname(node.directory))
        safe_files.private_directory(node.directory)
    except OSError as exc:
        return _direct(read_server, f"table store snapshots: {_said(exc)}: not used; this process reads the table "
                                   f"store {shown} itself")
    path = snapshot_path(node, url, arch, kernel)
    expected = {"store": store_identity(url), "arch": arch, "job": node.job, **({"kernel": kernel} if kernel else {})}
    try:
        found = _load(path, expected)
        if found is None:
            found = _first_or_wait(path, expected, (read_server, why), wait_s)
    except FileFormatError as exc:
        return _direct(read_server, f"skipping table store snapshot {exc}; this process reads the table store "
                                   f"{shown} itself")
    if found[0] == "none":  # the first reader got no table: this process goes without it too
        # Not naming the kernel: said once per process however many kernels the node goes without.
        return None, [f"table store {shown} gave this job's first process on this node no table for arch {arch} "
                      f"({found[2] or 'it did not answer, or refused'}); this process goes without it too, so that "
                      "every rank of the node runs from the same view of the store"]
    return found[1], found[2]


def _direct(read_server: ReadServer, note: str):
    document, notes = read_server()
    return document, [note, *notes]


def _said(exc: OSError) -> str:
    return f"{exc.filename} {exc.strerror}" if exc.filename else str(exc)


def _first_or_wait(path: str, expected: dict, readers, wait_s: float):
    """Under the snapshot's lock: the snapshot another process wrote meanwhile, else the store's
    read, written for the others. ``("table", document, notes)``, ``("none", None, why)`` or
    ``("read", document, notes)``."""
    read_server, why = readers
    lock = path[:-len(".json")] + ".lock"
    try:
        fd, info = safe_files.open_regular(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        document, notes = read_server()
        return "read", document, [f"table store snapshot lock {_said(exc)}: not used; this process reads the "
                                  "table store itself", *notes]
    try:
        if info.st_uid != os.geteuid():
            raise FileFormatError(f"{lock}: is a file of {safe_files.user_name(info.st_uid)}, not of this user")
        try:
            locked = _locked_within(fd, wait_s)
        except OSError as exc:  # a filesystem without flock (ENOLCK)
            raise FileFormatError(f"{lock}: cannot be locked ({exc.strerror or exc})") from None
        if not locked:
            document, notes = read_server()
            return "read", document, [f"table store snapshot {path}: another process held its lock for over "
                                      f"{wait_s:g} s; this process read the table store itself", *notes]
        found = _load(path, expected)
        if found is not None:
            return found
        document, notes = read_server()
        failure = "; ".join([*(notes[:3] if document is None else []), *([why()] if why and document is None else [])])
        return "read", document, notes + _write(path, expected, document, notes, failure[:2000])
    finally:
        os.close(fd)  # lets go of the lock


def _locked_within(fd: int, seconds: float) -> bool:
    """An exclusive ``flock`` on ``fd`` (per open file: threads that open the file apart exclude
    each other too) within ``seconds``."""
    deadline, pause = time.monotonic() + seconds, 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _write(path: str, expected: dict, document, notes: list, failure: str = "") -> list[str]:
    """The snapshot written (atomically); old files removed. The notes of a write that failed.
    ``failure``: why the store gave no table, said by the node's others."""
    snapshot = {"format": FORMAT, **expected, "written": time.time(), "pid": os.getpid(),
                "table": document, "notes": notes[:MAX_NOTES] if document is not None else [],
                **({"failure": failure} if document is None else {})}
    try:
        jsonfile.atomic_write_json(path, snapshot, compact=True)  # compact: the node's others wait for it
    except OSError as exc:
        return [f"table store snapshot {_said(exc)}: not written; the job's other processes on this node read "
                "the table store themselves"]
    if _removal_due(os.path.dirname(path)):
        remove_old(os.path.dirname(path))
    return []


def _removal_due(directory: str) -> bool:
    """Whether old files are to be looked for now: at most once an hour (a marker file's time), so
    that a write does not stat every file of a busy day's jobs."""
    marker = os.path.join(directory, REMOVED_MARKER)
    try:
        if time.time() - os.lstat(marker).st_mtime < REMOVAL_EVERY_S:
            return False
    except OSError:
        pass
    try:
        with open(marker, "w"):
            pass
    except OSError:
        return False
    return True


def remove_old(directory: str, now: float | None = None) -> int:
    """Remove this user's regular files in ``directory`` older than ``MAX_AGE_S``; how many (best effort)."""
    now = time.time() if now is None else now
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and now - info.st_mtime > MAX_AGE_S:
                os.unlink(path)
                removed += 1
        except OSError:
            continue
    return removed


def _load(path: str, expected: dict):
    """The snapshot at ``path``: None where there is none; ``("table", document, notes)``, or
    ``("none", None, [])`` for a store that gave no table; FileFormatError naming ``path`` for
    anything else (not a regular file of this user, not JSON, not for this store, arch and job, a
    table the schema refuses)."""
    try:
        fd, info = safe_files.open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as source:
        if info.st_uid != os.geteuid():
            raise FileFormatError(f"{path}: is a file of {safe_files.user_name(info.st_uid)}, not of this user")
        data = source.read(jsonfile.MAX_FILE_BYTES + 1)
    if len(data) > jsonfile.MAX_FILE_BYTES:
        raise FileFormatError(f"{path}: is more than {jsonfile.MAX_FILE_BYTES} bytes, more than any snapshot")
    snapshot = jsonfile.parse_bytes(path, data)
    _require(path, isinstance(snapshot, dict) and snapshot.get("format") == FORMAT, f"is not a {FORMAT} file")
    _require(path, all(snapshot.get(name) == value for name, value in expected.items()),
             "is not the snapshot of this store, arch, kernel and job")
    notes = snapshot.get("notes")
    _require(path, isinstance(notes, list) and len(notes) <= MAX_NOTES and all(isinstance(n, str) for n in notes),
             "'notes' must be a list of strings")
    table = snapshot.get("table")
    if table is None:
        failure = snapshot.get("failure", "")
        _require(path, isinstance(failure, str) and len(failure) <= 2000, "'failure' must be a short string")
        return "none", None, failure
    schema.check_table(path, table)
    _require(path, table["arch"] == expected["arch"], f"holds a table for another arch than {expected['arch']}")
    _require(path, "kernel" not in expected or set(table["kernels"]) <= {expected["kernel"]},
             f"holds kernels other than {expected.get('kernel')}")
    for name in ("source", "provenance", "added", "measured", "retune"):
        _require(path, isinstance(table.get(name, {}), dict), f"'table.{name}' must be an object")
    for name in ("measured", "retune"):  # kernel -> key -> object; a measurement is cleaned where it is used
        _require(path, all(isinstance(keys, dict) and all(isinstance(v, dict) for v in keys.values())
                           for keys in table.get(name, {}).values()), f"'{name}' must be kernel -> key -> object")
    _require(path, all(isinstance(p, dict) for p in table.get("provenance", {}).values()),
             "each provenance must be an object")
    _require(path, all(isinstance(keys, dict) and all(isinstance(who, dict) for who in keys.values())
                       for keys in table.get("added", {}).values()), "'added' must be kernel -> key -> object")
    return "table", table, notes


def _require(path: str, condition: bool, what: str) -> None:
    if not condition:
        raise FileFormatError(f"{path}: {what}")
