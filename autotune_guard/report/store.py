"""The report and table stores (Redis URLs, as ``AUTOTUNE_TABLE_PATH`` takes them):
``show redis://...`` and ``merge ... -o redis://...`` (a store where a file was), and
``store-export URL -o DIR`` / ``store-import TABLE.json... -o URL`` between files and the store.

A store is read as a job reads it (``adapters.redis_tables``: every value parsed as JSON and
checked by ``core.schema``; a bad one named with the URL and key and left out), one table per
arch, with everything a table file holds: who added each entry, the measurements that chose it (its
pooled verdict, the runs and replaced entries kept beside it), a retune asked for, and superseded
kernel versions. Writing adds entries first writer wins, never replacing one (nor its
measurements): a store is shared by jobs that may be running now."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time

from ..core import schema
from ..core.errors import FileFormatError, PolicyError
from ..core.jsonfile import atomic_write_json
from ..core.store_url import hide_password, is_store_url, safe_arch
from .output import write_atomically
from .reading import MADE_BY, InputError


def _store(url: str):
    from ..adapters import redis_tables  # the store's one client (tests/test_layout.py); only for a URL

    try:
        store = redis_tables.Store(url)
        store.ping()
    except PolicyError as exc:
        raise InputError(str(exc).replace("AUTOTUNE_TABLE_PATH", "the report")) from None
    except redis_tables.StoreDown as exc:
        said = store.failed(exc, store.READ_GRANTS) if isinstance(exc, redis_tables.StoreNoPermission) else \
            f"the table store does not answer ({exc})"
        raise InputError(f"{hide_password(url)}: {said}") from None
    return store, redis_tables.StoreDown


def documents(url: str, stderr) -> list[dict]:
    """The store's tables, one per arch; what could not be used is said on ``stderr``."""
    store, down = _store(url)
    found = []
    try:
        archs, refused = store.archs()
        for note in refused:
            print(f"autotune-guard-report: WARNING: {note}", file=stderr)
        for arch in archs:
            document, notes = store.read(arch)
            for note in notes:
                print(f"autotune-guard-report: WARNING: {note}", file=stderr)
            document["provenance"] = {k: v for k, v in document["provenance"].items() if k in document["kernels"]}
            for name in ("measured", "retune", "superseded"):  # as a table file holds them: only where there are some
                if not document.get(name):
                    document.pop(name, None)
            found.append(document)
    except down as exc:
        grants = f"{store.READ_GRANTS} {store.LIST_GRANTS}"
        raise InputError(f"{store.shown}: {store.failed(exc, grants)}") from None
    if not found:
        raise InputError(f"{store.shown}: the table store holds no table (prefix {store.address.prefix!r})")
    return found


def export_to(url: str, directory: str, stderr) -> list[str]:
    """``<directory>/<arch>.json`` for each table the store holds; the paths written."""
    os.makedirs(directory, exist_ok=True)
    written = []
    for document in documents(url, stderr):
        if not safe_arch(document["arch"]):  # archs() let only plain names through: never a path of the store's
            raise InputError(f"{hide_password(url)}: arch {document['arch']!r} is not a plain name; nothing written")
        path = os.path.join(directory, f"{document['arch']}.json")
        document["source"] = {"by": f"{MADE_BY} store-export", "store": hide_password(url)}
        atomic_write_json(path, document)
        written.append(path)
    return written


def import_files(paths: list[str], url: str, by: str = "store-import") -> tuple[int, int, list[str]]:
    """Table files' entries added to the store: (entries added, entries it held already, notes);
    ``by``: the report command the entries are credited to."""
    from ..adapters.redis_tables import StoreBusy as busy  # after _store: only for a URL

    store, down = _store(url)
    who = {"run_id": f"report {by} ({time.strftime('%Y-%m-%dT%H:%M:%S%z')})", "rank": 0,
           "host": socket.gethostname(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    added = held = 0
    notes: list[str] = []
    for path in paths:
        try:
            document = schema.read_document(path, formats=(schema.TABLE_FORMAT,))
        except FileFormatError as exc:
            raise InputError(str(exc)) from None
        try:
            count, said = store.put_table(document, who)
        except down as exc:
            raise InputError(f"{store.shown}: {store.failed(exc, type(store).WRITE_GRANTS)}; entries added "
                             "before stay, run the import again for the rest") from None
        except busy as exc:
            raise InputError(f"{exc}; entries added before stay, run the import again for the rest") from None
        total = sum(len(entries) for entries in document["kernels"].values())
        added, held, notes = added + count, held + total - count, notes + said
    return added, held, notes


def run_export(args, out) -> int:
    import sys

    for path in export_to(args.url, args.output, sys.stderr):
        print(f"wrote {path}", file=out)
    return 0


def run_import(args, out) -> int:
    added, held, notes = import_files(args.files, args.output)
    for note in notes:
        print(f"autotune-guard-report: WARNING: {note}", file=out)
    print(f"{hide_password(args.output)}: added {added} entries; {held} were there already (kept: the first "
          "writer wins)", file=out)
    return 0


def run_upgrade(args, out) -> int:
    """Each arch the store holds in one hash (the layout before per-kernel keys) moved to per-kernel
    keys (``adapters.redis_tables.upgrade``), each key held two ways named, and what was done counted."""
    from ..adapters.redis_tables import upgrade  # after _store: only for a URL

    store, down = _store(args.url)
    try:
        archs, refused = store.archs()
        for note in refused:
            print(f"autotune-guard-report: WARNING: {note}", file=out)
        moved = [(arch, upgrade(store, arch)) for arch in archs if store.call("exists", store.key(arch, "entries"))]
    except down as exc:
        grants = f"{store.READ_GRANTS} {store.WRITE_GRANTS} {store.LIST_GRANTS} +rename"
        raise InputError(f"{store.shown}: {store.failed(exc, grants)}; what was moved before stays moved, run it "
                         "again for the rest") from None
    for arch, done in moved:
        for note in done.notes:
            print(f"autotune-guard-report: WARNING: {note}", file=out)
        for kernel, key, kept, other in done.replaced:
            print(f"autotune-guard-report: WARNING: {store.shown} arch {arch} kernel {kernel} key {key!r}: held two "
                  f"ways: {_config(kept)} in the older hash, {_config(other)} in the kernel's hash; kept "
                  f"{_config(kept)}, the one jobs have run (a job reads the older hash first); {_config(other)} is "
                  "kept beside it in the entry's history (measured, earlier)", file=out)
        print(_upgraded_line(store, arch, done), file=out)
    if not moved:
        print(f"{store.shown}: no arch is held in the older layout; nothing to do", file=out)
    return 0


def _config(entry) -> str:
    from ..core.model import signature

    return signature({"kwargs": {}, **entry}) if isinstance(entry, dict) else repr(entry)


def _upgraded_line(store, arch: str, done) -> str:
    """What one arch's upgrade did, counted, and where the older hash is now."""
    counted = (f"{store.shown} arch {arch}: the older hash held {done.total} entries: {done.copied} copied to "
               f"per-kernel keys, {done.alike} there already alike, {len(done.replaced)} there as another config "
               "(the older hash's kept, each named above)")
    if done.left:
        return (f"{counted}, {done.left} left in it (named above); the older hash is not renamed: jobs go on "
                "reading it; run store-upgrade again once the kernels named can be read")
    if done.kept_as is None:
        return (f"{counted}; the older hash was gone when this upgrade came to rename it: another store-upgrade "
                "moved it at the same time (it names where it is kept)")
    return f"{counted}; the older hash is kept as {done.kept_as} (delete it once no job of an earlier version reads it)"


def with_store_arguments(args, run, out) -> int:
    """``show`` with store URLs among its files, ``merge`` with a store URL as its output: the
    stores' tables read into a temporary directory (or the merged table added from one)."""
    import sys

    temporary = tempfile.mkdtemp(prefix="autotune-guard-report-")
    try:
        if args.command == "show":
            files, names = [], {}
            for item in args.files:
                if not is_store_url(item):
                    files.append(item)
                    continue
                named = os.path.join(temporary, _file_name(item))
                names[named + os.sep] = hide_password(item) + " "  # said as `<url> <arch>.json`
                files += export_to(item, named, sys.stderr)
            args.files = files
            if getattr(args, "write_to", None):
                return write_atomically(args.write_to, lambda target: run(args, _Renamed(target, names)))
            return run(args, _Renamed(out, names))
        url, args.output = args.output, os.path.join(temporary, "merged.json")
        args.to_store = url  # merge's note on a table file's name is for a folder, not a store
        status = run(args, _Renamed(out, {args.output: hide_password(url)}))
        added, held, notes = import_files([args.output], url, by="merge")
        for note in notes:
            print(f"autotune-guard-report: WARNING: {note}", file=sys.stderr)
        print(f"{hide_password(url)}: added {added} entries of the merged table; {held} were there already (kept: "
              "the first writer wins)", file=out)
        return status
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


class _Renamed:
    """An output stream that says each temporary file by the store it came from."""

    def __init__(self, out, names: dict):
        self.out, self.names = out, names

    def write(self, text: str) -> int:
        for temporary, said in self.names.items():
            text = text.replace(temporary, said)
        return self.out.write(text)

    def __getattr__(self, name):
        return getattr(self.out, name)


def _file_name(url: str) -> str:
    """A directory name saying which store a table came from (no password)."""
    return "".join(c if c.isalnum() or c in ".-_" else "_" for c in hide_password(url).replace("***", "x"))[:120]


def needs_store(args) -> bool:
    return (args.command == "show" and any(is_store_url(f) for f in getattr(args, "files", []) or [])) or \
        (args.command == "merge" and is_store_url(getattr(args, "output", "") or ""))


def add_parsers(commands, common) -> None:
    export = commands.add_parser("store-export", help="a table store's tables as <arch>.json files",
                                 description="Write each table a store holds (redis://...) as DIR/<arch>.json.")
    export.add_argument("url", metavar="URL", help="redis://[user:password@]host:port/db[?prefix=...]")
    export.add_argument("-o", "--output", required=True, metavar="DIR", help="the directory to write the tables in")
    export.set_defaults(run=run_export)
    put = commands.add_parser("store-import", help="add table files' entries to a table store",
                              description="Add the entries of table files to a table store; an entry the store "
                                          "holds already is kept (the first writer wins).")
    put.add_argument("files", nargs="+", metavar="TABLE.json", help="table files")
    put.add_argument("-o", "--output", required=True, metavar="URL", help="the store: redis://host:port/db")
    put.set_defaults(run=run_import)
    upgrade = commands.add_parser("store-upgrade", help="move a table store's older one-hash tables to per-kernel keys",
                                  description="Move each arch a table store holds in one hash (written before "
                                              "per-kernel keys) to per-kernel keys, which a job reads kernel by "
                                              "kernel; the older hash is kept under another name.")
    upgrade.add_argument("url", metavar="URL", help="redis://[user:password@]host:port/db[?prefix=...]")
    upgrade.set_defaults(run=run_upgrade)
