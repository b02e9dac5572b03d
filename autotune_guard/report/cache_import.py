"""``python -m autotune_guard.report import``: Triton's own autotune disk cache as a table.

Triton 3.4+ with ``cache_results=True`` (or ``TRITON_CACHE_AUTOTUNING=1``) keeps, for each
(kernel, tuning key, candidate list), ``<TRITON_CACHE_DIR>/<hash>/<function>.autotune.json``::

    {"key": [1024, "torch.float16"], "configs_timings": [[{"kwargs": {...}, "num_warps": 4, ...}, [p50, p20, p80]], ...]}

(``Autotuner.check_disk_cache`` writes it: the tuning key, then every timed candidate's
``Config.__dict__`` with Triton's timings).  The winner is Triton's own: the lowest timings,
compared as lists (median first).  A team with a warm cache gets a pinned table from it without
recording anything.

The file names the kernel by its function name only (``matmul_kernel``), which tables accept;
the arch is not in the file (its hash covers the target), so ``--arch`` says which it was.
Plain data and files: nothing here imports Triton or torch.
"""

from __future__ import annotations

import glob
import json
import math
import os
import time

from .. import __version__, files, selection
from .reading import InputError

SUFFIX = ".autotune.json"


class CacheError(InputError):
    """A cache directory or file that cannot be turned into a table: one line, naming it."""


def default_cache_dir() -> str:
    """Where Triton keeps its cache: ``TRITON_CACHE_DIR``, else ``$TRITON_HOME/.triton/cache``."""
    explicit = os.environ.get("TRITON_CACHE_DIR", "").strip()
    if explicit:
        return explicit
    home = os.environ.get("TRITON_HOME", "").strip() or os.path.expanduser("~/")
    return os.path.join(home, ".triton", "cache")


def cache_files(directory: str) -> list[str]:
    """Every autotune result under ``directory`` (a cache dir, or one ``*.autotune.json`` file)."""
    if os.path.isfile(directory):
        return [directory]
    if not os.path.isdir(directory):
        raise CacheError(f"{directory}: no such directory (Triton's cache is TRITON_CACHE_DIR, else ~/.triton/cache)")
    found = [p for p in glob.glob(os.path.join(glob.escape(directory), "**", "*" + SUFFIX), recursive=True)
             if not os.path.basename(os.path.dirname(p)).startswith("tmp.pid_")]  # Triton's unfinished writes
    if not found:
        raise CacheError(f"{directory}: holds no autotune results (*{SUFFIX}); Triton writes them with "
                         "TRITON_CACHE_AUTOTUNING=1 or @triton.autotune(..., cache_results=True), on a GPU")
    return sorted(found)


def descriptor_of(fields: dict, where: str) -> dict:
    """A ``Config.__dict__`` as Triton wrote it -> a table descriptor (fields at default left out
    as ``selection.compact`` leaves them)."""
    if not isinstance(fields, dict) or not isinstance(fields.get("kwargs", {}), dict):
        raise CacheError(f"{where}: a config must be an object with a 'kwargs' object")
    desc = {"kwargs": dict(fields.get("kwargs", {}))}
    defaults = {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
    for name in selection.OPTION_FIELDS:
        value = fields.get(name, defaults[name])
        if value is not None:
            desc[name] = value
    for name, default in selection.EXTRA_FIELDS.items():
        value = fields.get(name, default)
        if value != default:
            desc[name] = value
    return desc


def read_result(path: str) -> tuple[str, str, dict, dict]:
    """(kernel function name, key text, winner descriptor, timings by signature) of one file."""
    try:
        with open(path, encoding="utf-8") as src:
            document = json.load(src)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CacheError(f"{path}: not a readable Triton autotune cache file ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("key"), list) \
            or not isinstance(document.get("configs_timings"), list) or not document["configs_timings"]:
        raise CacheError(f"{path}: not a Triton autotune cache file (expected 'key' and 'configs_timings' lists)")
    timings, descriptors = {}, {}
    for i, pair in enumerate(document["configs_timings"]):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise CacheError(f"{path}: configs_timings[{i}] must be a [config, timings] pair")
        desc = descriptor_of(pair[0], f"{path}: configs_timings[{i}]")
        measured = pair[1] if isinstance(pair[1], list) else [pair[1]]
        if not measured or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in measured):
            raise CacheError(f"{path}: configs_timings[{i}]: timings must be a number or a list of numbers")
        signature = selection.signature(desc)
        timings[signature] = [float(v) for v in measured]
        descriptors[signature] = desc
    winner = min(timings, key=timings.get)  # Triton's rule: lowest timings, median first
    kernel = os.path.basename(path)[:-len(SUFFIX)]
    key = ",".join(str(part) for part in document["key"])
    return kernel, key, descriptors[winner], timings


def build_table(paths: list[str], arch: str) -> tuple[dict, list[dict], list[str]]:
    """The table, one entry per (kernel, key) imported, and notes (conflicts between files: the
    most recently written file wins)."""
    kernels: dict[str, dict] = {}
    entries: dict[tuple, dict] = {}
    notes = []
    for path in sorted(paths, key=os.path.getmtime):
        kernel, key, winner, timings = read_result(path)
        signature = selection.signature(winner)
        earlier = entries.get((kernel, key))
        if earlier is not None and earlier["chosen"] != signature:
            notes.append(f"{kernel} key ({key}): {path} (newer) says {signature}, {earlier['file']} said "
                         f"{earlier['chosen']}; using the newer")
        median = timings[signature][0]
        entries[(kernel, key)] = {"kernel": kernel, "key": key, "chosen": signature, "file": path,
                                  "median_ms": median if math.isfinite(median) else None, "timed": len(timings)}
        kernels.setdefault(kernel, {})[key] = winner
    table = {
        "format": files.TABLE_FORMAT, "arch": arch,
        "source": {"files": sorted(paths), "rule": "triton disk cache (lowest timings)",
                   "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "by": f"autotune_guard {__version__} report import"},
        "kernels": kernels,
    }
    return table, list(entries.values()), notes


def run(args, out) -> int:
    """The ``import`` command."""
    directory = args.cache_dir or default_cache_dir()
    output = args.output
    if output.endswith(("/", os.sep)) or os.path.isdir(output):
        raise CacheError(f"{output}: -o names a directory; give the table file, like "
                         f"{os.path.join(output, args.arch + '.json')}")
    table, entries, notes = build_table(cache_files(directory), args.arch)
    try:
        files.atomic_write_json(output, table)
    except OSError as exc:
        raise CacheError(f"{output}: cannot be written ({exc.strerror or exc})") from None
    if args.json:
        json.dump({"table": output, "arch": args.arch, "cache": directory, "entries": entries, "notes": notes}, out,
                  indent=1)
        out.write("\n")
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
