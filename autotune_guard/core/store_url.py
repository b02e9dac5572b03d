"""Table stores named by URL in ``AUTOTUNE_TABLE_PATH`` (``redis://[user:password@]host:port/db
[?prefix=...]``, ``rediss://`` for TLS): telling them from paths, splitting a path list that holds
them (their ``:`` is also the list separator), and checking one, without any client library.

The password never appears in what is said: ``StoreAddress.shown`` hides it."""

from __future__ import annotations

import os
import re
from typing import NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

from .errors import PolicyError

SCHEMES = ("redis", "rediss")
_PREFIX = re.compile(r"[A-Za-z0-9._:/@+-]{0,100}")
DEFAULT_PREFIX = "autotune_guard:"
# An arch as a store's key names it: it becomes a file name (``report store-export``, ``show``),
# so nothing that could name another folder (``/``, ``..``, a leading ``.``) or hide in a terminal.
_ARCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
ARCH_ALLOWED = "1 to 100 letters, digits and . _ + -, starting with a letter or digit"


def safe_arch(arch) -> bool:
    """Whether ``arch`` (read from a store's key name, or a table file) may name a file."""
    return isinstance(arch, str) and _ARCH.fullmatch(arch) is not None


def is_store_url(entry) -> bool:
    return isinstance(entry, str) and entry.split("://", 1)[0].lower() in SCHEMES and "://" in entry


def store_urls(table_path) -> list[str]:
    return [entry for entry in table_path if is_store_url(entry)]


def split_table_path(value: str, sep: str = os.pathsep) -> list[str]:
    """The entries of an AUTOTUNE_TABLE_PATH text. With ``:`` as the separator a URL's own colons
    (``host:port``, ``user:password``) are joined back: a URL runs on until an entry that starts a
    path (``/``, ``.``, ``~``) or another URL; a piece that starts like a path but holds the ``@`` the
    URL still lacks is its password's tail (a password may hold ``:/``)."""
    pieces = value.split(sep)
    entries: list[str] = []
    in_url = False
    for index, piece in enumerate(pieces):
        starts_url = piece.lower() in SCHEMES or is_store_url(piece)
        starts_path = piece.startswith(("/", ".", "~")) and not piece.startswith("//")
        if in_url and starts_path and "@" not in entries[-1].partition("//")[2] and _at_ahead(pieces[index:]):
            starts_path = False  # a password holding ':/' (user:pa:/ss@host): its tail, never a path of its own
        if in_url and not starts_url and not starts_path:
            entries[-1] += sep + piece
            continue
        entries.append(piece)
        in_url = starts_url
    return [entry for entry in entries if entry]


def _at_ahead(pieces: list[str]) -> bool:
    """Whether an ``@`` comes in ``pieces`` before the next URL starts (the userinfo runs on to it)."""
    for piece in pieces:
        if "@" in piece:
            return True
        if piece.lower() in SCHEMES or is_store_url(piece):
            return False
    return False


class StoreAddress(NamedTuple):
    scheme: str
    host: str
    port: int
    db: int
    username: str | None
    password: str | None
    prefix: str
    shown: str  # the URL as it may be said: the password replaced by ***

    @property
    def tls(self) -> bool:
        return self.scheme == "rediss"


def parse_store_url(var: str, url: str) -> StoreAddress:
    """The parts of a store URL; PolicyError naming the variable, the URL (password hidden) and
    what is allowed for anything else."""
    parts = urlsplit(url)
    shown = hide_password(url)
    allowed = ("allowed: redis://[user:password@]host:port/db[?prefix=...] (rediss:// for TLS); db a number "
               "(default 0), prefix up to 100 letters, digits and . _ : / @ + -")

    def refuse(what: str):
        return PolicyError(f"{var}={shown!r}: {what}; {allowed}")

    if "@" in url.partition("://")[2][len(parts.netloc):] and not _well_formed(url):
        # the URL's parts past its authority hold part of the password: none of them is echoed
        raise refuse("it is not well formed: a password's / ? # and @ must be percent-encoded (%2F %3F %23 %40)")
    try:
        port = parts.port or 6379
    except ValueError:
        raise refuse("the port is not a number from 1 to 65535") from None
    if not parts.hostname:
        raise refuse("no host")
    path = parts.path.strip("/") or "0"
    if not path.isdigit():
        raise refuse(f"the database {path!r} is not a number")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"prefix"})
    if unknown or parts.fragment:
        raise refuse(f"unknown part {', '.join(unknown) or '#' + parts.fragment!r}")
    prefix = query.get("prefix", [DEFAULT_PREFIX])[-1]
    if not _PREFIX.fullmatch(prefix):
        raise refuse(f"prefix {prefix!r} is not allowed")
    return StoreAddress(parts.scheme.lower(), parts.hostname, port, int(path),
                        unquote(parts.username) if parts.username else None,
                        unquote(parts.password) if parts.password is not None else None, prefix, shown)


def hide_password(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``. In a URL that is not well formed (a
    password holding an unencoded ``/``, ``?`` or ``#`` ends the authority early for ``urlsplit``)
    everything up to the URL's last ``@`` is taken as the user and password: a host may be hidden
    with the password then, the password is never shown."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    authority, cut, tail = (re.split(r"([/?#])", rest, maxsplit=1) + ["", ""])[:3]
    well_formed = _well_formed(url)
    if "@" not in authority and well_formed:
        return url  # the @ is in a prefix: no user, no password
    if "@" in authority and well_formed:
        userinfo, _, hostport = authority.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        return f"{head}://{user}{':***' if colon else ''}@{hostport}{cut}{tail}"
    userinfo, _, after = rest.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    return f"{head}://{user}:***@{after}" if colon else f"{head}://***@{after}"


def _well_formed(url: str) -> bool:
    """Whether ``url`` parses as the allowed grammar (port a number, db a number, only a prefix query)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises for a port that is not a number)
    except ValueError:
        return False
    query = parse_qs(parts.query, keep_blank_values=True)
    return bool(parts.hostname) and (parts.path.strip("/") or "0").isdigit() and set(query) <= {"prefix"} \
        and not parts.fragment
