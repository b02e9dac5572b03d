"""``report diff``: two runs' choices per kernel and key (same, changed, only in one), their
digests rank by rank, and the kernels both met under other numerics (``parity``). Two programs'
runs compare the same way: keys met by one only are counted, not differences (docs/parity.md).
Where RUN_A names tables, a run is compared with them instead (``table_diff``)."""

from __future__ import annotations

from collections import Counter

from ..core import schema
from ..core.errors import FileFormatError, InputError
from ..core.model import digest_of
from . import html, parity, table_diff
from .output import dump
from .reading import md, natural_key, read_sources
from .rows import Rows, details_reader


def run(args, out) -> int:
    """The ``diff`` command: read both runs, compare them key by key and digest by digest, say so.
    Each file is reduced to compact rows as it is read (``rows.py``); the HTML page reads the keys
    it shows again (``rows.details_reader``)."""
    folds = [Rows(), Rows()]
    first = read_sources([args.a], ("record", "choices", "table"), "diff", args.all_runs, fold=folds[0], jobs=args.jobs)
    if any(s.kind == "table" for s in first):  # report diff TABLE RUN
        return table_diff.run(args, out, first, folds[0])
    sides = [first, read_sources([args.b], ("record", "choices"), "diff", args.all_runs, fold=folds[1], jobs=args.jobs)]
    rows = compare(*(fold.configs(side) for fold, side in zip(folds, sides)))
    for name, fold, side in zip("ab", folds, sides):  # a fallback is said, never passed off as a pinned choice
        fell = fold.fallbacks(side)
        for r in rows:
            if fell.get((r["arch"], r["kernel"], r["key"])):
                r[f"{name}_fallback"] = fell[r["arch"], r["kernel"], r["key"]]
    counts = Counter(r["status"] for r in rows)
    both = sorted({r["kernel"] for r in rows if not r["status"].startswith("only")})
    numerics = parity.differing(both, *(parity.side_numerics(side, fold) for side, fold in zip(sides, folds)))
    failing = sum(1 for r in rows if r["status"] == "changed" or r["a_ranks_disagree"] or r["b_ranks_disagree"])
    failing += len(numerics)
    args.check_status = 1 if args.check and failing else 0  # kept by the CLI whatever happens to stdout
    # Choices files carry a digest of the whole log: equal digests, equal choices, rank by rank
    # (a rank whose processes left several files: the digest of their combined log).
    digests = [_rank_digests(side) for side in sides]
    compared = {rank: {"a": digests[0][rank], "b": digests[1][rank], "same": digests[0][rank] == digests[1][rank]}
                for rank in sorted(set(digests[0]) & set(digests[1]))}
    if args.format == "html":
        out.write(html.diff_page(sides, folds, {(r["arch"], r["kernel"], r["key"]): r["status"] for r in rows},
                                 details_reader(sides[0] + sides[1], ("record", "choices"), "diff", args.jobs),
                                 numerics))
    elif args.format == "markdown":
        print_diff_markdown(sides, rows, counts, failing, out)
        parity.print_numerics(numerics, out)
    elif args.json or args.format == "json":
        dump({"a": [s.path for s in sides[0]], "b": [s.path for s in sides[1]], "keys": rows,
              "counts": dict(counts), "digests": {str(rank): d for rank, d in compared.items()},
              "numerics": numerics, "disagreements": failing}, out)
    else:
        print_diff(sides, rows, counts, compared, out)
        parity.print_numerics(numerics, out)
        if numerics:
            print(f"{len(numerics)} kernel(s) met under other numerics (FP fusion): the same config gives other bits",
                  file=out)
    return args.check_status


def compare(a: dict, b: dict) -> list[dict]:
    """One row per (arch, kernel, key) of either run (``a``, ``b``: key -> the configs its files
    chose): its status and each run's configs."""
    rows = []
    for ident in sorted(set(a) | set(b), key=natural_key):
        configs = [sorted(side.get(ident, ())) for side in (a, b)]
        if not configs[1]:
            status = "only in A"
        elif not configs[0]:
            status = "only in B"
        elif configs[0] == configs[1] and len(configs[0]) == 1:
            status = "same"
        elif configs[0] == configs[1]:
            status = "same, ranks disagree"
        else:
            status = "changed"
        rows.append({"arch": ident.arch, "kernel": ident.kernel, "key": ident.key, "status": status,
                     "a": configs[0], "b": configs[1],
                     "a_ranks_disagree": len(configs[0]) > 1, "b_ranks_disagree": len(configs[1]) > 1})
    return rows


def print_diff(sides, rows, counts, compared, out) -> None:
    for name, side in zip("AB", sides):
        print(f"{name}: {', '.join(s.path for s in side)}", file=out)
    for rank, d in compared.items():
        print(f"  digest rank {rank}: {d['a']} {'==' if d['same'] else '!='} {d['b']}", file=out)
    for r in rows:
        where = f"{r['kernel']} key ({r['key']}) [arch {r['arch']}]"
        if r["status"] == "same":
            print(f"  same     {where}: {r['a'][0]}", file=out)
        elif r["status"] == "only in A":
            print(f"  only A   {where}: {' | '.join(r['a'])}", file=out)
        elif r["status"] == "only in B":
            print(f"  only B   {where}: {' | '.join(r['b'])}", file=out)
        else:
            tag = "CHANGED " if r["status"] == "changed" else "SAME*   "
            print(f"  {tag} {where}:\n      A: {' | '.join(r['a'])}\n      B: {' | '.join(r['b'])}", file=out)
        for name in "ab":
            if r[f"{name}_ranks_disagree"]:
                print(f"      ({name.upper()}'s ranks disagree among themselves)", file=out)
            if r.get(f"{name}_fallback"):
                print(f"      ({name.upper()}: a fallback on {r[f'{name}_fallback']} file(s): the tables lacked this "
                      "key, the AUTOTUNE_ON_MISS rule chose)", file=out)
    print(f"{counts['same']} same, {counts['changed']} changed, {counts['only in A']} only in A, "
          f"{counts['only in B']} only in B" + (f", {counts['same, ranks disagree']} where ranks disagree"
                                                 if counts['same, ranks disagree'] else "")
          + (" (a key met by one run only is not a difference)" if counts['only in A'] + counts['only in B'] else ""),
          file=out)


def _rank_digests(sources) -> dict:
    """Per rank, its choices file's digest; a rank whose processes left several files: the digest
    of their combined log, read again here (one rank's files at a time, as rare as such ranks)."""
    files: dict = {}
    for s in sources:
        if s.kind == "choices":
            files.setdefault(s.rank, []).append(s)
    digests = {}
    for rank, group in files.items():
        if len(group) == 1:
            digests[rank] = group[0].document["digest"]
        else:
            digests[rank] = digest_of({k: v for s in group for k, v in _log(s).items()})
    return digests


def _log(source) -> dict:
    if "log" in source.document:
        return source.document["log"]
    try:
        return schema.read_evidence(source.path)[0]["log"]
    except FileFormatError as exc:  # changed on disk since it was read
        raise InputError(str(exc), path=source.path) from None


def print_diff_markdown(sides, rows, counts, failing, out) -> None:
    """Changed keys and keys whose ranks disagree, in a table; the unchanged ones only counted."""
    verdict = f"{failing} kernel/key entr{'y' if failing == 1 else 'ies'} CHANGED or disagreeing" if failing \
        else "no autotune choice changed"
    print(f"### autotune_guard diff: {verdict}\n", file=out)
    for name, side in zip("AB", sides):
        print(f"- {name}: {', '.join(s.path for s in side)}", file=out)
    print(f"\n{counts['same']} same, {counts['changed']} changed, {counts['only in A']} only in A, "
          f"{counts['only in B']} only in B", file=out)
    shown = [r for r in rows if r["status"] != "same"]
    if shown:
        print("\n| kernel | key | arch | status | A | B |\n|---|---|---|---|---|---|", file=out)
        for r in shown:
            status = r["status"] + "".join(f", {n.upper()}'s ranks disagree" for n in "ab" if r[f"{n}_ranks_disagree"]) \
                + "".join(f", {n.upper()}: a fallback" for n in "ab" if r.get(f"{n}_fallback"))
            a, b = ("<br>".join(md(sig) for sig in r[n]) or "—" for n in "ab")
            print(f"| {md(r['kernel'])} | {md(r['key'])} | {r['arch']} | {status} | {a} | {b} |", file=out)


def add_parser(commands, common) -> None:
    diff = commands.add_parser("diff", parents=[common], help="compare two runs' choices, or a table with a run",
                               description="Per kernel and key: same, changed, only in A, only in B. Each run is a "
                                           "file, a glob pattern or a rank-file prefix. Where RUN_A names a table "
                                           "(a file or a table directory), the run is compared with it: what the "
                                           "run met that the table lacks, holds stale, or holds differently.")
    diff.add_argument("--format", choices=("text", "json", "markdown", "html"), default="text",
                      help="markdown: a pull-request comment; html: one self-contained page to open in a browser "
                           "(--json is --format json)")
    diff.add_argument("-o", "--output", dest="write_to", metavar="FILE",
                      help="write the output to FILE (atomically) instead of stdout")
    diff.add_argument("a", metavar="RUN_A", help="a run (files or a prefix), or a TABLE: a table file or table folder (diff TABLE RUN)")
    diff.add_argument("b", metavar="RUN_B")
    diff.set_defaults(run=run)
