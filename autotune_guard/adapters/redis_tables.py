"""Tables on a Redis server (``AUTOTUNE_TABLE_PATH=redis://...``): the one module that imports
the ``redis`` client (the optional extra ``redis``: ``pip install '.[redis]'``), only when a URL is given.

Layout, per URL prefix and arch (the ``{arch}`` hash tag keeps both keys of an arch on one slot):
- ``<prefix>{<arch>}:entries``: a hash, field ``["kernel", "key"]`` (JSON), value
  ``{"entry": <config>, "added": {"run_id", "rank", "host", "time", "triton"}}`` (JSON);
- ``<prefix>{<arch>}:provenance``: a hash, field the kernel, value its provenance (JSON).

Reading: a server-side script per piece of ``PIECE`` fields (HSCAN), a value over ``MAX_VALUE_BYTES``
replaced by its length (never sent), so a hostile 100 MB value costs nothing and is named, and a
big table holds the server one piece at a time. Each
value is parsed as JSON (never unpickled or evaluated) and checked by ``core.schema``; a bad one is
named with the URL and key, and skipped. Adding: one server-side script per kernel sets the
kernel's provenance if absent and each entry with HSETNX, atomically: the first writer wins, and a
job whose kernel version differs from the store's adds nothing for it."""

from __future__ import annotations

import json
import logging

from ..core import store_values
from ..core.errors import PolicyError
from ..core.model import compact, provenance_differences
from ..core.store_values import MAX_VALUE_BYTES, loads_or_none, pairs, said
from ..core.store_url import ARCH_ALLOWED, hide_password, parse_store_url, safe_arch, store_urls
from ..runtime import current

logger = logging.getLogger("autotune_guard")

MAX_FIELDS = 200_000  # entries of one arch: far above any real table
TIMEOUT_S = 5.0  # connect and per-request: a store that is slower is as good as down

PIECE = 1000  # fields a read request asks for (HSCAN's COUNT): the server is held for one piece at a time

# One piece of a read: the entries from cursor ARGV[1], then (once they are done, in the same request)
# the provenance from ARGV[2]; a value over ARGV[3] bytes is replaced by its length (never sent).
_READ = """
local function piece(key, cursor)
  local reply = redis.call('HSCAN', key, cursor, 'COUNT', tonumber(ARGV[4]))
  local out = {}
  for i = 1, #reply[2], 2 do
    local v = reply[2][i + 1]
    table.insert(out, reply[2][i])
    if #v > tonumber(ARGV[3]) then table.insert(out, #v) else table.insert(out, v) end
  end
  return reply[1], out
end
local entries_at, entries, provenance_at, provenance = 'done', {}, 'later', {}
if ARGV[1] ~= 'done' then entries_at, entries = piece(KEYS[1], ARGV[1]) end
if entries_at == '0' or entries_at == 'done' then provenance_at, provenance = piece(KEYS[2], ARGV[2]) end
return {entries_at, entries, provenance_at, provenance}
"""

_ADD = """
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur and ARGV[2] ~= '' and cur ~= ARGV[2] and ARGV[3] ~= 'same' then return {'provenance', cur} end
if (not cur) and ARGV[2] ~= '' then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
local kept = {}
for i = 4, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 0 then
    table.insert(kept, ARGV[i]); table.insert(kept, redis.call('HGET', KEYS[1], ARGV[i]))
  end
end
return {'ok', kept}
"""


class StoreDown(Exception):
    """The store did not answer (refused, timed out, wrong password): the words say which."""


class StoreRefused(StoreDown):
    """The store answered with an error (a key of another type, a script refused): it is up."""


class StoreNoPermission(StoreRefused):
    """The server's ACL refused this URL's user a command (NOPERM): up, and the user can be granted it."""


# What a user needs (Redis 7 checks the commands a script runs against the caller's ACL too).
READ_GRANTS = "+eval +hscan"
WRITE_GRANTS = "+eval +hget +hset +hsetnx"


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

    READ_GRANTS, WRITE_GRANTS = READ_GRANTS, WRITE_GRANTS  # for the report, which holds a Store only

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
        # No retries (redis-py 6+ retries 3 to 10 times with backoff by default): TIMEOUT_S bounds a
        # request, as with redis-py 4 and 5; a socket the server closed is still reconnected by the pool.
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.client = redis.Redis(host=a.host, port=a.port, db=a.db, username=a.username, password=a.password,
                                  ssl=a.tls, ssl_check_hostname=a.tls,  # redis-py 4 and 5 default to False
                                  socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S,
                                  retry=Retry(NoBackoff(), 0), decode_responses=False)

    def keys(self, arch: str) -> tuple[str, str]:
        base = f"{self.address.prefix}{{{arch}}}"
        return f"{base}:entries", f"{base}:provenance"

    def call(self, what: str, *args):
        try:
            return getattr(self.client, what)(*args)
        except self._errors as exc:
            raise StoreDown(f"{type(exc).__name__}: {exc}{_tls_hint(exc, self.address.tls)}") from None
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
        what to grant, else the store having stopped answering."""
        if isinstance(exc, StoreNoPermission):
            return self.grant(exc, grants)
        return f"the table store stopped answering ({exc})"

    def grant(self, exc, grants: str) -> str:
        """What the server said to this URL's user, and the ACL line that would let it do ``grants``."""
        user = self.address.username or "default"
        return (f"the server refused user {user!r} ({exc}); grant it {grants} on the keys {self.address.prefix}* "
                f"(ACL SETUSER {user} {grants} ~{self.address.prefix}*), or name a user who has them")

    def archs(self) -> tuple[list[str], list[str]]:
        """(the archs the store holds tables for, one note per key whose arch is not a safe name:
        an arch names a file where the report writes a table). A scan: for the report, never a job."""
        pattern = f"{self.address.prefix}{{*}}:entries"
        found, notes = set(), []
        cursor = 0
        while True:
            cursor, names = self.call("scan", cursor, pattern, 1000)
            for name in names:
                text = name.decode("utf-8", "replace")
                arch = text[len(self.address.prefix) + 1:].rpartition("}:")[0]
                if safe_arch(arch):
                    found.add(arch)
                elif len(notes) < 100:
                    notes.append(f"skipping table store {self.shown} key {said(name)}: its arch {said(arch.encode())} "
                                 f"is not a plain name ({ARCH_ALLOWED}); it is not read, and names no file")
            if not cursor:
                return sorted(found), notes

    def read(self, arch: str) -> tuple[dict, list[str]]:
        """(the arch's table document, one line per value that could not be used): read in pieces of
        ``PIECE`` fields, each parsed as it comes, so that neither the server nor this process holds
        the whole table's reply. The entries come first: an entry seen has its provenance set (the
        add script sets both at once)."""
        entries_key, provenance_key = self.keys(arch)
        notes: list[str] = []
        document = store_values.new_document(arch, self.shown)
        for entries, provenance in self._pieces(entries_key, provenance_key):
            store_values.absorb(document, (f"table store {self.shown} key {entries_key}", entries),
                                (f"table store {self.shown} key {provenance_key}", provenance), notes)
        return document, notes

    def _pieces(self, entries_key: str, provenance_key: str):
        """(entries, provenance) flat field-value lists, one request each, until both scans are done."""
        entries_at, provenance_at, fields = b"0", b"0", 0
        while True:
            reply = self.call("eval", _READ, 2, entries_key, provenance_key, entries_at, provenance_at,
                              MAX_VALUE_BYTES, PIECE)
            fields += (len(reply[1]) + len(reply[3])) // 2
            if fields > MAX_FIELDS:  # HSCAN may repeat a field while the hash grows: a bound, not a count
                raise StoreDown(f"keys {entries_key} and {provenance_key} hold more than {MAX_FIELDS} fields, more "
                                "than any table: not read")
            yield reply[1], reply[3]
            entries_at = b"done" if reply[0] in (b"0", b"done") else reply[0]
            if reply[2] == b"0":
                return
            provenance_at = reply[2] if reply[2] != b"later" else b"0"

    def add(self, arch: str, kernel: str, live_provenance, entries: dict, same: bool = False):
        """Add ``entries`` (key -> (config, who added it)) of ``kernel``, first writer wins.
        Returns ('ok', [(key, kept entry or None)]) or ('provenance', the store's provenance)."""
        entries_key, provenance_key = self.keys(arch)
        args = [kernel, json.dumps(live_provenance, sort_keys=True) if live_provenance else "", "same" if same else ""]
        for key, (desc, who) in sorted(entries.items()):
            args += [json.dumps([kernel, key]), json.dumps({"entry": compact(desc), "added": who}, sort_keys=True)]
        status, payload = self.call("eval", _ADD, 2, entries_key, provenance_key, *args)
        if status == b"provenance":
            return "provenance", loads_or_none(payload)
        kept = []
        for field, value in pairs(payload):
            entry = loads_or_none(value)
            kept.append((json.loads(field)[1], entry.get("entry") if isinstance(entry, dict) else None))
        return "ok", kept

    def put_table(self, document: dict, who: dict) -> tuple[int, list[str]]:
        """A table document's entries added to the store (``report``): (how many added, notes)."""
        arch, added, notes = document["arch"], 0, []
        if not safe_arch(arch):  # it would name the store's keys, and a file when the store is read back
            return 0, [f"{self.shown}: the table's arch {arch!r} is not a plain name ({ARCH_ALLOWED}): its entries are "
                       "not added"]
        recorded = document.get("provenance") if isinstance(document.get("provenance"), dict) else {}
        said = document.get("added") if isinstance(document.get("added"), dict) else {}
        for kernel, entries in sorted(document["kernels"].items()):
            by = said.get(kernel) if isinstance(said.get(kernel), dict) else {}  # who the file says added each
            status, kept = self.add(arch, kernel, recorded.get(kernel),
                                    {k: (e, by[k] if isinstance(by.get(k), dict) else who) for k, e in entries.items()})
            if status == "provenance":
                notes.append(f"{self.shown}: kernel {kernel} is held there against another version of it: "
                             f"its {len(entries)} entries are not added")
                continue
            added += len(entries) - len(kept)
        return added, notes


def _tls_hint(exc, tls: bool) -> str:
    """What the client's words mean when TLS is the cause: an untrusted certificate, or a URL
    whose scheme does not match what the port speaks."""
    text = str(exc)
    if "certificate verify failed" in text.lower():
        return ("; the server's TLS certificate failed verification: it must be signed by a CA this machine "
                "trusts and name the URL's host (a private CA: SSL_CERT_FILE=<its certificate, PEM>)")
    if tls and "Timeout connecting" in text:
        return "; with rediss:// the server must speak TLS on that port (redis:// for a plain one)"
    if not tls and ("reset by peer" in text or "closed by server" in text):
        return "; a server that speaks only TLS on that port ends plain connections: rediss:// for TLS"
    return ""


class Stores:
    """The process's table stores (held on the Guard): the reader ``core.tables.load_tables``
    gets through the ``table_store`` fact, and the writer ``evidence.store_growth`` calls through it."""

    def __init__(self):
        self.stores: dict[str, Store] = {}
        self.down: set[str] = set()  # URLs said to be down: not asked again by this process
        self.why: dict[str, str] = {}  # URL -> what it met when it went down (the node's others say it)
        self.no_write: set[str] = set()  # URLs whose user the server refused a write: not asked to add again

    def store(self, url: str) -> Store:
        if url not in self.stores:
            self.stores[url] = Store(url)
        return self.stores[url]

    # core.store_snapshot.Node: whose and where the snapshots are; None: from the environment.
    # scripts/store_parts.py sets it to stand many nodes up on one machine.
    snapshot_node = None

    def read(self, url: str, arch: str) -> tuple[dict | None, list[str]]:
        """Once per job and node where torchrun says the job (``core.store_snapshot``), else from the store."""
        from ..core import store_snapshot  # here, not at start-up: only a process given a store URL reads one

        # A store down for this process still goes through the snapshot: its "none" is the node's view.
        read = lambda: self.read_server(url, arch)  # noqa: E731
        return store_snapshot.read(url, arch, read, 2 * TIMEOUT_S + 1, self.snapshot_node, lambda: self.why.get(url))

    def read_server(self, url: str, arch: str) -> tuple[dict | None, list[str]]:
        if url in self.down:
            return None, []
        try:
            return self.store(url).read(arch)
        except StoreNoPermission as exc:
            return None, [f"skipping table store {hide_password(url)} for arch {arch}: "
                          f"{self.store(url).grant(exc, READ_GRANTS)}; keys it would have given are chosen by "
                          "the local rules (other tables, AUTOTUNE_ON_MISS, or consensus tuning)"]
        except StoreRefused as exc:  # up, but its keys for this arch are not ours to read (WRONGTYPE)
            keys = " and ".join(self.store(url).keys(arch))
            return None, [f"skipping table store {hide_password(url)} for arch {arch}: the server refused to read "
                          f"{keys} ({exc}); they must be hashes of autotune_guard entries"]
        except StoreDown as exc:
            self.went_down(url, exc)
            return None, []

    def went_down(self, url: str, exc) -> None:
        """Said once per URL: what was chosen stays chosen; what it would have given is not had."""
        self.down.add(url)
        shown = hide_password(url)
        self.why[url] = f"it stopped answering: {exc}"
        current().warn_once(f"table store down {url}", (
            f"table store {shown} stopped answering ({exc}): choices made so far stand; keys it would have "
            "given are chosen by the local rules (other tables, AUTOTUNE_ON_MISS, or consensus tuning), and "
            "winners tuned from now on are not added to it"), scope="process")

    def add_kernel(self, url: str, arch: str, kernel: str, live, entries: dict):
        """(status, found, what differs) of ``Store.add``; a provenance that differs only where it
        does not matter (a Triton version of its own) is added anyway. None when the store is down
        or refused this user a write (said once: it may still read)."""
        if url in self.no_write:
            return None
        try:
            store = self.store(url)
            status, found = store.add(arch, kernel, live, entries)
            differs = kernel_version_differs(found, live) if status == "provenance" else []
            if status == "provenance" and not differs and isinstance(found, dict):
                status, found = store.add(arch, kernel, live, entries, same=True)
        except StoreNoPermission as exc:
            self.no_write.add(url)
            current().warn_once(f"table store no write {url}", (
                f"table store {hide_password(url)} may be read but not added to: "
                f"{self.store(url).grant(exc, WRITE_GRANTS)}; winners this job tunes stay chosen here and in "
                "its evidence files, and are not added to it"), scope="process")
            return None
        except StoreDown as exc:
            self.went_down(url, exc)
            return None
        return status, found, differs

    def after_fork(self) -> None:
        self.stores = {}  # a client's sockets are the parent's


def stores() -> Stores:
    return current().held("table_stores", Stores)


def configure(guard, policy) -> None:
    """At install: the reader is registered, and each store URL must answer now, else the install
    fails naming it, or with AUTOTUNE_TABLE_STORE_DOWN=local the store is left out, said once."""
    urls = store_urls(policy.table_path) if policy is not None else []
    if not urls:
        return
    held = stores()
    guard.facts.provide("table_store", lambda: held)
    for url in urls:
        held.down.discard(url)
        try:
            held.store(url).ping()
        except StoreDown as exc:
            if policy.table_store_down != "local":
                raise PolicyError(f"AUTOTUNE_TABLE_PATH: the table store {hide_password(url)} does not answer "
                                  f"({exc}); start it or fix the URL, or set AUTOTUNE_TABLE_STORE_DOWN=local to run "
                                  "by the local rules without it (allowed: error, local)") from None
            held.down.add(url)
            held.why[url] = f"it did not answer at start: {exc}"
            guard.warn_once(f"table store down at start {url}", (
                f"table store {hide_password(url)} does not answer ({exc}); AUTOTUNE_TABLE_STORE_DOWN=local: this "
                "process runs by the local rules (other tables, AUTOTUNE_ON_MISS, consensus tuning) without it"),
                scope="process")


def kernel_version_differs(stored, live) -> list[str]:
    if not isinstance(stored, dict) or not isinstance(live, dict):
        return []
    return provenance_differences(stored, live)
