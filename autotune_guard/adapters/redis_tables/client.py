"""One table store's client (``AUTOTUNE_TABLE_PATH=redis://...``): the one module that imports the
``redis`` client (the optional extra ``redis``: ``pip install '.[redis]'``), only when a URL is given.

Layout, per URL prefix and arch (the ``{arch}`` hash tag keeps an arch's keys on one slot):
- ``<prefix>{<arch>}:kernel:<kernel>``: a hash per kernel, field the tuning key, value
  ``{"entry": <config>, "added": {"run_id", "rank", "host", "time", "triton"}}`` (JSON; with
  ``"retune"`` where report retune asked);
- ``<prefix>{<arch>}:measured:<kernel>``: a hash per kernel, field the tuning key, value what was
  measured to choose its entry, with the runs and replaced entries kept beside it (JSON,
  ``core.tables.MEASURED``): what pooling and a grown candidate list time against;
- ``<prefix>{<arch>}:superseded:<kernel>``: a hash per kernel, each older version of the kernel
  that consensus replaced whole (``core.table_writes.SUPERSEDED``), field its time;
- ``<prefix>{<arch>}:kernels``: a set, the kernels the arch holds (for the report);
- ``<prefix>{<arch>}:provenance``: a hash, field the kernel, value its provenance (JSON);
- ``<prefix>{<arch>}:entries``: the layout before issue 44's per-kernel reads, one hash for the
  arch (field ``["kernel", "key"]``): read whole where it is present, never written.

Reading: a job reads only the kernels it meets, each by a server-side script per piece of
``PIECE`` fields (HSCAN) with the same keys' measurements, a value over its bound (``MAX_*_BYTES``)
replaced by its length (never sent), so a hostile 100 MB value costs nothing and is named, and the
server is held one piece at a time. Each value is parsed as JSON (never unpickled or evaluated)
and checked by ``core.schema``; a bad one is named with the URL and key, and skipped.

Writing (``update_kernel``): a kernel's part is read under WATCH of its keys, the writer makes the
part it wants (``core.table_writes.grow_table``: the first writer wins unless a winner was chosen to
replace, nothing is lost), and what differs is written in one MULTI/EXEC whose script first checks
the kernel's provenance is as read; a writer that met another's write reads again (``TRIES``).
``add`` (HSETNX per entry, one script) is the add before issue 57; ``upgrade.upgrade`` moves the older
layout (``keep_older`` renames it).

Bounds: a kernel's hash of more than ``MAX_KERNEL_FIELDS`` fields is not read (one HLEN says so:
a hash stuffed with junk costs a job nothing but a line naming it; the rest of the store is used),
an arch's older hash or kernel set of more than ``MAX_FIELDS``; at most ``NOTES_PER_KEY`` unusable
fields of one hash are named one by one.

Over 350 lines: the one module that talks to Redis: reads, writes and the calls of their scripts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time

from ...core import store_values
from ...core.errors import PolicyError
from ...core.model import compact
from ...core.store_values import (MAX_MEASURED_BYTES, MAX_SUPERSEDED_BYTES, MAX_VALUE_BYTES, loads_or_none, pairs,
                                   said)
from .errors import (LIST_GRANTS, READ_GRANTS, WRITE_GRANTS, StoreBusy, StoreDown, StoreNoPermission,
                     StoreRefused, StoreTooBig, tls_hint)
from .parts import Part, Writes, imported, kernels_of, two_ways, two_ways_note, writes
from .scripts import _ADD, _KEEP_OLDER, _READ, _WRITE
from ...core.store_url import ARCH_ALLOWED, parse_store_url, safe_arch

logger = logging.getLogger("autotune_guard")

MAX_FIELDS = 200_000  # entries of one arch: far above any real table
MAX_KERNEL_FIELDS = 20_000  # keys of one kernel: far above any real kernel's; a hash over it is not read
NOTES_PER_KEY = 20  # unusable fields of one hash named one by one; the rest are counted in one line
TIMEOUT_S = 5.0  # connect and per-request: a store that is slower is as good as down

PIECE = 1000  # fields a read request asks for (HSCAN's COUNT): the server is held for one piece at a time
TRIES = 30  # a kernel's write that meets another writer's reads again, at most this often


def _client_module():
    try:
        import redis
    except ImportError:
        raise PolicyError("AUTOTUNE_TABLE_PATH names a Redis URL, and the redis client is not installed: "
                          "pip install redis (from a checkout: pip install '.[redis]'), or name table "
                          "directories instead") from None
    return redis


class Store:
    """One URL's client and keys; every request raises StoreDown or returns."""

    READ_GRANTS, WRITE_GRANTS, LIST_GRANTS = READ_GRANTS, WRITE_GRANTS, LIST_GRANTS  # for the report

    def __init__(self, url: str):
        self.url = url
        self.address = parse_store_url("AUTOTUNE_TABLE_PATH", url)
        self.shown = self.address.shown
        redis = _client_module()
        a = self.address
        self._errors = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                        redis.exceptions.AuthenticationError, OSError)
        self._refusals = (redis.exceptions.ResponseError,)  # NOAUTH and WRONGPASS are AuthenticationErrors
        self._no_permission = redis.exceptions.NoPermissionError  # a ResponseError; NOPERM, its prefix cut
        self._watch_error = redis.exceptions.WatchError  # a watched key changed: the transaction was not made
        # No retries (redis-py 6+ retries 3 to 10 times with backoff by default): TIMEOUT_S bounds a
        # request, as with redis-py 4 and 5; a socket the server closed is still reconnected by the pool.
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.client = redis.Redis(host=a.host, port=a.port, db=a.db, username=a.username, password=a.password,
                                  ssl=a.tls, ssl_check_hostname=a.tls,  # redis-py 4 and 5 default to False
                                  socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S,
                                  retry=Retry(NoBackoff(), 0), decode_responses=False)

    def key(self, arch: str, part: str) -> str:
        """The store's key for ``arch``'s ``part``: ``kernel:<kernel>``, ``kernels``, ``provenance``, ``entries``."""
        return f"{self.address.prefix}{{{arch}}}:{part}"

    def call(self, what: str, *args):
        with self._answering():
            return getattr(self.client, what)(*args)

    @contextlib.contextmanager
    def _answering(self):
        """The client's errors as ours: StoreDown, StoreRefused, StoreNoPermission."""
        try:
            yield
        except self._errors as exc:
            raise StoreDown(f"{type(exc).__name__}: {exc}{tls_hint(exc, self.address.tls)}") from None
        except self._refusals as exc:
            # Redis 7.0 refuses a command inside a script with a plain error, not NOPERM.
            words = str(exc)
            if isinstance(exc, self._no_permission) or "can't run this command" in words or "NOPERM" in words:
                raise StoreNoPermission(f"NOPERM: {exc}") from None
            raise StoreRefused(f"{type(exc).__name__}: {exc}") from None

    def ping(self) -> None:
        """Whether the server answers. Any answer counts, a refusal too: an ACL user refused PING
        itself is up; its reads and writes are judged when made, each refusal named with its grant."""
        try:
            self.call("ping")
        except StoreRefused:
            pass

    def failed(self, exc, grants: str) -> str:
        """What a request that raised ``exc`` met, in words: the server's refusal of this user and
        what to grant, a key too big to read, another error the server answered, else the store
        having stopped answering."""
        if isinstance(exc, StoreNoPermission):
            return self.grant(exc, grants)
        if isinstance(exc, StoreTooBig):
            return str(exc)
        if isinstance(exc, StoreRefused):  # it answered: with an error, not silence
            return f"the table store refused the request ({exc})"
        return f"the table store stopped answering ({exc})"

    def grant(self, exc, grants: str) -> str:
        """What the server said to this URL's user, and the ACL line that would let it do ``grants``."""
        user = self.address.username or "default"
        return (f"the server refused user {user!r} ({exc}); grant it {grants} on the keys {self.address.prefix}* "
                f"(ACL SETUSER {user} {grants} ~{self.address.prefix}*), or name a user who has them")

    def archs(self) -> tuple[list[str], list[str]]:
        """(the archs the store holds tables for, one note per key whose arch is not a safe name:
        an arch names a file where the report writes a table). A scan: for the report, never a job."""
        found, notes = set(), []
        for suffix in ("}:kernels", "}:entries"):
            cursor = 0
            while True:
                cursor, names = self.call("scan", cursor, f"{self.address.prefix}{{*{suffix}", 1000)
                for name in names:
                    arch = name.decode("utf-8", "replace")[len(self.address.prefix) + 1:-len(suffix)]
                    if safe_arch(arch):
                        found.add(arch)
                    elif len(notes) < 100:
                        notes.append(f"skipping table store {self.shown} key {said(name)}: its arch {said(arch.encode())} "
                                     f"is not a plain name ({ARCH_ALLOWED}); it is not read, and names no file")
                if not cursor:
                    break
        return sorted(found), notes

    def kernels(self, arch: str) -> list[str]:
        """The kernels the arch's set names (the report's whole read), in pieces (SSCAN)."""
        found, cursor, key = set(), 0, self.key(arch, "kernels")
        while True:
            cursor, names = self.call("sscan", key, cursor, None, PIECE)
            found.update(name.decode("utf-8", "replace") for name in names)
            if len(found) > MAX_FIELDS:
                raise StoreTooBig(f"key {key} names more than {MAX_FIELDS} kernels, more than any table: not read")
            if not cursor:
                return sorted(found)

    def read(self, arch: str) -> tuple[dict, list[str]]:
        """(the arch's whole table document, one line per value that could not be used): the older
        hash where there is one, then each kernel the set names that has entries (asked in pipelines
        of ``PIECE`` names; names without entries are counted in one line), with its superseded
        versions. For the report; a job reads its kernels."""
        document, notes = store_values.new_document(arch, self.shown), []
        older = self.read_older(arch, notes) if self.call("exists", self.key(arch, "entries")) else None
        if older is not None:
            store_values.merge(document, older)
        names = self.kernels(arch)
        held = self._with_entries(arch, names)
        if len(held) < len(names):
            notes.append(f"table store {self.shown} key {self.key(arch, 'kernels')}: {len(names) - len(held)} of its "
                         f"{len(names)} kernel names have no entries there (no kernel or superseded hash): not shown")
        for kernel in held:
            try:
                part = self.read_part(arch, kernel, notes, superseded=True).document
            except StoreTooBig as exc:
                notes.append(f"skipping table store {self.shown}: {exc}")
                continue
            found = two_ways(older, part, kernel) if older is not None else []
            if found:
                notes.append(two_ways_note(self.shown, self.key(arch, f"kernel:{kernel}"), kernel, found,
                                           "the report shows"))
            store_values.merge(document, part)
        return document, notes

    def _with_entries(self, arch: str, names: list[str]) -> list[str]:
        """The kernels of ``names`` whose hash or superseded versions exist, asked ``PIECE`` at a time
        in one pipeline each (a set of 100,000 names without entries is 100 round trips, not 100,000)."""
        found = []
        for start in range(0, len(names), PIECE):
            chunk = names[start:start + PIECE]
            with self._answering():
                pipe = self.client.pipeline(transaction=False)
                for kernel in chunk:
                    pipe.exists(self.key(arch, f"kernel:{kernel}"), self.key(arch, f"superseded:{kernel}"))
                found += [kernel for kernel, count in zip(chunk, pipe.execute()) if count]
        return found

    def read_kernel(self, arch: str, kernel: str, notes: list) -> tuple[dict, bool]:
        """(a table document of ``kernel``'s entries, their measurements and the kernel's
        provenance, whether the arch's older hash exists): ``read_part``."""
        part = self.read_part(arch, kernel, notes)
        return part.document, part.older

    def read_part(self, arch: str, kernel: str, notes: list, superseded: bool = False) -> Part:
        """``kernel``'s part of the arch's table, read in pieces of ``PIECE`` fields, each parsed as
        it comes; what could not be used is a line in ``notes``. The provenance comes with the last
        piece: an entry seen has its provenance set (every writer sets both at once). ``superseded``:
        with the kernel's superseded versions (a writer's and the report's read, not a job's)."""
        document = store_values.new_document(arch, self.shown)
        hash_key, provenance_key = self.key(arch, f"kernel:{kernel}"), self.key(arch, "provenance")
        measured_key = self.key(arch, f"measured:{kernel}")
        reply, before = None, len(notes)
        tails = (provenance_key, self.key(arch, "entries"))
        for reply in self._pieces(hash_key, kernel, tails, measured_key, cap=MAX_KERNEL_FIELDS):
            store_values.absorb_kernel(document, kernel, (f"table store {self.shown} key {hash_key}", reply[1]), notes,
                                       (f"table store {self.shown} key {measured_key}", reply[4]))
        if len(notes) - before > NOTES_PER_KEY:  # a hash of junk is not a line per field
            more = len(notes) - before - NOTES_PER_KEY
            del notes[before + NOTES_PER_KEY:]
            notes.append(f"skipping table store {self.shown} key {hash_key}: {more} more fields could not be used "
                         "either (not named one by one)")
        length = reply[5] if len(reply) > 5 and reply[5] > MAX_KERNEL_FIELDS else 0
        if length:
            notes.append(self.stuffed(hash_key, kernel, length))
        if reply[2] is not None:
            store_values.absorb_provenance(document, (f"table store {self.shown} key {provenance_key}",
                                                      [kernel.encode(), reply[2]]), notes)
        fields = {}
        if superseded:
            key = self.key(arch, f"superseded:{kernel}")
            for piece in self._pieces(key, limit=MAX_SUPERSEDED_BYTES):
                fields.update(store_values.absorb_superseded(document, (f"table store {self.shown} key {key}",
                                                                        piece[1]), notes))
        return Part(document, bool(reply[3]), reply[2], fields, length)

    def stuffed(self, hash_key: str, kernel: str, length: int) -> str:
        """The line naming a kernel's hash too big to read."""
        return (f"skipping table store {self.shown} key {hash_key}: it holds {length} fields, more than any kernel's "
                f"table ({MAX_KERNEL_FIELDS}, redis_tables.MAX_KERNEL_FIELDS): not read, and nothing is added to it; "
                f"kernel {kernel}'s keys are chosen by the local rules (other tables, AUTOTUNE_ON_MISS, or consensus "
                "tuning), the rest of the store is used (remove the fields that are not tuning keys: HSCAN, HDEL)")

    def read_older(self, arch: str, notes: list, entries_key: str | None = None) -> dict:
        """The arch's table as the layout before per-kernel keys holds it: its one ``entries`` hash
        (or ``entries_key``) read whole, in pieces, then the provenance hash."""
        document = store_values.new_document(arch, self.shown)
        parts = (("entries", entries_key or self.key(arch, "entries")), ("provenance", self.key(arch, "provenance")))
        for part, key in parts:
            where = f"table store {self.shown} key {key}"
            for reply in self._pieces(key):
                absorb = store_values.absorb_pairs if part == "entries" else store_values.absorb_provenance
                absorb(document, (where, reply[1]), notes)
        return document

    def _pieces(self, key: str, kernel: str = "", tail_keys: tuple | None = None, beside: str | None = None,
                limit: int = MAX_VALUE_BYTES, cap: int | None = None):
        """The replies of the read script over ``key``'s hash, one request each, until the scan is done;
        with ``kernel``, its provenance and whether the older hash exists (``tail_keys``) in the last;
        with ``beside``, each field's value in that hash too (a kernel's measurements); with ``cap``, a
        hash of more fields is not scanned (one reply: no fields, its length sixth)."""
        cursor, fields, bound = b"0", 0, 2 * cap if cap else MAX_FIELDS
        while True:
            reply = self.call("eval", _READ, 4, key, *(tail_keys or (key, key)), beside or key, cursor, limit,
                              PIECE, kernel, MAX_MEASURED_BYTES if beside else "", cap or "")
            fields += len(reply[1]) // 2
            if fields > bound:  # HSCAN may repeat a field while the hash grows: a bound, not a count
                raise StoreTooBig(f"key {key} grew past {bound} fields while it was read, more than any table: "
                                  "not read")
            yield reply
            if reply[0] == b"0":
                return
            cursor = reply[0]

    def update_kernel(self, arch: str, kernel: str, change, superseded: bool = True):
        """``change(part) -> (the table document to hold, or None; result)`` made to ``kernel``'s
        part (``parts.Part``) atomically against every other writer, and ``result`` returned: the
        part is read after WATCH of the kernel's keys, and what differs (``parts.writes``) is written
        in one MULTI/EXEC whose script first checks the provenance is as read. A writer that met
        another's write reads again, at most ``TRIES`` times (then StoreBusy). ``superseded``: the part
        read with the kernel's superseded versions (a writer that only adds some need not read them)."""
        keys = [self.key(arch, f"{part}:{kernel}") for part in ("kernel", "measured", "superseded")]
        keys += [self.key(arch, "provenance"), self.key(arch, "kernels")]
        with self._answering():
            pipe = self.client.pipeline(transaction=True)
            try:
                for attempt in range(TRIES):
                    pipe.watch(*keys[:3])
                    part = self.read_part(arch, kernel, [], superseded=superseded)
                    if part.length:  # its keys unknown: what first writer wins keeps cannot be told
                        raise StoreTooBig(self.stuffed(keys[0], kernel, part.length).removeprefix("skipping "))
                    after, result = change(part)
                    todo = writes(part, after, kernel) if after is not None else None
                    if not todo:
                        return result
                    if self._write(pipe, keys, kernel, part, todo):
                        return result
                    time.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 7)))  # apart from the other writer
            finally:
                pipe.reset()  # UNWATCH where it still watches
        raise StoreBusy(f"{self.shown}: kernel {kernel}'s part of arch {arch} changed under each of {TRIES} writes "
                        "(other writers at once)")

    def _write(self, pipe, keys: list, kernel: str, part: Part, todo: Writes) -> bool:
        """The write queued and made; False where a watched key or the provenance changed since the read."""
        was = part.provenance if isinstance(part.provenance, bytes) else b""
        args = [kernel, "1" if part.provenance is not None else "0", was, todo.provenance or b"", *todo.arguments()]
        pipe.multi()
        pipe.eval(_WRITE, len(keys), *keys, *args)
        try:
            (status,) = pipe.execute()
        except self._watch_error:
            return False
        return status == b"ok"

    def add(self, arch: str, kernel: str, live_provenance, entries: dict, mode: str = ""):
        """Add ``entries`` (key -> (config, who added it)) of ``kernel``, first writer wins.
        Returns ('ok', [(key, kept entry or None)]) or ('provenance', the store's provenance).
        ``mode``: ``"same"``, a differing provenance is the same kernel; ``"upgrade"``, moving the older hash."""
        keys = [self.key(arch, f"kernel:{kernel}"), self.key(arch, "provenance"), self.key(arch, "entries"),
                self.key(arch, "kernels")]
        args = [kernel, json.dumps(live_provenance, sort_keys=True) if live_provenance else "", mode]
        for key, (desc, who) in sorted(entries.items()):
            args += [key, json.dumps([kernel, key]), json.dumps({"entry": compact(desc), "added": who}, sort_keys=True)]
        status, payload = self.call("eval", _ADD, len(keys), *keys, *args)
        if status == b"provenance":
            return "provenance", loads_or_none(payload)
        kept = []
        for field, value in pairs(payload):
            entry = loads_or_none(value)
            kept.append((field.decode("utf-8", "replace"), entry.get("entry") if isinstance(entry, dict) else None))
        return "ok", kept

    def keep_older(self, arch: str, kept_as: str) -> str | None:
        """The arch's older hash renamed to ``kept_as`` (with a suffix where a key holds that name):
        the name it is kept under; None where it is gone (another upgrade renamed it)."""
        name = self.call("eval", _KEEP_OLDER, 2, self.key(arch, "entries"), kept_as)
        return name.decode() if name is not None else None

    def put_table(self, document: dict, who: dict) -> tuple[int, list[str]]:
        """A table document's entries, with who added each, their measurements and the kernels'
        superseded versions, added to the store (``report``): (how many entries added, notes). An
        entry the store holds stays (``parts.imported``)."""
        arch, added, notes = document["arch"], 0, []
        if not safe_arch(arch):  # it would name the store's keys, and a file when the store is read back
            return 0, [f"{self.shown}: the table's arch {arch!r} is not a plain name ({ARCH_ALLOWED}): its entries are "
                       "not added"]
        for kernel in kernels_of(document):
            try:
                count, said = self.update_kernel(arch, kernel, lambda part: _imported(part, document, kernel, who))
            except StoreTooBig as exc:  # that kernel is left out, said; the others are added
                count, said = 0, [f"{exc}"]
            added, notes = added + count, notes + said
        return added, notes


def _imported(part: Part, document: dict, kernel: str, who: dict):
    after, count, notes = imported(part, document, kernel, who)
    return after, (count, notes)
