"""Where this process's evidence files go: the prefix made absolute once, at start-up (a later
``os.chdir``, like Hydra's, must not split a run's files), names checked against the
filesystem's limits before any kernel runs, and a name another user holds (in a shared
directory) left alone for one with a random part, named once in a warning."""

from __future__ import annotations

import logging
import os
import re
import secrets
import socket

from ..core import jsonfile, safe_files
from ..core.errors import OutputPathError
from ..runtime import current

logger = logging.getLogger("autotune_guard")

_RANK_DIGITS = 7  # room for any rank at start-up, when the rank is not known yet
_FALLBACK_EXTRA = len("-") + 8  # the random part of a name written instead


class Names:
    """What the process knows of its files' names, held by the ``Guard`` (``_names()``)."""

    def __init__(self):
        self.absolute: dict[str, str] = {}  # a prefix as set -> its absolute form, fixed when it was set
        self.instead: dict[str, str] = {}  # a rank file's name another user holds -> the name written instead
        self.looked_at: set[str] = set()  # directories checked for other users' write access

    def after_fork(self) -> None:
        self.instead.clear()  # the child's names differ (its pid): none of them is known to be held


def _names() -> Names:
    return current().held("evidence.paths", Names)


def absolute(prefix: str) -> str:
    """``prefix`` as it was resolved when set (``check_writable``), else resolved now."""
    return _names().absolute.setdefault(prefix, os.path.abspath(prefix))


def process_tag() -> str:
    """What tells this process apart from any other of its rank: the host and the pid."""
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0]) or "host"
    return f"{host}-{os.getpid()}"


def rank_file(prefix: str, rank: int) -> str:
    """This process's file under ``prefix``: ``<prefix>.rank<N>.<host>-<pid>.json``."""
    return f"{absolute(prefix)}.rank{rank}.{process_tag()}.json"


def files_line(digest_path: str | None, record_path: str | None) -> str | None:
    """The start-up line naming the files this job writes and the command that reads them."""
    named = [f"{what} files {absolute(prefix)}.rank<N>.<host>-<pid>.json ({variable})"
             for what, prefix, variable in (("choices", digest_path, "AUTOTUNE_DIGEST_PATH"),
                                            ("record", record_path, "AUTOTUNE_RECORD_PATH")) if prefix]
    if not named:
        return None
    prefixes = " ".join(absolute(p) for p in (digest_path, record_path) if p)
    return f"writes {' and '.join(named)}, one a process; read them: python -m autotune_guard.report show {prefixes}"


def check_writable(prefix: str, variable: str) -> None:
    """Fix ``prefix``'s absolute form; refuse one whose directory cannot be created or written,
    or whose files' names would be too long there, before any kernel runs."""
    path = _names().absolute[prefix] = os.path.abspath(prefix)
    directory = os.path.dirname(path)
    if os.path.isdir(prefix):
        raise OutputPathError(f"{variable}={prefix!r} is a directory; it is a file prefix, like {os.path.join(prefix, 'rec')}",
                              variable=variable, value=prefix, path=prefix)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise OutputPathError(f"{variable}={prefix!r}: {directory} is not a directory", variable=variable, value=prefix,
                              path=directory)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise OutputPathError(f"{variable}={prefix!r}: directory {directory} cannot be created ({exc.strerror})",
                              variable=variable, value=prefix, path=directory) from None
    _check_name_length(prefix, variable, path)
    try:
        safe_files.try_writing_in(directory)
    except OSError as exc:
        raise OutputPathError(f"{variable}={prefix!r}: cannot write files in {directory} ({exc.strerror})",
                              variable=variable, value=prefix, path=directory) from None


def _longest_name(path: str) -> str:
    """The longest name a process may give a file under ``path`` (its temporary's aside)."""
    try:
        with open("/proc/sys/kernel/pid_max") as limit:
            pid_digits = len(limit.read().strip())
    except (OSError, ValueError):
        pid_digits = 10
    host = process_tag().rpartition("-")[0]
    return f"{os.path.basename(path)}.rank{'9' * _RANK_DIGITS}.{host}-{'9' * pid_digits}{'x' * _FALLBACK_EXTRA}.json"


def _check_name_length(prefix: str, variable: str, path: str) -> None:
    directory = os.path.dirname(path)
    try:
        name_max = os.pathconf(directory, "PC_NAME_MAX")
        path_max = os.pathconf(directory, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    longest = _longest_name(path)
    extra = jsonfile.temporary_name_extra(longest) + len(jsonfile.JOURNAL_SUFFIX)  # its journal's temporary
    size = len(os.fsencode(longest)) + extra
    if size > name_max:
        room = name_max - (size - len(os.fsencode(os.path.basename(path))))
        raise OutputPathError(
            f"{variable}={prefix!r}: its files' names, like {os.path.basename(rank_file(prefix, 0))} (up to "
            f"{size} bytes with the rank, pid and temporary name), are over the {name_max}-byte limit of names in "
            f"{directory}; shorten the prefix's last part {os.path.basename(path)!r} to at most {max(room, 0)} bytes",
            variable=variable, value=prefix, path=directory)
    if len(os.fsencode(os.path.join(directory, longest))) + extra > path_max:
        raise OutputPathError(f"{variable}={prefix!r}: its files' paths would be over the {path_max}-byte limit of "
                              f"paths in {directory}; use a shorter prefix", variable=variable, value=prefix, path=directory)


def write(path: str, document: dict) -> tuple[str, int]:
    """Write one evidence file (atomically, never following a name another user swapped in);
    returns the name written and its size.  Should ``path`` be held by something else (a
    symlink, directory, FIFO or another user's file), it is left alone and the file goes to a
    name with a random part, named once."""
    guard = current()
    _warn_if_shared(guard, os.path.dirname(path))
    instead = _names().instead
    target = instead.get(path, path)
    try:
        return target, jsonfile.atomic_write_json(target, document, own_only=True)
    except jsonfile.NotOurs as exc:
        if target != path:
            raise
        reason = exc.strerror
    other = instead[path] = f"{path[:-len('.json')]}-{secrets.token_hex(4)}.json"
    guard.warn_once(f"evidence-name:{path}", f"{path} {reason} (another user's, in a shared directory?); it is "
                    f"left alone and this process's evidence goes to {other} instead", scope="process")
    return other, jsonfile.atomic_write_json(other, document, own_only=True)


def _warn_if_shared(guard, directory: str) -> None:
    """Name once a directory other users can write (its group or everyone): they can put files
    at the names this process writes (which are then left alone, see ``write``)."""
    looked_at = _names().looked_at
    if directory in looked_at:
        return
    looked_at.add(directory)
    who = safe_files.others_can_write(directory)
    if who is None:
        return
    guard.warn_once(f"shared-directory:{directory}",
                    f"the evidence files go to {directory}, which {who} can write "
                    f"({safe_files.describe_directory(directory)}): another user can put files at their "
                    "names, which are then left alone for names of their own; prefer a directory only you can write",
                    scope="process", name="shared-directory")

