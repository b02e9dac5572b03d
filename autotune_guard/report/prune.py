"""``report prune TABLE``: drop entries from a table file, with what the table knows of them
(``added``, ``measured``, a ``retune`` asked for; a kernel's ``provenance`` once none of its entries
is left): the kernels whose provenance differs from a run's (``--stale RUN``), named kernels and
keys (``--kernel``, ``--key``), and the kernel versions consensus replaced (``--superseded``).
``--dry-run`` names what would go and changes nothing. The file is rewritten whole in one rename,
under the lock consensus takes to grow ``<dir>/<arch>.json`` (``core.table_edit``), so no job's new
entry is lost: the one way to drop an entry without editing JSON by hand."""

from __future__ import annotations

import os

from ..core.errors import InputError
from ..core.megatron import READ_AS
from ..core.model import signature
from ..core.schema import TABLE_FORMAT, read_document
from ..core.store_url import is_store_url
from ..core.table_edit import edit_table
from ..core.tables import ADDED, MEASURED, PROVENANCE
from .configs import full_descriptor
from .output import dump
from .reading import read_sources
from .rows import Rows
from .table_diff import kernel_differences, run_provenance
from .table_facts import RETUNE, SUPERSEDED, superseded_of
from .table_show import say_notes


def table_file(arg: str) -> str:
    """The one table file ``arg`` names (a store, a directory or a missing file is refused by name)."""
    if is_store_url(arg):
        raise InputError(f"{arg}: prune works on a table file; export the store's table first "
                         "(store-export), prune it, and import it again (store-import)")
    if os.path.isdir(arg):
        raise InputError(f"{arg}: is a directory; name the table file in it ({os.path.join(arg, '<arch>.json')})",
                         path=arg)
    if not os.path.exists(arg):
        raise InputError(f"{arg}: no such table file", path=arg)
    return arg


def _read(path: str, document: dict | None = None) -> dict:
    document = read_document(path, formats=(TABLE_FORMAT,)) if document is None else document
    if document.get(READ_AS):
        raise InputError(f"{path}: is a {document[READ_AS]} file, read as a table; prune rewrites autotune_guard "
                         "tables only (its own tools edit that file)", path=path)
    return document


def _resolve(document: dict, names: list[str], path: str) -> list[str]:
    """The table's kernels ``names`` name: each name as the table spells it, else by its bare name."""
    kernels = document["kernels"]
    found = []
    for name in names:
        matched = [name] if name in kernels else [k for k in kernels if k.rpartition(".")[2] == name]
        if not matched:
            held = ", ".join(sorted(kernels)[:8]) + (" ..." if len(kernels) > 8 else "")
            raise InputError(f"{path}: holds no kernel {name} (it holds: {held or 'none'})", path=path)
        found += [k for k in matched if k not in found]
    return found


def named(document: dict, kernels: list[str] | None, keys: list[str] | None, path: str) -> dict:
    """(kernel, key) -> why, for ``--kernel`` and ``--key``: every key of the named kernels (those
    keys only, with ``--key``), or with ``--key`` alone that key of every kernel."""
    chosen = _resolve(document, kernels, path) if kernels else list(document["kernels"])
    found = {(k, key): "named" for k in chosen for key in document["kernels"][k] if not keys or key in keys}
    for key in keys or ():
        if not any(k == key for _, k in found):
            raise InputError(f"{path}: holds no key ({key})" + (f" of kernel {', '.join(chosen)}" if kernels else ""),
                             path=path)
    return found


def stale(document: dict, run: tuple[dict, list]) -> dict:
    """(kernel, key) -> why, for each entry of a kernel whose provenance in the table differs from
    the run's (``table_diff.kernel_differences``); a bare name in the table stands for its kernels."""
    per_kernel, processes = run
    recorded = document.get(PROVENANCE) if isinstance(document.get(PROVENANCE), dict) else {}
    found = {}
    for kernel, entries in document["kernels"].items():
        table = recorded.get(kernel)
        if not isinstance(table, dict):
            continue
        own = [p for name, said in per_kernel.items() if kernel in (name, name.rpartition(".")[2]) for p in said]
        differs = kernel_differences(table, own, processes)
        found.update({(kernel, key): "stale: " + "; ".join(differs) for key in entries} if differs else {})
    return found


def dropped(document: dict, drops: dict, superseded: bool) -> dict:
    """A copy of ``document`` without the entries ``drops`` names (and what the table keeps of
    them), and without its superseded kernel versions where ``superseded``. A part it cannot read is
    kept as it is (named by ``table_facts.file_notes``, never dropped unsaid)."""
    pruned = dict(document)
    kernels = {kernel: dict(entries) for kernel, entries in document["kernels"].items()}
    parts = {name: {k: dict(v) if isinstance(v, dict) else v for k, v in document[name].items()}
             for name in (ADDED, MEASURED, RETUNE) if isinstance(document.get(name), dict)}
    for kernel, key in drops:
        kernels[kernel].pop(key, None)
        for part in parts.values():
            if isinstance(part.get(kernel), dict):
                part[kernel].pop(key, None)
    gone = {kernel for kernel, entries in kernels.items() if not entries}
    pruned["kernels"] = {k: v for k, v in kernels.items() if v}
    if isinstance(document.get(PROVENANCE), dict):
        parts[PROVENANCE] = document[PROVENANCE]
    for name, part in parts.items():
        pruned[name] = {k: v for k, v in part.items() if k not in gone and (v or not isinstance(v, dict))}
        if not pruned[name]:
            del pruned[name]  # (as a grown table leaves a part it has nothing for out)
    if superseded:
        pruned.pop(SUPERSEDED, None)
    return pruned


def run(args, out) -> int:
    """The command: what goes, said entry by entry; the file rewritten unless ``--dry-run``."""
    if not (args.stale or args.kernel or args.key or args.superseded):
        raise InputError("prune: name what to drop: --stale RUN_FILES, --kernel NAME, --key KEY or --superseded")
    path = table_file(args.table)
    evidence = None
    if args.stale:
        fold = Rows()
        sources = read_sources(args.stale, ("record", "choices"), "prune", args.all_runs, fold=fold)
        evidence = run_provenance(sources, fold)
    found: dict = {}

    def change(document):
        """What goes, worked out on the table as it is under the lock (a job may have added since)."""
        if document is None:
            raise InputError(f"{path}: no such table file", path=path)
        document = _read(path, document)
        drops = named(document, args.kernel, args.key, path) if (args.kernel or args.key) else {}
        for entry, why in (stale(document, evidence) if evidence else {}).items():
            drops.setdefault(entry, why)
        versions = superseded_of(document) if args.superseded else []
        found.update(document=document, drops=drops, versions=versions)
        if args.dry_run or not (drops or versions):
            return None
        return dropped(document, drops, args.superseded)

    if args.dry_run:
        change(_read(path))
        written = False
    else:
        written = edit_table(path, change) is not None
    say_notes([_Table(path, found["document"])])
    _report(args, path, found["document"], (found["drops"], found["versions"], written), out)
    return 0


def _report(args, path: str, document: dict, outcome, out) -> None:
    drops, versions, written = outcome
    items = [{"kernel": kernel, "key": key, "why": why,
              "config": signature(full_descriptor(document["kernels"][kernel][key]))}
             for (kernel, key), why in sorted(drops.items())]
    if args.json:
        dump({"table": path, "dry_run": args.dry_run, "written": written, "dropped": items,
              "superseded_dropped": versions}, out)
        return
    verb = "would drop" if args.dry_run else "dropped"
    for item in items:
        print(f"  {verb} {item['kernel']} key ({item['key']}): {item['config']} [{item['why']}]", file=out)
    for v in versions:
        print(f"  {verb} the superseded version of {v['kernel']} ({v['entries']} entries, replaced at "
              f"{v['replaced_at']}{': ' + '; '.join(v['why']) if v['why'] else ''})", file=out)
    count = f"{len(items)} entr{'y' if len(items) == 1 else 'ies'}" + \
        (f" and {len(versions)} superseded kernel version{'s' * (len(versions) != 1)}" if versions else "")
    if not items and not versions:
        print(f"nothing to drop from {path}", file=out)
    elif args.dry_run:
        print(f"--dry-run: {count} would be dropped from {path}; it is unchanged", file=out)
    else:
        print(f"{count} dropped from {path}", file=out)


class _Table:
    """The table as ``say_notes`` reads a source."""

    kind = "table"

    def __init__(self, path: str, document: dict):
        self.path, self.document = path, document


def add_parser(commands, common) -> None:
    prune = commands.add_parser(
        "prune", parents=[common], help="drop a table's stale or named entries, or its superseded kernel versions",
        description="Drop entries from a table file, with who added them and their measurements: --stale RUN "
                    "(the kernels whose provenance differs from the run's record files), --kernel/--key (named "
                    "ones; --key alone: that key of every kernel), --superseded (the kernel versions consensus "
                    "replaced). What is dropped is the union. The file is rewritten in one rename, under the "
                    "table's lock; --dry-run changes nothing.")
    prune.add_argument("table", metavar="TABLE", help="the table file (<dir>/<arch>.json)")
    prune.add_argument("--dry-run", action="store_true", help="name what would be dropped; change nothing")
    prune.add_argument("--stale", nargs="+", metavar="RUN_FILE",
                       help="a run's record (or choices) files: drop the entries of each kernel whose provenance "
                            "in the table differs from the run's")
    prune.add_argument("--kernel", action="append", metavar="NAME", help="drop this kernel's entries (repeatable)")
    prune.add_argument("--key", action="append", metavar="KEY",
                       help="drop this key (of the --kernel kernels, else of every kernel; repeatable)")
    prune.add_argument("--superseded", action="store_true",
                       help="drop the kernel versions consensus replaced (the table's 'superseded' list)")
    prune.set_defaults(run=run)
