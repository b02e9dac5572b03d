"""``python -m autotune_guard.report import``: Triton's own autotune disk cache as a table.

Triton 3.4+ with ``cache_results=True`` (or ``TRITON_CACHE_AUTOTUNING=1``) keeps, for each
(kernel, tuning key, candidate list), ``<TRITON_CACHE_DIR>/<hash>/<function>.autotune.json``::

    {"key": [1024, "torch.float16"], "configs_timings": [[{"kwargs": {...}, "num_warps": 4, ...}, [p50, p20, p80]], ...]}

(``Autotuner.check_disk_cache`` writes it: the tuning key, then every timed candidate's
``Config.__dict__`` with Triton's timings).  The winner is Triton's own: the lowest timings,
compared as lists (median first).  Files are read through ``core.jsonfile`` and every config is
checked by ``core.schema.check_descriptor``, so a hostile file is one line naming it and no table
written here is one ``report show`` refuses.

The file names the kernel by its function name only (``matmul_kernel``), which tables accept;
the arch is not in the file (its hash covers the target), so ``--arch`` says which it was.
Plain data and files: nothing here imports Triton or torch.
"""

from __future__ import annotations

import math
import os
import time

from ..core import schema
from ..core.errors import CacheError, FileFormatError
from ..core.jsonfile import atomic_write_json, read_json
from ..core.model import EXTRA_FIELDS, OPTION_FIELDS, key_text, signature
from .output import dump
from .reading import MADE_BY

SUFFIX = ".autotune.json"


def default_cache_dir() -> str:
    """Where Triton keeps its cache: ``TRITON_CACHE_DIR``, else ``$TRITON_HOME/.triton/cache``."""
    explicit = os.environ.get("TRITON_CACHE_DIR", "").strip()
    if explicit:
        return explicit
    home = os.environ.get("TRITON_HOME", "").strip() or os.path.expanduser("~/")
    return os.path.join(home, ".triton", "cache")


def cache_files(directory: str) -> list[str]:
    """Every autotune result under ``directory`` (a cache dir, or one ``*.autotune.json`` file)."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        return [directory]  # a file, or something that is not one: read_json names what it is
    if not os.path.isdir(directory):
        raise CacheError(f"{directory}: no such directory (Triton's cache is TRITON_CACHE_DIR, else ~/.triton/cache)",
                         path=directory)
    found = [p for p in walk(directory, SUFFIX)
             if not os.path.basename(os.path.dirname(p)).startswith("tmp.pid_")]  # Triton's unfinished writes
    if not found:
        raise CacheError(f"{directory}: holds no autotune results (*{SUFFIX}); Triton writes them with "
                         "TRITON_CACHE_AUTOTUNING=1 or @triton.autotune(..., cache_results=True), on a GPU", path=directory)
    return sorted(found)


def walk(directory: str, suffix: str) -> list[str]:
    """The files named ``*suffix`` under ``directory``. A symlinked directory is entered once per
    directory it leads to (by device and inode): a link to itself or an ancestor is no loop."""
    found, seen = [], set()
    for root, dirs, files in os.walk(directory, followlinks=True):
        try:
            info = os.stat(root)
        except OSError:
            dirs[:] = []
            continue
        if (info.st_dev, info.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        found.extend(os.path.join(root, name) for name in files if name.endswith(suffix))
    return found


def descriptor_of(path: str, where: str, fields) -> dict:
    """A ``Config.__dict__`` as Triton wrote it -> a table descriptor, checked as every table's
    configs are (``schema.check_descriptor``). A field the file leaves out is left out of the
    descriptor too: a table's omitted field takes Triton's own default when a run pins with it."""
    if not isinstance(fields, dict):
        raise CacheError(f"{path}: {where}: a config must be an object", path=path)
    desc = {"kwargs": fields.get("kwargs", {})}
    desc.update({name: fields[name] for name in OPTION_FIELDS if fields.get(name) is not None})
    desc.update({name: fields[name] for name, default in EXTRA_FIELDS.items() if fields.get(name, default) != default})
    try:
        schema.check_descriptor(path, where, desc)
    except FileFormatError as exc:
        raise CacheError(str(exc), path=path) from None
    listed = [name for name, value in desc["kwargs"].items() if isinstance(value, list)]
    if listed:  # tables take lists (Helion's configs); a Triton Config's meta-parameters are scalars
        raise CacheError(f"{path}: {where}: meta-parameter {listed[0]!r} is a list; a Triton Config's are numbers, "
                         "strings or booleans", path=path)
    desc["kwargs"] = dict(desc["kwargs"])
    return desc


def _timings(path: str, where: str, value) -> list[float]:
    """The times of one candidate; one that is not finite (``NaN``, ``Infinity``: read as null) as
    infinite: it never wins."""
    measured = value if isinstance(value, list) else [value]
    if not measured or not all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool) for v in measured):
        raise CacheError(f"{path}: {where}: timings must be a number or a list of numbers", path=path)
    return [math.inf if v is None else float(v) for v in measured]


def read_result(path: str) -> tuple[str, str, dict, dict]:
    """(kernel function name, key text, winner descriptor, timings by signature) of one file."""
    try:
        document = read_json(path)  # bounded: size, depth, integer width; never blocks on a FIFO
    except FileFormatError as exc:
        raise CacheError(f"{exc}; not a readable Triton autotune cache file", path=path) from None
    if not isinstance(document, dict) or not isinstance(document.get("key"), list) \
            or not isinstance(document.get("configs_timings"), list) or not document["configs_timings"]:
        raise CacheError(f"{path}: not a Triton autotune cache file (expected 'key' and 'configs_timings' lists)", path=path)
    if not all(part is None or isinstance(part, (str, int, float)) for part in document["key"]):
        raise CacheError(f"{path}: 'key' must be a list of numbers and strings (a tuning key's values and dtypes)", path=path)
    timings, descriptors = {}, {}
    for i, pair in enumerate(document["configs_timings"]):
        where = f"configs_timings[{i}]"
        if not (isinstance(pair, list) and len(pair) == 2):
            raise CacheError(f"{path}: {where} must be a [config, timings] pair", path=path)
        desc = descriptor_of(path, where, pair[0])
        timings[signature(desc)] = _timings(path, where, pair[1])
        descriptors[signature(desc)] = desc
    timed = [sig for sig, measured in timings.items() if math.isfinite(measured[0])]
    if not timed:
        raise CacheError(f"{path}: no candidate has a finite time (NaN or infinite): nothing to import", path=path)
    winner = min(timed, key=timings.get)  # Triton's rule: lowest timings, median first
    kernel = os.path.basename(path)[:-len(SUFFIX)] if path.endswith(SUFFIX) else os.path.basename(path)
    return kernel, key_text(document["key"]), descriptors[winner], timings


def _written_at(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0  # gone since the directory was listed: read_json will say so


def build_table(paths: list[str], arch: str) -> tuple[dict, list[dict], list[str]]:
    """The table, one entry per (kernel, key) imported, and notes (conflicts between files: the
    most recently written file wins)."""
    kernels: dict[str, dict] = {}
    entries: dict[tuple, dict] = {}
    notes = []
    for path in sorted(paths, key=lambda p: (_written_at(p), p)):
        kernel, key, winner, timings = read_result(path)
        chosen = signature(winner)
        earlier = entries.get((kernel, key))
        if earlier is not None and earlier["chosen"] != chosen:
            notes.append(f"{kernel} key ({key}): {path} (newer) says {chosen}, {earlier['file']} said "
                         f"{earlier['chosen']}; using the newer")
        median = timings[chosen][0]
        entries[(kernel, key)] = {"kernel": kernel, "key": key, "chosen": chosen, "file": path,
                                  "median_ms": median if math.isfinite(median) else None, "timed": len(timings)}
        kernels.setdefault(kernel, {})[key] = winner
    table = {
        "format": schema.TABLE_FORMAT, "arch": arch,
        "source": {"files": sorted(paths), "rule": "triton disk cache (lowest timings)",
                   "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "by": f"{MADE_BY} import"},
        "kernels": kernels,
    }
    return table, list(entries.values()), notes


def run(args, out) -> int:
    """The ``import`` command."""
    directory = args.cache_dir or default_cache_dir()
    output = args.output
    if not args.arch.strip():
        raise CacheError("--arch is empty; give the arch the cache was made on (sm90, gfx942, interpret)")
    if output.endswith(("/", os.sep)) or os.path.isdir(output):
        raise CacheError(f"{output}: -o names a directory; give the table file, like "
                         f"{os.path.join(output, args.arch + '.json')}", path=output)
    paths = cache_files(directory)
    if os.path.abspath(output) in {os.path.abspath(p) for p in paths}:
        raise CacheError(f"{output}: is one of the cache files read; write the table elsewhere", path=output)
    table, entries, notes = build_table(paths, args.arch)
    try:
        atomic_write_json(output, table)
    except OSError as exc:
        raise CacheError(f"{output}: cannot be written ({exc.strerror or exc})", path=output) from None
    if args.json:
        dump({"table": output, "arch": args.arch, "cache": directory, "entries": entries, "notes": notes}, out)
        return 0
    count = len(table["kernels"])
    print(f"wrote {output}: arch {args.arch}, {count} kernel{'s' * (count != 1)}, {len(entries)} "
          f"key{'s' * (len(entries) != 1)} from Triton's autotune cache in {directory}", file=out)
    for e in entries:
        print(f"  {e['kernel']} key ({e['key']}): {e['chosen']} (fastest of {e['timed']} timed)", file=out)
    for note in notes:
        print(f"  note: {note}", file=out)
    print("  note: kernels are named by function name only (Triton's file names them so); "
          "AUTOTUNE_TABLE_PATH matches them to module.function by that name", file=out)
    return 0


def add_parser(commands, common) -> None:
    # Not the common options: --check and --all-runs mean nothing for a cache; --json is its own.
    sub = commands.add_parser(
        "import", help="turn Triton's own autotune disk cache into a table",
        description="Read the *.autotune.json files Triton 3.4+ writes with TRITON_CACHE_AUTOTUNING=1 or "
                    "cache_results=True and write a table of its winners for AUTOTUNE_MODE=pinned.")
    sub.add_argument("cache_dir", nargs="?", metavar="CACHE_DIR",
                     help="Triton's cache directory, or one *.autotune.json file (default: TRITON_CACHE_DIR, "
                          "else ~/.triton/cache)")
    sub.add_argument("-o", "--output", required=True, metavar="TABLE.json", help="the table to write (atomically)")
    sub.add_argument("--arch", required=True,
                     help="the arch the cache was made on (sm90, gfx942, interpret): Triton's files do not say")
    sub.add_argument("--json", action="store_true", help="machine-readable output")
    sub.set_defaults(run=run)
