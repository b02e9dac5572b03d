"""JSON files on disk: bounded, non-blocking reading and atomic writing.

Reads never hang on a FIFO, never take more than ``MAX_FILE_BYTES`` and refuse deep nesting and
huge integers; every error names the file. Writes go to a temporary file in the same directory and
are renamed over the target, so a reader (or a process killed mid-write) never sees half a file;
they never write ``Infinity`` or ``NaN`` (null instead).

Over 350 lines: the bounded reader and the atomic writer share their checks of one file descriptor.
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import stat
import tempfile
import zlib
from typing import Mapping

from .errors import FileFormatError
from .safe_files import user_name


# Read at the first write and kept, as before; a memo of a pure read rather than a module-level name
# the core would have to rebind (the core sits below the Guard and cannot hang state on it).
@functools.lru_cache(maxsize=1)
def _new_file_mode() -> int:
    """What ``open(path, "w")`` would give (0o666 less the umask): mkstemp makes files 0o600,
    which would hide a record or table from the colleague who merges or pins with it."""
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
    return 0o666 & ~umask



class NotOurs(OSError):
    """The target name is taken by something this process must not replace: a symlink, a
    directory, a FIFO or a file of another user (pre-created in a shared directory)."""


def remove_quietly(path: str) -> None:
    """Remove a temporary file of ours that a failed write left; gone already is fine."""
    try:
        os.unlink(path)
    except OSError:
        pass


def finite(value):
    """``value`` with each float that is not finite (Triton's time for a candidate that failed)
    as null: strict JSON parsers refuse ``Infinity``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(document, compact: bool = False) -> str:
    """Strict JSON text (never ``Infinity``/``NaN``), the way every file of ours is written;
    ``compact``: no indentation (Python's encoder is about 8x slower indented)."""
    layout = {"separators": (",", ":")} if compact else {"indent": 1}
    try:
        return json.dumps(document, sort_keys=True, allow_nan=False, **layout) + "\n"
    except ValueError:  # a non-finite float somewhere: rare, so the common case pays nothing
        return json.dumps(finite(document), sort_keys=True, allow_nan=False, **layout) + "\n"


def _check_target(path: str) -> None:
    """Raise ``NotOurs`` when ``path`` exists and is not a regular file of this user."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        kind = "a symlink" if stat.S_ISLNK(info.st_mode) else "a directory" if stat.S_ISDIR(info.st_mode) \
            else "a FIFO" if stat.S_ISFIFO(info.st_mode) else "not a regular file"
        raise NotOurs(errno.EEXIST, f"is {kind}, not a file written here", path)
    if info.st_uid != os.geteuid():
        raise NotOurs(errno.EEXIST, f"is a file of user {info.st_uid}, not of this user ({os.geteuid()})", path)


def atomic_write_json(path: str, document: Mapping, *, own_only: bool = False, compact: bool = False) -> int:
    """Write ``document`` to ``path`` in one rename.  The temporary file is created in the same
    directory under a random name with ``O_EXCL|O_NOFOLLOW`` (mkstemp), written and given the
    mode ``open()`` would give through its descriptor, so that nothing another user swaps in at
    either name is ever followed.  ``own_only``: raise ``NotOurs`` rather than replace a symlink,
    directory, FIFO or another user's file at ``path``.  An ``OSError`` names ``path``.  Returns
    the number of characters written. ``compact``: as ``dumps`` says."""
    text = dumps(document, compact)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        if own_only:
            _check_target(path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(path) + ".", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as out:  # (os.open's descriptors are O_CLOEXEC)
            os.fchmod(out.fileno(), _new_file_mode())
            out.write(text)
            out.flush()
            written = os.fstat(out.fileno())
        now = os.lstat(tmp)
        if (now.st_dev, now.st_ino) != (written.st_dev, written.st_ino):
            raise OSError(errno.EEXIST, f"its temporary file {tmp} was replaced by another user during the write")
        os.replace(tmp, path)
        tmp = None
        return len(text)
    except NotOurs:
        raise
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), path) from None  # named: not the temporary's name
    finally:
        if tmp is not None:
            remove_quietly(tmp)


def _create_exclusive(path: str, *, own_only: bool) -> tuple[int, str]:
    """A new empty file at ``path``, made under a random temporary name (``O_EXCL|O_NOFOLLOW``:
    mkstemp) and renamed over it; returns its descriptor (opened for appending) and ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    if own_only:
        _check_target(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(path) + ".", dir=directory)
    try:
        os.fchmod(fd, _new_file_mode())
        os.set_inheritable(fd, False)
        os.replace(tmp, path)
    except BaseException:
        os.close(fd)
        remove_quietly(tmp)
        raise
    return fd, path


JOURNAL_SUFFIX = "l.gz"  # <file>.json -> <file>.jsonl.gz


class Journal:
    """An append-only journal next to a JSON file: one JSON value a line, gzip-compressed, each
    batch sync-flushed (no fsync), so that a process killed at any moment leaves every batch
    it wrote before, readable by ``read_journal`` (or ``zcat``).  Created atomically like
    ``atomic_write_json``'s files; ``own_only`` as there."""

    def __init__(self, path: str, header: Mapping, *, own_only: bool = False):
        try:
            self.fd, self.path = _create_exclusive(path, own_only=own_only)
        except NotOurs:
            raise
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror or str(exc), path) from None
        self.identity = os.fstat(self.fd)
        self._compress = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip stream
        self.written = 0
        self.append([header])

    def append(self, values) -> int:
        """Add ``values``, one line each, in one write; returns the bytes written."""
        text = "".join(json.dumps(finite(v), sort_keys=True, allow_nan=False, separators=(",", ":")) + "\n"
                       for v in values)
        data = self._compress.compress(text.encode()) + self._compress.flush(zlib.Z_SYNC_FLUSH)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        self.written += len(data)
        return len(data)

    def close(self, *, remove: bool) -> None:
        """Close it; ``remove``: unlink its name too, if the name is still this journal's."""
        try:
            if remove:
                now = os.lstat(self.path)
                if (now.st_dev, now.st_ino) == (self.identity.st_dev, self.identity.st_ino):
                    os.unlink(self.path)
        except OSError:
            pass
        finally:
            try:
                os.close(self.fd)
            except OSError:
                pass


class ForeignOwner(FileFormatError):
    """A file read only when its owner is the one expected (a journal: its evidence file's)."""


def read_journal(path: str, owner: int | None = None) -> tuple[list, bool]:
    """The values of a journal (``Journal``), and whether its last line was cut off (a process
    killed mid-write: that line is left out).  Bounded like ``read_json``; never through a
    symlink; ``owner``: raise ``ForeignOwner`` unless the file opened is of that user."""
    data = _read_bounded(path, owner, os.O_NOFOLLOW)
    inflate = zlib.decompressobj(31)
    try:
        text = inflate.decompress(data, MAX_FILE_BYTES)
    except zlib.error as exc:
        raise FileFormatError(f"{path}: is not an autotune_guard journal (gzip: {exc})") from None
    if inflate.unconsumed_tail:
        raise FileFormatError(f"{path}: holds more than any autotune_guard file ({MAX_FILE_BYTES // 2**20} MiB)")
    lines = text.split(b"\n")
    torn = lines.pop() != b""
    values = []
    for number, line in enumerate(lines, 1):
        try:
            value = loads(line)
        except (ValueError, RecursionError):
            raise FileFormatError(f"{path}: line {number} is not valid JSON") from None
        check_depth_and_numbers(f"{path} line {number}", value)
        values.append(value)
    return values, torn


def temporary_name_extra(path: str) -> int:
    """How many bytes longer than ``path``'s name its temporary file's name is."""
    return len(".tmp-") + len(".") + 8  # mkstemp's random part: 8 characters


MAX_FILE_BYTES = 256 * 1024 * 1024  # far above any record, choices file or table
MAX_DEPTH = 16  # the deepest of our formats nests 7 levels (record -> kernels -> ... -> kwargs)
MAX_INT = 2 ** 63  # integers beyond int64 are no config, rank or count of ours

def _finite_or_null(text: str):
    value = float(text)
    return value if math.isfinite(value) else None


def loads(text):
    """``json.loads`` reading every number that is not finite (``NaN``, ``Infinity``, ``1e999``)
    as null, as the files are written: a non-finite time never wins a comparison anywhere."""
    return json.loads(text, parse_constant=lambda name: None, parse_float=_finite_or_null)


def read_json(path: str):
    """The JSON value in ``path``: a regular file, opened without blocking (a FIFO would hang a
    plain open), of bounded size, depth and integer width."""
    return parse_bytes(path, _read_bounded(path))


def parse_bytes(path: str, data: bytes):
    """The JSON value in ``data``, read from ``path`` (a file, or a store's URL and key: said in
    every error), with ``read_json``'s bounds on depth and integer width."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FileFormatError(f"{path}: is not UTF-8 text") from None
    if not text.strip():
        raise FileFormatError(f"{path}: is empty")
    try:
        document = loads(text)
    except json.JSONDecodeError as exc:
        raise FileFormatError(f"{path}: is not valid JSON, truncated or corrupt ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise FileFormatError(f"{path}: nests deeper than any autotune_guard file (limit {MAX_DEPTH})") from None
    except ValueError as exc:  # an integer of thousands of digits, among others
        raise FileFormatError(f"{path}: is not usable JSON ({str(exc)[:120]})") from None
    if not plainly_bounded(data):
        check_depth_and_numbers(path, document)
    return document


_DIGITS = bytes(48 if chr(c).isdigit() and c < 128 else 32 for c in range(256))  # each digit "0", the rest " "
_LONG_RUN = b"0" * len(str(MAX_INT - 1))  # 19 digits: shorter integers are all within int64
_NOT_SHAPE = bytes(c for c in range(256) if c not in b'"[]{}')


def plainly_bounded(data: bytes) -> bool:
    """Whether the raw JSON text ``data`` plainly holds no integer past int64 and no nesting past
    ``MAX_DEPTH``, found by a few passes of bytes methods: a record's walk of every value costs
    as much as a third of its parse.  False means "not plainly", and the walk decides."""
    digits = data.translate(_DIGITS)
    start = digits.find(_LONG_RUN)
    while start != -1:  # a run of 19+ digits is fine only as a fraction's digits
        if start == 0 or data[start - 1] != ord("."):
            return False
        end = digits.find(b" ", start)
        if end == -1:
            return False
        start = digits.find(_LONG_RUN, end)
    if b"\\" in data:  # an escaped quote would break the pairing of quotes below
        return False
    # Strings without brackets go as "" pairs; a string that held one leaves a quote that never
    # goes, so such text is never plain.  Each pass then takes off one or two levels.
    shape = data.translate(None, _NOT_SHAPE).replace(b'""', b"")
    for _ in range(MAX_DEPTH // 2):
        if not shape:
            return True
        shape = shape.replace(b"[]", b"").replace(b"{}", b"")
    return not shape


def _read_bounded(path: str, owner: int | None = None, flags: int = 0) -> bytes:
    """The bytes of ``path``: a regular file, opened without blocking, of bounded size (of user
    ``owner``, given)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | flags)
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
        if owner is not None and info.st_uid != owner:
            raise ForeignOwner(f"{path}: is a file of {user_name(info.st_uid)}, not of {user_name(owner)}")
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
    return data


def check_depth_and_numbers(path, document) -> None:
    """Refuse nesting past ``MAX_DEPTH`` and integers past int64 (a walk over containers only:
    a record of thousands of entries is checked in a fraction of its parse time)."""
    pending = [(document, 1)] if type(document) in (dict, list) else []
    if type(document) is int and not -MAX_INT <= document < MAX_INT:
        _huge(path, document)
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise FileFormatError(f"{path}: nests deeper than any autotune_guard file (limit {MAX_DEPTH})")
        for item in (value.values() if type(value) is dict else value):
            kind = type(item)
            if kind is dict or kind is list:
                pending.append((item, depth + 1))
            elif kind is int and not -MAX_INT <= item < MAX_INT:
                _huge(path, item)


def _huge(path, value) -> None:
    raise FileFormatError(f"{path}: holds an integer of {len(str(abs(value)))} digits; none of its fields "
                          "can be that large")
