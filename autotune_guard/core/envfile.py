"""The optional dotenv file (``AUTOTUNE_ENV_FILE``): its ``AUTOTUNE_*`` keys, checked more strictly
than python-dotenv checks them. python-dotenv is imported only when a file is read."""

from __future__ import annotations

import io
import os
import re
import stat
from typing import Mapping

from .errors import PolicyError
from .safe_files import user_name

_REFERENCE = re.compile(r"\$\{(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}")  # python-dotenv's own syntax


def read_env_file(path: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``AUTOTUNE_*`` keys of a dotenv file (python-dotenv is imported only here).

    A line python-dotenv cannot parse, and an ``AUTOTUNE_*`` value that refers to an unset
    variable (``${RUN_DIR}/rec`` would quietly become ``/rec``), are errors naming the file and
    the line: python-dotenv itself would skip the one and expand the other to nothing.
    """
    environ = os.environ if environ is None else environ
    text = _read_regular_file(path)
    try:
        from dotenv import dotenv_values
        from dotenv.parser import parse_stream
    except Exception as exc:  # python-dotenv missing or broken: as loud as any bad setting
        raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r} needs python-dotenv, which cannot be imported ({exc}); "
                          "reinstall autotune-guard's dependencies") from exc
    try:
        bindings = list(parse_stream(io.StringIO(text)))
        values = dotenv_values(stream=io.StringIO(text))
    except Exception as exc:
        raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r} cannot be read: {exc}") from exc
    defined = set()
    for binding in bindings:
        if binding.error:
            text = binding.original.string.strip()
            raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r}: line {binding.original.line} cannot be parsed "
                              f"({text[:80]!r}); allowed: NAME=VALUE lines, # comments, blank lines")
        if binding.key and binding.key.startswith("AUTOTUNE_") and binding.value:
            for ref in _REFERENCE.finditer(binding.value):
                name = ref.group("name")
                if ref.group("default") is None and not environ.get(name) and name not in defined:
                    raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r}: line {binding.original.line}: {binding.key} "
                                      f"refers to ${{{name}}}, which is not set (it would expand to nothing)")
        if binding.key:
            defined.add(binding.key)
    return {k: v for k, v in values.items() if k.startswith("AUTOTUNE_") and v is not None}


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _read_regular_file(path: str) -> str:
    """The text of the file at ``path``, opened without blocking (a FIFO is refused, never waited
    on) and checked to be a regular file on the descriptor read, so that nothing swapped in between counts."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r}: no such file; it names a dotenv file of AUTOTUNE_* "
                          "lines (a relative path is taken from the working directory)") from None
    except OSError as exc:
        kind = _kind(path)
        raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r} cannot be opened"
                          f"{f' (it is {kind})' if kind else ''}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        mode = info.st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r} is {kind}, not a file; it names a regular dotenv file "
                              "of AUTOTUNE_* lines")
        _refuse_if_others_write(path, info)
        with os.fdopen(os.dup(fd), "rb") as src:
            data = src.read()
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r} cannot be read: it is not UTF-8 text ({exc})") from None


def _refuse_if_others_write(path: str, info: os.stat_result) -> None:
    """A file of another user (root included) that a group or every user can write is refused, on
    the descriptor read: anyone of them could set what this process runs (a file planted or changed in
    /tmp). The running user's own file is theirs to keep as they like."""
    if info.st_uid == os.geteuid() or not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return
    who = "every user" if info.st_mode & stat.S_IWOTH else f"group {info.st_gid}"
    raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r} is a file of {user_name(info.st_uid)} that {who} can write "
                      f"(mode {stat.filemode(info.st_mode)}): any of them could set what this process runs, so it "
                      "is refused; use a copy of your own (cp it, then chmod 600), or ask its owner to chmod go-w it")


def owner_note(path: str) -> str | None:
    """The line naming the owner of an env file that is another user's (not root's), said at start:
    its settings are applied as they are (one it does not let others write is not refused)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if info.st_uid in (os.geteuid(), 0):
        return None
    return (f"AUTOTUNE_ENV_FILE={path!r} is a file of {user_name(info.st_uid)}, not yours: its settings are applied "
            "as that user wrote them")


def _kind(path: str) -> str | None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return next((name for test, name in _KINDS if test(mode)), None)
