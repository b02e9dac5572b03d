"""Tables on a Redis server (``AUTOTUNE_TABLE_PATH=redis://...``): the one module that imports
the ``redis`` client (the optional extra ``redis``: ``pip install '.[redis]'``), only when a URL is given.

Layout, per URL prefix and arch (the ``{arch}`` hash tag keeps both keys of an arch on one slot):
- ``<prefix>{<arch>}:entries``: a hash, field ``["kernel", "key"]`` (JSON), value
  ``{"entry": <config>, "added": {"run_id", "rank", "host", "time", "triton"}}`` (JSON);
- ``<prefix>{<arch>}:provenance``: a hash, field the kernel, value its provenance (JSON).

Reading: one server-side script per arch returns every field, a value over ``MAX_VALUE_BYTES``
replaced by its length (never sent), so a hostile 100 MB value costs nothing and is named. Each
value is parsed as JSON (never unpickled or evaluated) and checked by ``core.schema``; a bad one is
named with the URL and key, and skipped. Adding: one server-side script per kernel sets the
kernel's provenance if absent and each entry with HSETNX, atomically: the first writer wins, and a
job whose kernel version differs from the store's adds nothing for it."""

from __future__ import annotations

import json
import logging

from ..core import jsonfile, schema
from ..core.errors import FileFormatError, PolicyError
from ..core.model import compact, provenance_differences
from ..core.store_url import ARCH_ALLOWED, hide_password, parse_store_url, safe_arch, store_urls
from ..runtime import current

logger = logging.getLogger("autotune_guard")

MAX_VALUE_BYTES = 64 * 1024  # an entry is a few hundred bytes; anything far larger is not ours
MAX_FIELDS = 200_000  # entries of one arch: far above any real table
TIMEOUT_S = 5.0  # connect and per-request: a store that is slower is as good as down

_READ = """
local out = {}
for i, key in ipairs(KEYS) do
  local part = {}
  local fields = redis.call('HKEYS', key)
  if #fields > tonumber(ARGV[2]) then return {-1, key, #fields} end
  for _, f in ipairs(fields) do
    local n = redis.call('HSTRLEN', key, f)
    table.insert(part, f)
    if n > tonumber(ARGV[1]) then table.insert(part, n) else table.insert(part, redis.call('HGET', key, f)) end
  end
  table.insert(out, part)
end
return out
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
READ_GRANTS = "+eval +hkeys +hstrlen +hget"
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
            if isinstance(exc, self._no_permission) or "can't run this command" in str(exc):
                raise StoreNoPermission(f"NOPERM: {exc}") from None
            raise StoreRefused(f"{type(exc).__name__}: {exc}") from None

    def ping(self) -> None:
        self.call("ping")

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
                    notes.append(f"skipping table store {self.shown} key {_said(name)}: its arch {_said(arch.encode())} "
                                 f"is not a plain name ({ARCH_ALLOWED}); it is not read, and names no file")
            if not cursor:
                return sorted(found), notes

    def read(self, arch: str) -> tuple[dict, list[str]]:
        """(the arch's table document, one line per value that could not be used)."""
        entries_key, provenance_key = self.keys(arch)
        reply = self.call("eval", _READ, 2, entries_key, provenance_key, MAX_VALUE_BYTES, MAX_FIELDS)
        if reply and reply[0] == -1:
            raise StoreDown(f"key {reply[1].decode('utf-8', 'replace')} holds {reply[2]} fields, more than any "
                            f"table ({MAX_FIELDS}): not read")
        notes: list[str] = []
        document = {"format": schema.TABLE_FORMAT, "arch": arch, "source": {"store": self.shown},
                    "kernels": {}, "provenance": {}, "added": {}}
        for field, value in _pairs(reply[0]):
            where = f"table store {self.shown} key {entries_key} field {_said(field)}"
            parsed = _checked_entry(where, field, value, notes)
            if parsed is not None:
                (kernel, key), entry, added = parsed
                document["kernels"].setdefault(kernel, {})[key] = entry
                if added is not None:
                    document["added"].setdefault(kernel, {})[key] = added
        for field, value in _pairs(reply[1]):
            where = f"table store {self.shown} key {provenance_key} field {_said(field)}"
            found = _checked_value(where, value, notes)
            if isinstance(found, dict):
                document["provenance"][field.decode("utf-8", "replace")] = found
            elif found is not None:
                notes.append(f"skipping {where}: a provenance must be a JSON object")
        return document, notes

    def add(self, arch: str, kernel: str, live_provenance, entries: dict, same: bool = False):
        """Add ``entries`` (key -> (config, who added it)) of ``kernel``, first writer wins.
        Returns ('ok', [(key, kept entry or None)]) or ('provenance', the store's provenance)."""
        entries_key, provenance_key = self.keys(arch)
        args = [kernel, json.dumps(live_provenance, sort_keys=True) if live_provenance else "", "same" if same else ""]
        for key, (desc, who) in sorted(entries.items()):
            args += [json.dumps([kernel, key]), json.dumps({"entry": compact(desc), "added": who}, sort_keys=True)]
        status, payload = self.call("eval", _ADD, 2, entries_key, provenance_key, *args)
        if status == b"provenance":
            return "provenance", _loads_or_none(payload)
        kept = []
        for field, value in _pairs(payload):
            entry = _loads_or_none(value)
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


def _pairs(flat):
    return zip(flat[0::2], flat[1::2])


def _said(field: bytes) -> str:
    text = field[:200].decode("utf-8", "replace")
    return repr(text + ("..." if len(field) > 200 else ""))


def _loads_or_none(value):
    try:
        return jsonfile.parse_bytes("store value", value)
    except FileFormatError:
        return None


def _checked_value(where: str, value, notes: list):
    """A value parsed as JSON with the files' bounds; None (and one note) when it is unusable."""
    if isinstance(value, int):  # the read script sent its length instead
        notes.append(f"skipping {where}: its value is {value} bytes, more than any table entry "
                     f"({MAX_VALUE_BYTES}); not read")
        return None
    try:
        return jsonfile.parse_bytes(where, value)
    except FileFormatError as exc:
        notes.append(f"skipping {str(exc)}")
        return None


def _checked_entry(where: str, field: bytes, value, notes: list):
    """((kernel, key), config, who added it) of one entries field, checked; None when unusable."""
    try:
        name = json.loads(field.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        name = None
    if not (isinstance(name, list) and len(name) == 2 and all(isinstance(n, str) and n for n in name)):
        notes.append(f"skipping {where}: the field is not [\"kernel\", \"key\"] as JSON")
        return None
    found = _checked_value(where, value, notes)
    if found is None:
        return None
    try:
        schema.check_descriptor(where, "entry", found.get("entry") if isinstance(found, dict) else None)
    except FileFormatError as exc:
        notes.append(f"skipping {exc} (the value must be {{\"entry\": <config>, \"added\": {{...}}}})")
        return None
    added = found.get("added")
    return tuple(name), found["entry"], added if isinstance(added, dict) else None


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
