"""One rule for the files and directories the guard creates or reads where others may write
(evidence and journal directories, table directories and their lock, the node Store's directory,
the report's inputs): never follow a symlink planted at a name, check what was opened (``fstat``)
for its kind and owner, and say who else can write a directory or owns a file.

Standard library only; nothing here warns: callers say what they find once, in their own words.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import time

from .errors import UnsafePathError

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def try_writing_in(directory: str) -> None:
    """Raise ``OSError`` where this process cannot create a file in ``directory``: tried, because
    ``os.access`` says yes to root even where the filesystem refuses (read-only, /proc)."""
    fd, probe = tempfile.mkstemp(prefix=".autotune_guard-probe-", dir=directory)
    os.close(fd)
    os.unlink(probe)


def user_name(uid: int) -> str:
    """``name (uid)`` where the system knows the name, else ``uid N``."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def foreign_owner(info: os.stat_result) -> str | None:
    """Who owns what ``info`` describes when it is not this user (``user_name``); None when it is."""
    return None if info.st_uid == os.geteuid() else user_name(info.st_uid)


def others_can_write(directory: str) -> str | None:
    """``"every user"``, ``"group N"`` or None: who besides its owner can write ``directory``."""
    try:
        info = os.stat(directory)
    except OSError:
        return None
    if info.st_mode & stat.S_IWOTH:
        return "every user"
    if info.st_mode & stat.S_IWGRP:
        return f"group {info.st_gid}"
    return None


def describe_directory(directory: str) -> str:
    """``mode drwxrwxrwt, owner alice (uid 1000)`` for a message, or '' when it cannot be read."""
    try:
        info = os.stat(directory)
    except OSError:
        return ""
    return f"mode {stat.filemode(info.st_mode)}, owner {user_name(info.st_uid)}"


def kind_of(mode: int) -> str:
    return ("a symlink" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a regular file" if stat.S_ISREG(mode) else "not a regular file")


def open_regular(path: str, flags: int, mode: int = 0o666) -> tuple[int, os.stat_result]:
    """``os.open`` that never follows a symlink at ``path`` and accepts a regular file only;
    returns the descriptor and its ``fstat``. Raises ``UnsafePathError`` naming what is there."""
    try:
        fd = os.open(path, flags | NOFOLLOW | CLOEXEC | getattr(os, "O_NONBLOCK", 0), mode)
    except OSError as exc:  # ELOOP; EACCES where the kernel protects symlinks in sticky directories
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise UnsafePathError(errno.ELOOP, "is a symlink: not followed", path) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafePathError(errno.EEXIST, f"is {kind_of(info.st_mode)}, not a regular file", path)
    return fd, info


def lock_within(fd: int, seconds: float, poll_s: float = 0.05) -> int | None:
    """Take an exclusive POSIX record lock on ``fd`` within ``seconds``: None once taken, else
    the pid holding it where the OS tells (0 where it does not). Never waits longer."""
    if fcntl is None:
        return None
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return None
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
        if time.monotonic() >= deadline:
            return lock_holder(fd)
        time.sleep(poll_s)


def lock_holder(fd: int) -> int:
    """The pid holding a conflicting POSIX lock on ``fd`` (``F_GETLK``; Linux's ``struct flock``),
    0 where the OS does not tell."""
    try:
        import struct

        query = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
        kind, _, _, _, pid = struct.unpack("hhqqi4x", answer)
        return pid if kind != fcntl.F_UNLCK and pid > 0 else 0
    except (OSError, ValueError, AttributeError, struct.error):
        return 0


def private_directory(path: str) -> str:
    """``path`` as a directory only this user can use: made with mode 0700 where missing, then
    checked (not a symlink, owned by this user, mode 0700). Raises ``UnsafePathError`` naming
    what is wrong; never changes a directory it did not make."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(errno.EEXIST, f"is {kind_of(info.st_mode)}, not a directory of this user", path)
    owner = foreign_owner(info)
    if owner is not None:
        raise UnsafePathError(errno.EPERM, f"is a directory of {owner}, not of this user ({user_name(os.geteuid())})",
                              path)
    if stat.S_IMODE(info.st_mode) != 0o700:
        raise UnsafePathError(errno.EPERM, f"has mode {stat.filemode(info.st_mode)}: others can reach what is in it "
                              "(allowed: a directory of this user with mode 0700)", path)
    return path


def node_files_directory() -> str:
    """This user's directory of node-local files (consensus's node Stores, table-store snapshots):
    under ``$XDG_RUNTIME_DIR`` where it is usable, else ``<tmp>/autotune_guard-<uid>``. The caller
    checks it with ``private_directory``."""
    runtime = runtime_directory()
    if runtime is not None:
        return os.path.join(runtime, "autotune_guard")
    return os.path.join(tempfile.gettempdir(), f"autotune_guard-{os.geteuid()}")


def runtime_directory() -> str | None:
    """``$XDG_RUNTIME_DIR`` when it is set, a directory of this user and no one else's to write."""
    path = os.environ.get("XDG_RUNTIME_DIR", "")
    if not path or not os.path.isabs(path):
        return None
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return path
