"""``python -m autotune_guard.report``: read record and choices files, merge records into a table,
compare two runs.

    python -m autotune_guard.report [show] FILES...              what each rank chose (or a table holds), per kernel and key
    python -m autotune_guard.report merge FILES... -o TABLE.json  records -> a table for pinned mode
    python -m autotune_guard.report diff RUN_A RUN_B             two runs' choices: same, changed, only in one
    python -m autotune_guard.report import [CACHE_DIR] --arch A -o TABLE.json   Triton's autotune disk cache -> a table

A FILE (and each side of ``diff``) is a file, a glob pattern, or the prefix given to
``AUTOTUNE_RECORD_PATH`` / ``AUTOTUNE_DIGEST_PATH`` (``runs/rec`` reads ``runs/rec.rank*.json``).
Human-readable output by default, ``--json`` for machines, ``--format markdown`` for a CI job
summary or a pull-request comment (show and diff).  Exit status: 0 done, 1 ranks or runs
disagree and ``--check`` was given, 2 unusable input (one line on stderr naming the file).

This is the CLI's own output, so it prints; it never imports Triton or torch.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from . import __version__, files, selection, triton_cache_import

COMMANDS = ("show", "merge", "diff", "import")
_KIND_OF = {files.RECORD_FORMAT: "record", files.CHOICES_FORMAT: "choices", files.TABLE_FORMAT: "table"}
# <prefix>.rank<N>.json, and <prefix>.rank<N>.<host>-<pid>.json: one file per process
_RANK_FILE = re.compile(r"\.rank(\d+)(?:\.[A-Za-z0-9_-]+)?\.json$")


class InputError(Exception):
    """Input the report cannot use; the message (one line) names the file."""


# --- reading ------------------------------------------------------------------------------------

@dataclass
class Source:
    """One input file."""

    path: str
    kind: str  # record | choices | table
    document: dict
    label: str = ""

    @property
    def rank(self):
        return self.document.get("rank")

    @property
    def complete(self) -> bool:
        return self.document.get("complete") is True

    @property
    def arch(self):
        return self.document.get("arch")


@dataclass
class Choice:
    """What one file says one rank chose for one (arch, kernel, key)."""

    source: Source
    arch: str
    kernel: str
    key: str
    signature: str
    how: str
    config: dict | None = None  # records only
    timings: dict | None = None  # signature -> Triton's measurements (median first)
    candidates: list = field(default_factory=list)  # declared configs, as descriptors


def expand(arg: str) -> list[str]:
    """The files one command-line argument names: itself, a glob's matches, or ``ARG.rank*.json``."""
    if os.path.exists(arg):
        return [arg]
    if glob.has_magic(arg):
        found = sorted(p for p in glob.glob(arg) if not os.path.isdir(p))
        if found:
            return _by_rank(found)
        raise InputError(f"{arg}: no file matches")
    found = [p for p in glob.glob(glob.escape(arg) + ".rank*.json") if _RANK_FILE.search(p[len(arg):])]
    if found:
        return _by_rank(found)
    raise InputError(f"{arg}: no such file, and no rank files {arg}.rank<N>[.<host>-<pid>].json")


def _by_rank(paths):
    def order(path):
        match = _RANK_FILE.search(path)
        return (_RANK_FILE.sub("", path), int(match.group(1)) if match else -1, path)

    return sorted(paths, key=order)


def read_sources(args, accept, command, all_runs=False) -> list[Source]:
    """Read every file the arguments name; refuse formats ``command`` cannot use, naming the file.
    Files of runs other than the latest are named on stderr and left out (unless ``all_runs``)."""
    paths = []
    for arg in args:
        for path in expand(arg):
            if path not in paths:
                paths.append(path)
    sources = []
    for path in paths:
        if os.path.isdir(path):
            raise InputError(f"{path}: is a directory; name its files ({os.path.join(path, '*.json')}) "
                             f"or the prefix the run used ({os.path.join(path, 'rec')})")
        try:
            document = files.read_document(path)
        except files.FileFormatError as exc:
            raise InputError(str(exc)) from None
        kind = _KIND_OF[document["format"]]
        if kind not in accept:
            raise InputError(f"{path}: is a {kind} file; {command} reads {' and '.join(k + ' files' for k in accept)}"
                             + (" (written under AUTOTUNE_RECORD_PATH)" if accept == ("record",) else ""))
        sources.append(Source(path, kind, document))
    if not all_runs:
        sources, left_out = latest_run(sources)
        for note in left_out:
            print(f"python -m autotune_guard.report: note: {note}", file=sys.stderr)
    _label(sources)
    return sources


def _last_written(source: Source) -> float:
    doc = source.document
    for name in ("updated", "started"):
        if isinstance(doc.get(name), (int, float)) and math.isfinite(doc[name]):
            return float(doc[name])
    try:
        return os.path.getmtime(source.path)
    except OSError:
        return 0.0


def latest_run(sources) -> tuple[list[Source], list[str]]:
    """The files of the latest run among ``sources`` (by run id; the run written to last), and a
    note naming each file of another run: an earlier run into the same prefix leaves files that
    must not be mixed in (a rank that no longer exists, a stale choice)."""
    tables = [s for s in sources if s.kind == "table"]  # a table belongs to no run
    sources = [s for s in sources if s.kind != "table"]
    runs: dict = {}
    for s in sources:
        runs.setdefault(s.document.get("run_id"), []).append(s)
    if len(runs) <= 1:
        return sources + tables, []
    newest = {run: max(_last_written(s) for s in group) for run, group in runs.items()}
    current = max(runs, key=lambda run: (newest[run], str(run)))
    notes = [f"left out {s.path}: it is of run {s.document.get('run_id') or '(no run id)'} (last written "
             f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(_last_written(s)))}), not of the latest run "
             f"{current or '(no run id)'}; --all-runs reads every run" for s in sources if s.document.get("run_id") != current]
    return [s for s in sources if s.document.get("run_id") == current] + tables, notes


def _label(sources) -> None:
    """``rank N`` where that names one file; ``rank N pid P`` where a rank has several processes'
    files; else the file's name."""
    files_of_rank = Counter(s.rank for s in sources)
    process_ids = Counter((s.rank, s.document.get("pid"), s.kind) for s in sources)
    unique_names = len({os.path.basename(s.path) for s in sources}) == len(sources)
    for s in sources:
        if s.kind == "table":
            s.label = f"table {os.path.basename(s.path)}"
        elif files_of_rank[s.rank] == 1:
            s.label = f"rank {s.rank}"
        elif s.document.get("pid") is not None and process_ids[(s.rank, s.document["pid"], s.kind)] == 1:
            s.label = f"rank {s.rank} pid {s.document['pid']}"
        else:
            s.label = os.path.basename(s.path) if unique_names else s.path


def choices_of(source: Source) -> list[Choice]:
    doc = source.document
    if source.kind == "table":
        return table_choices(source)
    if source.kind == "record":
        found = []
        for kernel, entries in doc["kernels"].items():
            for key, entry in entries.items():
                config = _full(entry["config"])
                # The signature is recomputed, not read: it is what merge and diff compare.
                found.append(Choice(source, doc["arch"], kernel, key, selection.signature(config),
                                    str(entry.get("how", "timed")), config, entry.get("timings"),
                                    [_full(c) for c in entry.get("candidates", [])]))
        return found
    found = []
    for entry, value in doc["log"].items():
        arch, kernel, key = entry.split("|", 2)
        signature, _, how = value.rpartition(";")
        found.append(Choice(source, arch, kernel, key, signature, how))
    return found


def table_choices(source: Source) -> list[Choice]:
    """A table's entries as choices (``how`` is ``table``), so ``show`` lays them beside what ranks
    chose.  A field the table leaves out is left out of the signature too (Triton's default)."""
    doc = source.document
    return [Choice(source, doc["arch"], kernel, key, selection.signature(_full(desc)), "table")
            for kernel, entries in doc["kernels"].items() for key, desc in entries.items()]


def _full(desc: dict) -> dict:
    """A stored config with its ``kwargs`` present (a file may leave an empty one out)."""
    return {**desc, "kwargs": dict(desc.get("kwargs", {}))}


def grouped(sources) -> dict[tuple, list[Choice]]:
    """Choices per (arch, kernel, key).  A rank's files are combined: where several processes of
    one rank (a parent and the children that chose too) made the same choice it counts once
    (the copy with timings kept), so a rank never votes twice."""
    groups: dict[tuple, dict] = {}
    for source in sources:
        for choice in choices_of(source):
            kept = groups.setdefault((choice.arch, choice.kernel, choice.key), {})
            same = (choice.source.kind, choice.source.rank, choice.signature)
            if same not in kept or (choice.timings and not kept[same].timings):
                kept[same] = choice
    return dict(sorted(((ident, list(kept.values())) for ident, kept in groups.items()),
                       key=lambda item: tuple(_natural(part) for part in item[0])))


def _natural(text: str):
    """Sort ``2,float`` before ``10,float``."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part]


# --- timings ------------------------------------------------------------------------------------

def median_of(measured):
    """Triton's timer returns ``[p50, p20, p80]`` (or one number): the median comes first."""
    value = measured[0] if isinstance(measured, list) else measured
    return float(value)


def _descriptors(choice: Choice) -> dict[str, dict]:
    found = {selection.signature(c): c for c in choice.candidates}
    if choice.config is not None:
        found.setdefault(choice.signature, choice.config)
    return found


def min_cost_signature(choice: Choice):
    """The candidate pinned mode's ``min_cost`` would run: among those Triton timed (the ones left
    after the kernel's own pruning) when timings are known, else among the declared ones."""
    descriptors = _descriptors(choice)
    if choice.timings:
        descriptors = {sig: d for sig, d in descriptors.items() if sig in choice.timings}
    if not descriptors:
        return None
    return min(descriptors, key=lambda sig: selection.static_cost(descriptors[sig]))


def timing_summary(choice: Choice) -> dict:
    """The winner's median, the spread over the timed candidates, and what min-cost would cost."""
    summary = {"winner_ms": None, "fastest_ms": None, "slowest_ms": None, "timed": 0,
               "min_cost": min_cost_signature(choice), "min_cost_ms": None, "min_cost_slowdown": None,
               "min_cost_failed": False}
    if not choice.timings:
        return summary
    medians = {sig: median_of(m) for sig, m in choice.timings.items()}
    finite = [m for m in medians.values() if math.isfinite(m)]
    summary["timed"] = len(medians)
    summary["fastest_ms"] = min(finite) if finite else None
    summary["slowest_ms"] = max(finite) if finite else None
    winner = medians.get(choice.signature)
    summary["winner_ms"] = winner
    if summary["min_cost"] in medians:
        cost = medians[summary["min_cost"]]
        if not math.isfinite(cost):  # Triton's time for a candidate that failed to compile or run
            summary["min_cost_failed"] = True
        else:
            summary["min_cost_ms"] = cost
            if winner is not None and winner > 0 and math.isfinite(winner):
                summary["min_cost_slowdown"] = cost / winner
    return summary


# --- show ---------------------------------------------------------------------------------------

def analyse(sources) -> list[dict]:
    rows = []
    for (arch, kernel, key), choices in grouped(sources).items():
        configs = Counter(c.signature for c in choices)
        entries = []
        for c in choices:
            entries.append({"file": c.source.path, "label": c.source.label, "rank": c.source.rank, "kind": c.source.kind,
                            "config": c.signature, "how": c.how, **timing_summary(c)})
        winners = [e["winner_ms"] for e in entries if e["winner_ms"] is not None]
        rows.append({"arch": arch, "kernel": kernel, "key": key, "agree": len(configs) == 1,
                     "configs": dict(configs.most_common()), "choices": entries,
                     "winner_ms_range": [min(winners), max(winners)] if winners else None})
    return rows


def _describe_source(s: Source) -> str:
    doc = s.document
    if s.kind == "table":
        return f"  {s.path}: {_describe_table(doc)}"
    parts = [s.kind, f"rank {s.rank}" + (f" of {doc['world_size']}" if isinstance(doc.get("world_size"), int) else "")]
    if s.kind == "record":
        parts.append(f"arch {doc['arch']}")
        count = sum(len(e) for e in doc["kernels"].values())
        versions = doc.get("versions") or {}
        if versions.get("triton"):
            parts.append(f"triton {versions['triton']}")
    else:
        count = len(doc["log"])
        parts.append(f"digest {doc['digest']}")
    parts.append(f"{count} choices")
    if s.complete:
        parts.append("complete")
    elif isinstance(doc.get("ended"), str):
        parts.append(f"PARTIAL (ended by {doc['ended']})")
    else:
        parts.append("PARTIAL (the rank did not exit normally, or is still running)")
    return f"  {s.path}: " + ", ".join(parts)


def _describe_table(doc: dict) -> str:
    count = sum(len(e) for e in doc["kernels"].values())
    parts = [f"table, arch {doc['arch']}"]
    parts += [f"{name} {doc[name]}" for name in ("triton", "torch") if isinstance(doc.get(name), str)]
    parts.append(f"{count} entr{'y' if count == 1 else 'ies'}")
    source = doc.get("source")
    if isinstance(source, dict) and isinstance(source.get("files"), list):
        parts.append(f"merged by {source.get('rule', '?')} from {len(source['files'])} file"
                     f"{'s' * (len(source['files']) != 1)}")
    return ", ".join(parts)


def _ms(value) -> str:
    if value is None:
        return "?"
    return "failed" if not math.isfinite(value) else f"{value:.4g} ms"


def print_show(sources, rows, out) -> None:
    print(f"{len(sources)} file{'s' * (len(sources) != 1)}:", file=out)
    for s in sources:
        print(_describe_source(s), file=out)
    current = None
    for row in rows:
        if (row["arch"], row["kernel"]) != current:
            current = (row["arch"], row["kernel"])
            print(f"\n{row['kernel']}  [arch {row['arch']}]", file=out)
        n = len(row["choices"])
        verdict = "agree" if row["agree"] else f"DISAGREE: {len(row['configs'])} configs (a, b, ...: most chosen first)"
        print(f"  key ({row['key']}): {verdict}, {n} file{'s' * (n != 1)}", file=out)
        width = max(len(e["label"]) for e in row["choices"])
        ordered = sorted(row["configs"], key=lambda sig: (-row["configs"][sig], sig))
        letters = {sig: chr(ord("a") + i) if i < 26 else "+" for i, sig in enumerate(ordered)}
        for e in row["choices"]:
            mark = " " if row["agree"] else letters[e["config"]]
            line = f"   {mark} {e['label']:<{width}}  {e['config']}  [{e['how']}]"
            if e["timed"]:
                line += f"  {_ms(e['winner_ms'])} (fastest..slowest of {e['timed']} timed: " \
                        f"{_ms(e['fastest_ms'])}..{_ms(e['slowest_ms'])})"
            print(line, file=out)
        if row["winner_ms_range"] and len(row["choices"]) > 1:
            lo, hi = row["winner_ms_range"]
            print(f"    winners' medians across files: {_ms(lo)}..{_ms(hi)}", file=out)
        costs = [e for e in row["choices"] if e["min_cost"]]
        if costs:
            names = sorted({e["min_cost"] for e in costs})
            known = [f"failed on {e['label']}" if e["min_cost_failed"] else f"{e['min_cost_slowdown']:.2f}x on {e['label']}"
                     for e in costs if e["min_cost_failed"] or e["min_cost_slowdown"] is not None]
            text = ", ".join(known) if known else "not measured"
            print(f"    min-cost {' / '.join(names)}: {text}", file=out)
    disagree = sum(not r["agree"] for r in rows)
    kernels = len({(r["arch"], r["kernel"]) for r in rows})
    print(f"\n{kernels} kernel{'s' * (kernels != 1)}, {len(rows)} key{'s' * (len(rows) != 1)}, "
          f"{disagree} disagreement{'s' * (disagree != 1)}", file=out)


def cmd_show(args, out) -> int:
    sources = read_sources(args.files, ("record", "choices", "table"), "show", args.all_runs)
    rows = analyse(sources)
    disagree = sum(not r["agree"] for r in rows)
    if args.json or args.format == "json":
        _dump({"files": [_source_json(s) for s in sources], "keys": rows, "disagreements": disagree}, out)
    elif args.format == "markdown":
        print_show_markdown(sources, rows, out)
    else:
        print_show(sources, rows, out)
    return 1 if args.check and disagree else 0


# --- markdown (a CI job summary, a pull-request comment) -----------------------------------------

def _md(text) -> str:
    """Text for a markdown table cell, as code."""
    return "`" + str(text).replace("`", "'").replace("|", "\\|") + "`"


def _labels(labels: list[str], limit: int = 8) -> str:
    return ", ".join(labels[:limit]) + (f" and {len(labels) - limit} more" if len(labels) > limit else "")


def print_show_markdown(sources, rows, out) -> None:
    """Disagreements first, in a table; the keys where every file agrees folded away below them."""
    disagree = [r for r in rows if not r["agree"]]
    agree = [r for r in rows if r["agree"]]
    kernels = len({(r["arch"], r["kernel"]) for r in rows})
    if len(sources) == 1:  # nothing to compare: what the one file holds
        verdict = f"{len(rows)} kernel/key entr{'y' if len(rows) == 1 else 'ies'} in {os.path.basename(sources[0].path)}"
    elif disagree:
        verdict = f"{len(disagree)} of {len(rows)} kernel/key entries DISAGREE"
    else:
        verdict = f"all {len(rows)} kernel/key entries agree across {len(sources)} files"
    print(f"### autotune_guard: {verdict}\n", file=out)
    print(f"{kernels} kernel{'s' * (kernels != 1)}, {len(rows)} key{'s' * (len(rows) != 1)}, "
          f"{len(sources)} file{'s' * (len(sources) != 1)}:\n", file=out)
    for s in sources:
        print(f"- {_describe_source(s).strip()}", file=out)
    if disagree:
        print("\n| kernel | key | arch | what each file chose |\n|---|---|---|---|", file=out)
        for r in disagree:
            by_config: dict[str, list[str]] = {}
            for e in r["choices"]:
                by_config.setdefault(e["config"], []).append(e["label"])
            chosen = "<br>".join(f"{_md(sig)}: {_labels(labels)}"
                                 for sig, labels in sorted(by_config.items(), key=lambda kv: (-len(kv[1]), kv[0])))
            print(f"| {_md(r['kernel'])} | {_md(r['key'])} | {r['arch']} | {chosen} |", file=out)
    if agree:
        if len(sources) > 1:
            print(f"\n<details><summary>{len(agree)} kernel/key entr{'y' if len(agree) == 1 else 'ies'} where every "
                  "file agrees</summary>", file=out)
        print("\n| kernel | key | arch | config | files |\n|---|---|---|---|---|", file=out)
        for r in agree:
            print(f"| {_md(r['kernel'])} | {_md(r['key'])} | {r['arch']} | {_md(next(iter(r['configs'])))} | "
                  f"{len(r['choices'])} |", file=out)
        if len(sources) > 1:
            print("\n</details>", file=out)


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
            status = r["status"] + "".join(f", {n.upper()}'s ranks disagree" for n in "ab" if r[f"{n}_ranks_disagree"])
            a, b = ("<br>".join(_md(sig) for sig in r[n]) or "—" for n in "ab")
            print(f"| {_md(r['kernel'])} | {_md(r['key'])} | {r['arch']} | {status} | {a} | {b} |", file=out)


def _source_json(s: Source) -> dict:
    doc = s.document
    return {"file": s.path, "kind": s.kind, "label": s.label, "rank": s.rank, "world_size": doc.get("world_size"),
            "arch": doc.get("arch"), "complete": s.complete, "versions": doc.get("versions"), "digest": doc.get("digest")}


# --- merge --------------------------------------------------------------------------------------

def cmd_merge(args, out) -> int:
    output = args.output
    if output.endswith(("/", os.sep)) or os.path.isdir(output):
        raise InputError(f"{output}: -o names a directory; give the table file, like {os.path.join(output, 'sm90.json')}")
    sources = read_sources(args.files, ("record",), "merge", args.all_runs)
    if os.path.abspath(output) in {os.path.abspath(s.path) for s in sources}:
        raise InputError(f"{output}: is one of the inputs; write the table elsewhere")
    partial = [s for s in sources if not s.complete]
    if partial and not args.allow_partial:
        raise InputError(f"{partial[0].path}: is a partial record (complete=false: its rank was killed or is still "
                         "running); pass --allow-partial to merge what it holds")
    used = [s for s in sources if s.document["kernels"]]
    if not used:
        raise InputError(f"{sources[0].path}: holds no autotune choices" if len(sources) == 1
                         else f"none of {', '.join(s.path for s in sources)} holds an autotune choice")
    archs = {}
    for s in used:
        archs.setdefault(s.arch, []).append(s.path)
    if args.arch is None:
        if len(archs) > 1:
            listing = "; ".join(f"{arch}: {', '.join(paths)}" for arch, paths in sorted(archs.items()))
            raise InputError(f"{used[0].path}: the records are for several archs ({listing}); choose one with --arch")
        arch = next(iter(archs))
    else:
        arch = args.arch
        if arch not in archs:
            listing = "; ".join(f"{a}: {', '.join(paths)}" for a, paths in sorted(archs.items()))
            raise InputError(f"{used[0].path}: no record is for arch {arch} (records: {listing})")
    if not arch:
        raise InputError(f"{archs[arch][0] if arch in archs else used[0].path}: the records name no arch; give --arch")
    notes = [f"skipped {path}: arch {a}" for a, paths in sorted(archs.items()) if a != arch for path in paths]
    used = [s for s in used if s.arch == arch]

    decisions = []
    kernels: dict[str, dict] = {}
    for (_, kernel, key), choices in grouped(used).items():
        decision = decide(choices, args.rule)
        _refuse_foreign_winner(kernel, key, decision, choices)
        decisions.append({"kernel": kernel, "key": key, **decision})
        kernels.setdefault(kernel, {})[key] = decision["descriptor"]

    versions, version_notes = _common_versions(used)
    notes += version_notes
    packages = {}
    for s in used:
        for name, version in sorted((s.document.get("packages") or {}).items()):
            if version:
                packages.setdefault(name, version)
    table = {
        "format": files.TABLE_FORMAT, "arch": arch, **versions, "packages": packages,
        "source": {"files": [s.path for s in used], "rule": args.rule, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "by": f"autotune_guard {__version__} report merge"},
        "kernels": kernels,
    }
    try:
        files.atomic_write_json(output, table)
    except OSError as exc:
        raise InputError(f"{output}: cannot be written ({exc.strerror or exc})") from None
    disagree = [d for d in decisions if not d["agree"]]
    if args.json:
        _dump({"table": output, "arch": arch, "rule": args.rule, "files": [s.path for s in used], "notes": notes,
               "entries": [{k: v for k, v in d.items() if k != "descriptor"} for d in decisions],
               "disagreements": len(disagree)}, out)
    else:
        print(f"wrote {output}: arch {arch}, rule {args.rule}, {len(kernels)} kernel{'s' * (len(kernels) != 1)}, "
              f"{len(decisions)} key{'s' * (len(decisions) != 1)} from {len(used)} record file{'s' * (len(used) != 1)}",
              file=out)
        for note in notes:
            print(f"  note: {note}", file=out)
        for d in decisions:
            if not d["agree"] or d["why"] != "unanimous":
                votes = ", ".join(f"{sig} x{n}" for sig, n in d["votes"].items())
                print(f"  {d['kernel']} key ({d['key']}): {d['chosen']} ({d['why']}; votes: {votes})", file=out)
        if os.path.basename(output) != f"{arch}.json":
            print(f"  note: pinned runs find it by AUTOTUNE_TABLE_PATH={output}; in a directory on that path it must "
                  f"be named {arch}.json", file=out)
    return 1 if args.check and disagree else 0


def _refuse_foreign_winner(kernel: str, key: str, decision: dict, choices: list[Choice]) -> None:
    """A winner that is none of the kernel's candidates (a config an Autotuner subclass put into
    Triton's cache itself, like fla's) would be a table entry no pinned run can match."""
    candidates = {selection.signature(c) for choice in choices for c in choice.candidates}
    if candidates and decision["chosen"] not in candidates:
        chooser = next(c for c in choices if c.signature == decision["chosen"])
        raise InputError(f"{chooser.source.path}: kernel {kernel} key ({key}): the winner {decision['chosen']} "
                         f"(chosen as '{chooser.how}') is not among the kernel's {len(candidates)} candidates; "
                         "a pinned run could not use it")


def decide(choices: list[Choice], rule: str) -> dict:
    """One config for a (kernel, key) from what every rank chose.

    ``vote``: the config most ranks chose; a tie goes to the lowest static cost (the order
    ``AUTOTUNE_ON_MISS=min_cost`` uses), so the same files always give the same table.
    ``fastest``: the config with the lowest median, across ranks, of Triton's measured medians;
    ties, and keys no rank timed, as for ``vote``.
    """
    votes = Counter(c.signature for c in choices)
    descriptors = {}
    for c in choices:
        descriptors.update({sig: d for sig, d in _descriptors(c).items() if sig not in descriptors})
    result = {"votes": dict(sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))), "agree": len(votes) == 1}
    if rule == "fastest":
        measured: dict[str, list[float]] = {}
        for c in choices:
            for sig, m in (c.timings or {}).items():
                if sig in descriptors:
                    measured.setdefault(sig, []).append(median_of(m))
        scored = {sig: statistics.median(ms) for sig, ms in measured.items()}
        scored = {sig: ms for sig, ms in scored.items() if math.isfinite(ms)}
        if scored:
            best = min(scored.values())
            tied = [sig for sig, ms in scored.items() if ms == best]
            chosen = min(tied, key=lambda sig: selection.static_cost(descriptors[sig]))
            return {**result, "chosen": chosen, "descriptor": descriptors[chosen], "median_ms": best,
                    "why": f"fastest median over {len(measured[chosen])} rank{'s' * (len(measured[chosen]) != 1)}"}
        fallback = "no timings: by vote"
    else:
        fallback = None
    top = max(votes.values())
    tied = [sig for sig, n in votes.items() if n == top]
    chosen = min(tied, key=lambda sig: selection.static_cost(descriptors[sig]))
    if fallback:
        why = fallback
    elif len(votes) == 1:
        why = "unanimous"
    elif len(tied) == 1:
        why = f"majority {top} of {len(choices)}"
    else:
        why = f"tie of {len(tied)} at {top} vote{'s' * (top != 1)}, broken by static cost"
    return {**result, "chosen": chosen, "descriptor": descriptors[chosen], "why": why}


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


# --- diff ---------------------------------------------------------------------------------------

def cmd_diff(args, out) -> int:
    sides = [read_sources([side], ("record", "choices"), "diff", args.all_runs) for side in (args.a, args.b)]
    groups = [grouped(side) for side in sides]
    rows = []
    for ident in sorted(set(groups[0]) | set(groups[1]), key=lambda i: tuple(_natural(p) for p in i)):
        configs = [sorted({c.signature for c in g.get(ident, [])}) for g in groups]
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
        arch, kernel, key = ident
        rows.append({"arch": arch, "kernel": kernel, "key": key, "status": status, "a": configs[0], "b": configs[1],
                     "a_ranks_disagree": len(configs[0]) > 1, "b_ranks_disagree": len(configs[1]) > 1})
    counts = Counter(r["status"] for r in rows)
    failing = sum(1 for r in rows if r["status"] == "changed" or r["a_ranks_disagree"] or r["b_ranks_disagree"])
    # Choices files carry a digest of the whole log: equal digests, equal choices, rank by rank
    # (a rank whose processes left several files: the digest of their combined log).
    digests = [_rank_digests(side) for side in sides]
    compared = {rank: {"a": digests[0][rank], "b": digests[1][rank], "same": digests[0][rank] == digests[1][rank]}
                for rank in sorted(set(digests[0]) & set(digests[1]))}
    if args.format == "markdown":
        print_diff_markdown(sides, rows, counts, failing, out)
    elif args.json or args.format == "json":
        _dump({"a": [s.path for s in sides[0]], "b": [s.path for s in sides[1]], "keys": rows,
               "counts": dict(counts), "digests": {str(rank): d for rank, d in compared.items()},
               "disagreements": failing}, out)
    else:
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
        print(f"{counts['same']} same, {counts['changed']} changed, {counts['only in A']} only in A, "
              f"{counts['only in B']} only in B" + (f", {counts['same, ranks disagree']} where ranks disagree"
                                                     if counts['same, ranks disagree'] else ""), file=out)
    return 1 if args.check and failing else 0


def _rank_digests(sources) -> dict:
    logs: dict = {}
    for s in sources:
        if s.kind == "choices":
            logs.setdefault(s.rank, []).append(s.document)
    digests = {}
    for rank, docs in logs.items():
        if len(docs) == 1:
            digests[rank] = docs[0]["digest"]
        else:
            from .choices import digest_of

            digests[rank] = digest_of({k: v for doc in docs for k, v in doc["log"].items()})
    return digests


# --- plumbing -----------------------------------------------------------------------------------

def _plain(value):
    """JSON without Infinity/NaN (a failed candidate's time), which strict parsers refuse."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _dump(document, out) -> None:
    json.dump(_plain(document), out, indent=1, sort_keys=False, allow_nan=False)
    out.write("\n")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m autotune_guard.report",
        description="Read autotune_guard record and choices files; merge records into a table; compare runs. "
                    "FILES are files, glob patterns, or the prefix given to AUTOTUNE_RECORD_PATH/AUTOTUNE_DIGEST_PATH "
                    "(runs/rec reads runs/rec.rank*.json). Exit status: 0 done, 1 disagreement with --check, "
                    "2 unusable input.")
    commands = top.add_subparsers(dest="command", metavar="{show,merge,diff,import}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--check", action="store_true", help="exit 1 when ranks or runs disagree (a CI gate)")
    common.add_argument("--all-runs", action="store_true",
                        help="read the files of every run the arguments name; by default files of runs other than "
                             "the latest (by the run id each file carries) are named on stderr and left out")

    show = commands.add_parser("show", parents=[common], help="what each rank chose, per kernel and key (the default)",
                               description="Per kernel and key: what each rank chose (or a table holds), "
                                           "disagreements, the spread of measured times, and the slowdown of the "
                                           "min-cost config vs the winner.")
    show.add_argument("files", nargs="+", metavar="FILE", help="record, choices or table files (or prefixes)")
    show.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                      help="markdown: a CI job summary or a pull-request comment (--json is --format json)")
    show.set_defaults(run=cmd_show)

    merge = commands.add_parser("merge", parents=[common], help="merge record files into a table",
                                description="Merge per-rank record files into one table for AUTOTUNE_MODE=pinned.")
    merge.add_argument("files", nargs="+", metavar="FILE", help="record files (or AUTOTUNE_RECORD_PATH prefixes)")
    merge.add_argument("-o", "--output", required=True, metavar="TABLE.json", help="the table to write (atomically)")
    merge.add_argument("--arch", help="the arch to build the table for (needed when the records mix archs)")
    merge.add_argument("--rule", choices=("vote", "fastest"), default="vote",
                       help="vote: the config most ranks chose, ties to the lowest static cost (default); "
                            "fastest: the lowest median of Triton's measured times across ranks")
    merge.add_argument("--allow-partial", action="store_true",
                       help="also merge records of ranks that did not exit normally (complete=false)")
    merge.set_defaults(run=cmd_merge)

    diff = commands.add_parser("diff", parents=[common], help="compare two runs' choices",
                               description="Per kernel and key: same, changed, only in A, only in B. Each run is a "
                                           "file, a glob pattern or a rank-file prefix.")
    diff.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                      help="markdown: a pull-request comment (--json is --format json)")
    diff.add_argument("a", metavar="RUN_A")
    diff.add_argument("b", metavar="RUN_B")
    diff.set_defaults(run=cmd_diff)

    triton_cache_import.add_parser(commands)
    commands.choices["import"].set_defaults(run=cmd_import)
    return top


def cmd_import(args, out) -> int:
    """Triton's autotune disk cache -> a table (``triton_cache_import``)."""
    try:
        return triton_cache_import.run(args, out)
    except triton_cache_import.CacheError as exc:
        raise InputError(str(exc)) from None


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help"):
        argv.insert(0, "show")  # `report FILES...`
    args = parser().parse_args(argv)
    if not getattr(args, "run", None):
        parser().print_usage(sys.stderr)
        print("python -m autotune_guard.report: error: give a command (show, merge, diff) or files", file=sys.stderr)
        return 2
    try:
        return args.run(args, sys.stdout)
    except InputError as exc:
        message = " ".join(str(exc).split())  # one line, whatever a file's keys hold
        if len(message) > 1000:
            message = message[:1000] + " ..."
        print(f"python -m autotune_guard.report: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `... | head`: the reader left; nothing is wrong
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
