"""``report merge``: per-rank record files -> one table for pinned mode (majority vote, the
fastest by Triton's measured times across ranks, or the winner pooled over every process's selection).

Over 350 lines: three rules (vote, fastest, pooled) and the filtering by run and owner that decides what a
table is made of.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections import Counter

from ..core import pooling, schema, tables
from ..core.errors import InputError
from ..core.jsonfile import atomic_write_json
from ..core.model import static_cost
from ..core.safe_files import user_name
from .output import dump
from .reading import MADE_BY, Source, read_sources
from .tally import Tally
from . import merge_into, worst_case


def run(args, out) -> int:
    """The ``merge`` command: read and check the records, decide each key, write the table, say what it did."""
    output = _output_path(args.output)
    tally = Tally(timings=True)  # the files are read one at a time into it; timings break the vote's ties
    used, arch, notes = _records(args, output, tally)
    selections = tally.selections_of(used)
    decisions, kernels, library = _decide_all(tally.keys(used, arch), args.rule, tally.descriptors, selections)
    table, version_notes = _table(used, arch, args.rule, kernels)
    table["source"].update(worst_case.source_of(decisions))  # how each '*' was chosen (--rule worst-case)
    table[tables.PROVENANCE] = tally.provenance
    measured = _measured_of(decisions, selections)
    if measured:
        table[tables.MEASURED] = measured
    notes += version_notes + library_notes(library)
    try:
        if os.path.lexists(output):  # every write to a table is a merge: what it knows is kept
            notes += merge_into.write_into(output, table, args.replace)
        else:
            atomic_write_json(output, table)
    except OSError as exc:
        raise InputError(f"{output}: cannot be written ({exc.strerror or exc})", path=output) from None
    disagree = [d for d in decisions if not d["agree"]]
    for d in decisions:
        if d.get("untimed_tie"):
            print(f"autotune-guard-report: WARNING: kernel {d['kernel']} key ({d['key']}): a tie between "
                  f"{' and '.join(d['untimed_tie'])} with no timings to break it; chose {d['chosen']}, the lowest "
                  "static cost, which may be the slow one; record on more ranks, or pin the config you want",
                  file=sys.stderr)
    if args.json:
        dump({"table": output, "arch": arch, "rule": args.rule, "files": [s.path for s in used], "notes": notes,
              "entries": [{k: v for k, v in d.items() if k != "descriptor"} for d in decisions],
              "left_out_library": library, "disagreements": len(disagree)}, out)
    else:
        _print_merge(output, arch, args.rule, used, decisions, notes, out, getattr(args, "to_store", None))
    return 1 if args.check and disagree else 0


def _measured_of(decisions: list[dict], measured: dict) -> dict:
    """kernel -> key -> what the guard's selection measured, where a record kept it and the merge
    chose that selection's winner (``report show`` then says how the entry was chosen)."""
    found: dict = {}
    for d in decisions:
        runs = measured.get((d["kernel"], d["key"])) or []
        if d.get("pooled"):  # every process's measurement, the verdict over them beside
            said = {**runs[-1], "pooled": d["pooled"], tables.EARLIER: runs[:-1][-tables.EARLIER_KEPT:]}
        else:
            said = next((run for run in runs if run.get("winner") == d.get("chosen")), None)
        if said is not None:
            found.setdefault(d["kernel"], {})[d["key"]] = said
    return found


def _output_path(output: str) -> str:
    if output.endswith(("/", os.sep)) or os.path.isdir(output):
        raise InputError(f"{output}: -o names a directory; give the table file, like {os.path.join(output, 'sm90.json')}",
                         path=output)
    return output


def _records(args, output: str, tally) -> tuple[list[Source], str, list[str]]:
    """The record files to merge (of one arch, none partial unless allowed), the arch, and notes."""
    files = args.files if args.others else _own_when_mixed(args.files)
    sources = read_sources(files, ("record",), "merge", args.all_runs, fold=tally, jobs=args.jobs,
                           others=args.others)
    if os.path.abspath(output) in {os.path.abspath(s.path) for s in sources}:
        raise InputError(f"{output}: is one of the inputs; write the table elsewhere", path=output)
    partial = [s for s in sources if not s.complete]
    if partial and not args.allow_partial:
        first = partial[0]
        how = f"ended by {first.ended}" if first.document.get("ended") else f"complete=false: {first.ended}"
        more = f" (and {len(partial) - 1} more partial)" if len(partial) > 1 else ""
        raise InputError(f"{first.path}: is a partial record ({how}){more}; pass --allow-partial to merge what it holds",
                         path=first.path)
    used = [s for s in sources if s.entries]  # (an entry the library chose counts: it is named)
    if not used:
        raise InputError(f"{sources[0].path}: holds no autotune choices" if len(sources) == 1
                         else f"none of {', '.join(s.path for s in sources)} holds an autotune choice",
                         path=sources[0].path if len(sources) == 1 else None)
    archs: dict[str, list[str]] = {}
    for s in used:
        archs.setdefault(s.arch, []).append(s.path)
    arch = _arch(archs, args.arch, used[0].path)
    notes = [f"skipped {path}: arch {a}" for a, paths in sorted(archs.items()) if a != arch for path in paths]
    return [s for s in used if s.arch == arch], arch, notes


def _own_when_mixed(files: list[str]) -> list[str]:
    """Files named one by one (the shell's glob of a shared prefix) of other users, beside files of
    this user: named on stderr and left out, as the prefix form leaves them out (a later run another
    user put there would decide the table otherwise). Only files of others named: all read."""
    owners = {}
    for path in files:
        try:
            owners[path] = os.stat(path).st_uid if os.path.isfile(path) else None
        except OSError:
            owners[path] = None
    if os.geteuid() not in owners.values():
        return files
    theirs = [path for path in files if owners[path] not in (None, os.geteuid())]
    for path in theirs:
        print(f"python -m autotune_guard.report: note: left out {path}: a file of {user_name(owners[path])}, not of "
              "this user, named beside files of this user (a shell's glob of a shared prefix finds both); merge "
              "--others reads it", file=sys.stderr)
    return [path for path in files if path not in theirs]


def _arch(archs: dict[str, list[str]], wanted, first: str) -> str:
    """The one arch the records are for, or the one ``--arch`` names."""
    listing = "; ".join(f"{a}: {', '.join(paths)}" for a, paths in sorted(archs.items()))
    if wanted is None:
        if len(archs) > 1:
            raise InputError(f"{first}: the records are for several archs ({listing}); choose one with --arch", path=first)
        wanted = next(iter(archs))
    elif wanted not in archs:
        raise InputError(f"{first}: no record is for arch {wanted} (records: {listing})", path=first)
    if not wanted:
        named = archs[wanted][0] if wanted in archs else first
        raise InputError(f"{named}: the records name no arch; give --arch", path=named)
    return wanted


def _decide_all(keys: dict, rule: str, descriptors: dict, selections: dict) -> tuple[list[dict], dict, dict]:
    """One decision per (kernel, key) from its tally (and, with ``pooled``, its ``selections``), the
    table's kernels from them, and the keys left out because the kernel's library chose their config
    itself (per kernel)."""
    if rule == worst_case.RULE:  # one '*' per kernel and the keys that beat it (report/worst_case.py)
        return worst_case.decide_all(keys, descriptors, decide)
    decisions = []
    kernels: dict[str, dict] = {}
    library: dict[str, list[str]] = {}
    for (_, kernel, key), tally in keys.items():
        if not tally.voters:
            library.setdefault(kernel, []).append(key)
            continue
        known = {sig: descriptors[sig] for sig in (*tally.candidates, *tally.voters)}
        measured = {sig: list(values) for sig, values in tally.measured.items() if sig in known}
        runs = selections.get((kernel, key)) or []
        decision = _pooled(tally, known, runs) if rule == "pooled" and runs else None
        if decision is None:
            decision = decide(tally.votes(), known, measured, "fastest" if rule == "pooled" else rule)
            decision["why"] += "; no selection measured to pool" if rule == "pooled" else ""
        _refuse_foreign_winner(kernel, key, decision, tally)
        decisions.append({"kernel": kernel, "key": key, **decision})
        kernels.setdefault(kernel, {})[key] = decision["descriptor"]
    return decisions, kernels, library


def _pooled(tally, known: dict, runs: list) -> dict | None:
    """``--rule pooled``: the winner pooled over every process's selection (``core.pooling``), each
    process a cold draw (docs/winners.md), over the measurements of the versions most of them ran
    (timings of another Triton or torch never mix; the others are said); None where none compares."""
    runs, left_out = _comparable(runs)
    order = [sig for sig in (tally.raw_candidates or ()) if sig in known] or sorted(known)
    found = pooling.pool(runs, order)
    if found is None or found.winner not in known:
        return None
    margin = "" if found.margin is None else f", the next {found.margin * 100:.2f} % slower"
    why = f"pooled over {found.runs} process{'es' * (found.runs != 1)}: {found.how}{margin}{left_out}"
    return {**_tallied(tally.votes()), "chosen": found.winner, "descriptor": known[found.winner],
            "pooled": found.as_dict(), "why": why}


def _comparable(runs: list) -> tuple[list, str]:
    """The measurements that can be pooled together (well-formed, of the arch and versions most of
    them were taken on), and a phrase naming what was left out ('' where nothing was)."""
    clean = [found for found, _ in map(tables.clean_measured, runs)
             if found is not None and isinstance(found.get("candidates"), dict)]
    version = lambda run: tuple(str(run.get(name)) for name in ("arch", "triton", "torch"))  # noqa: E731
    counts = Counter(version(run) for run in clean)
    if not counts:
        return [], ""
    kept = counts.most_common(1)[0][0]
    pooled = [run for run in clean if version(run) == kept]
    others = sorted({f"triton {v[1]}, torch {v[2]}" for v in map(version, clean) if v != kept})
    said = []
    if len(clean) < len(runs):
        said.append(f"{len(runs) - len(clean)} malformed measurement(s)")
    if others:
        said.append(f"{len(clean) - len(pooled)} of other versions ({'; '.join(others)})")
    return pooled, f" (left out: {', '.join(said)})" if said else ""


def library_notes(library: dict[str, list[str]]) -> list[str]:
    """One line per kernel naming the keys whose config its library chose itself: the table
    leaves them to the library (which decides them the same way in every run, like fla's
    FLA_CACHE_MODE); a pinned run logs them as 'library' again."""
    notes = []
    for kernel, keys in library.items():
        shown = ", ".join(f"({k})" for k in keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
        notes.append(f"left out {len(keys)} key{'s' * (len(keys) != 1)} of kernel {kernel} whose config its library "
                     f"chose itself ('library'; the library decides them in every run, pinned runs leave them to it): "
                     f"{shown}")
    return notes


def _table(used: list[Source], arch: str, rule: str, kernels: dict) -> tuple[dict, list[str]]:
    """The table document, and notes on versions the records differ in."""
    versions, notes = _common_versions(used)
    packages = {}
    for s in used:
        for name, version in sorted((s.document.get("packages") or {}).items()):
            if version:
                packages.setdefault(name, version)
    return {
        "format": schema.TABLE_FORMAT, "arch": arch, **versions, "packages": packages,
        "source": {"files": [s.path for s in used], "rule": rule, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "by": f"{MADE_BY} merge"},
        "kernels": kernels,
    }, notes


def _print_merge(output, arch, rule, used, decisions, notes, out, to_store=None) -> None:
    kernels = len({d["kernel"] for d in decisions})
    print(f"wrote {output}: arch {arch}, rule {rule}, {kernels} kernel{'s' * (kernels != 1)}, "
          f"{len(decisions)} key{'s' * (len(decisions) != 1)} from {len(used)} record file{'s' * (len(used) != 1)}",
          file=out)
    for note in notes:
        print(f"  note: {note}", file=out)
    for d in decisions:
        if not d["agree"] or d["why"] != "unanimous":
            votes = ", ".join(f"{sig} x{n}" for sig, n in d["votes"].items())
            print(f"  {d['kernel']} key ({d['key']}): {d['chosen']} ({d['why']}; votes: {votes})", file=out)
    if os.path.basename(output) != f"{arch}.json" and not to_store:  # a store finds a table by its arch
        print(f"  note: pinned runs find it by AUTOTUNE_TABLE_PATH={output}; in a directory on that path it must "
              f"be named {arch}.json", file=out)


def _refuse_foreign_winner(kernel: str, key: str, decision: dict, tally) -> None:
    """A winner that is none of the kernel's candidates (a config an Autotuner subclass put into
    Triton's cache itself, not logged as the library's) would be a table entry no pinned run can match."""
    candidates = tally.candidates
    if candidates and decision["chosen"] not in candidates:
        chosen = decision["chosen"]
        raise InputError(f"{tally.first[chosen]}: kernel {kernel} key ({key}): the winner {chosen} "
                         f"(chosen as '{tally.how[chosen]}') is not among the kernel's {len(candidates)} candidates; "
                         "a pinned run could not use it", path=tally.first[chosen])


def decide(votes: dict[str, int], descriptors: dict[str, dict], measured: dict[str, list[float]], rule: str) -> dict:
    """One config for a (kernel, key) from what every rank chose (``votes``: signature -> ranks).

    ``vote``: the config most ranks chose; a tie goes to the faster config by the measured times
    across ranks, and without them to the lowest static cost (the order ``AUTOTUNE_ON_MISS=min_cost``
    uses, said as a warning), so the same files always give the same table.
    ``fastest``: the config with the lowest median, across ranks, of Triton's measured medians
    (``measured``: signature -> each rank's median); ties, and keys no rank timed, as for ``vote``.
    """
    result = _tallied(votes)
    fallback = None
    if rule == "fastest":
        finite = {sig: [m for m in ms if math.isfinite(m)] for sig, ms in measured.items()}
        scored = {sig: statistics.median(ms) for sig, ms in finite.items() if ms}  # NaN and inf never win
        if scored:
            best = min(scored.values())
            tied = [sig for sig, ms in scored.items() if ms == best]
            chosen = min(tied, key=lambda sig: static_cost(descriptors[sig]))
            return {**result, "chosen": chosen, "descriptor": descriptors[chosen], "median_ms": best,
                    "why": f"fastest median over {len(measured[chosen])} rank{'s' * (len(measured[chosen]) != 1)}"}
        fallback = "no timings: by vote"
    top = max(votes.values())
    tied = [sig for sig, n in votes.items() if n == top]
    chosen = min(tied, key=lambda sig: static_cost(descriptors[sig]))
    if len(tied) > 1 and not fallback:
        return {**result, **_tie(tied, top, descriptors, measured, chosen)}
    if fallback:
        why = fallback
    elif len(votes) == 1:
        why = "unanimous"
    else:
        why = f"majority {top} of {sum(votes.values())}"
    return {**result, "chosen": chosen, "descriptor": descriptors[chosen], "why": why}


def _tallied(votes: dict[str, int]) -> dict:
    """What every decision says of the votes: by count (then signature), and whether the ranks agree."""
    return {"votes": dict(sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))), "agree": len(votes) == 1}


def _tie(tied: list[str], top: int, descriptors: dict, measured: dict, by_cost: str) -> dict:
    """A vote tie goes to the tied config with the lowest median of the measured times across ranks;
    without timings of every tied config, to the lowest static cost, marked ``untimed_tie`` (said loudly)."""
    medians = {sig: statistics.median(measured[sig]) for sig in tied if measured.get(sig)}
    medians = {sig: ms for sig, ms in medians.items() if math.isfinite(ms)}
    at = f"tie of {len(tied)} at {top} vote{'s' * (top != 1)}"
    if len(medians) == len(tied):
        chosen = min(tied, key=lambda sig: (medians[sig], static_cost(descriptors[sig])))
        # each tied config with its median, in the votes' order (tied votes: by signature)
        times = ", ".join(f"{sig} {medians[sig]:.4g} ms" for sig in sorted(tied))
        return {"chosen": chosen, "descriptor": descriptors[chosen], "median_ms": medians[chosen],
                "why": f"{at}, broken by the faster median ({times})"}
    return {"chosen": by_cost, "descriptor": descriptors[by_cost], "untimed_tie": sorted(tied),
            "why": f"{at}, no timings: broken by static cost"}


def _common_versions(sources) -> tuple[dict, list[str]]:
    """The triton, torch and python versions the records were made with (the most common one,
    with a note where the records differ)."""
    versions, notes = {}, []
    for name in ("triton", "torch", "python"):
        seen = Counter((s.document.get("versions") or {}).get(name) for s in sources)
        seen.pop(None, None)
        if not seen:
            continue
        versions[name] = seen.most_common(1)[0][0]
        if len(seen) > 1:
            notes.append(f"the records were made with different {name} versions ({', '.join(sorted(seen))}); "
                         f"the table says {versions[name]}")
    return versions, notes


def add_parser(commands, common) -> None:
    merge = commands.add_parser("merge", parents=[common], help="merge record files into a table",
                                description="Merge per-rank record files into one table for AUTOTUNE_MODE=pinned.")
    merge.add_argument("files", nargs="+", metavar="FILE", help="record files (or AUTOTUNE_RECORD_PATH prefixes)")
    merge.add_argument("-o", "--output", required=True, metavar="TABLE.json",
                       help="the table to write (atomically); one that is there is merged into, losing nothing")
    merge.add_argument("--arch", help="the arch to build the table for (needed when the records mix archs)")
    merge.add_argument("--rule", default="vote", choices=("vote", "fastest", "pooled", worst_case.RULE),
                       help="vote: the config most ranks chose, a tie to the faster by the recorded timings, else to the "
                            "lowest static cost with a warning (default); "
                            "fastest: the lowest median of Triton's measured times across ranks; "
                            "pooled: the winner pooled over every process's selection (each timing relative to its "
                            "process's best; docs/winners.md); "
                            "worst-case: per kernel a '*' entry, the candidate with the smallest worst-case slowdown "
                            "over the timed keys, and a key's own entry where its best beats '*' by more than 5 % "
                            "(docs/report.md)")
    merge.add_argument("--replace", action="store_true",
                       help="where -o names a table that is there and the records decide an entry otherwise: replace "
                            "it (the old entry kept in its history); without it such a merge writes nothing")
    merge.add_argument("--allow-partial", action="store_true",
                       help="also merge records of ranks that did not exit normally (killed, a signal, an exception)")
    merge.add_argument("--others", action="store_true",
                       help="also merge the files of other users that a prefix, pattern or directory found, or that are "
                            "named beside files of yours (a shell's glob: in a shared place anyone can write a run "
                            "there); by default they are named on stderr and left out")
    merge.set_defaults(run=run)
