"""``report show``: per kernel and key, what each rank chose (or a table holds), disagreements,
the spread of measured times, the min-cost config's slowdown; as text, JSON or markdown."""

from __future__ import annotations

import math
import os
from collections import Counter
from functools import partial

from . import html, python_out, table_show
from ..core.model import provenance_text
from ..core.numerics import numerics_text
from ..core.switches import shown
from ..core.tables import PROVENANCE
from ..core.terminal import on_one_line
from .output import dump_streamed
from .reading import Source, label_list, md, read_sources, source_json
from .rows import Rows, details_reader


def analyse(grouped_entries):
    """One dict per key of ``Rows.grouped`` (key by key: never every key's rows at once)."""
    for (arch, kernel, key), entries in grouped_entries:
        configs = Counter(e["config"] for e in entries)
        winners = [e["winner_ms"] for e in entries if e["winner_ms"] is not None]
        yield {"arch": arch, "kernel": kernel, "key": key, "agree": len(configs) == 1,
               "library_decided": any(e["how"] == "library" for e in entries),
               "configs": dict(configs.most_common()), "choices": entries,
               "winner_ms_range": [min(winners), max(winners)] if winners else None}


def _describe_source(s: Source) -> str:
    doc = s.document
    if s.kind == "table":
        return f"  {s.path}: {_describe_table(doc, s.entries)}"
    parts = [s.kind, f"rank {s.rank}" + (f" of {doc['world_size']}" if isinstance(doc.get("world_size"), int) else "")]
    if s.kind == "record":
        parts.append(f"arch {doc['arch']}")
        count = s.entries
        versions = doc.get("versions") or {}
        if versions.get("triton"):
            parts.append(f"triton {versions['triton']}")
    else:
        count = s.entries
        parts.append(f"digest {doc['digest']}")
    parts.append(f"{count} choices")
    parts += _settings(doc)
    if s.complete:
        parts.append("complete")
    elif isinstance(doc.get("ended"), str):
        parts.append(f"PARTIAL (ended by {doc['ended']})")
    else:
        parts.append("PARTIAL (the rank did not exit normally, or is still running)")
    if s.journal:
        parts.append(f"with its journal {os.path.basename(s.journal)}")
    return f"  {s.path}: " + ", ".join(parts)


def _settings(doc: dict) -> list[str]:
    """What the process ran under beside its configs: its FP fusion, the libraries' switches in force."""
    found = []
    if isinstance(doc.get("numerics"), dict):
        found.append(on_one_line(numerics_text(doc["numerics"])))
    if isinstance(doc.get("switches"), dict) and doc["switches"]:
        found.append(f"switches {shown(doc['switches'])}")
    return found


def _describe_table(doc: dict, count: int) -> str:
    parts = [f"table, arch {doc['arch']}"]
    parts += [f"{name} {doc[name]}" for name in ("triton", "torch") if isinstance(doc.get(name), str)]
    parts.append(f"{count} entr{'y' if count == 1 else 'ies'}")
    source = doc.get("source")
    if isinstance(source, dict) and isinstance(source.get("files"), list):
        parts.append(f"merged by {source.get('rule', '?')} from {len(source['files'])} file"
                     f"{'s' * (len(source['files']) != 1)}")
    superseded = table_show.superseded_text(doc)
    return ", ".join(parts + ([superseded] if superseded else []))


def _ms(value) -> str:
    if value is None:
        return "?"
    return "failed" if not math.isfinite(value) else f"{value:.4g} ms"


LIST_FILES_UP_TO = 16  # past it, a key's files are grouped by config (--format json lists every file)


def _span(lo, hi) -> str:
    return _ms(lo) if lo == hi else f"{_ms(lo)}..{_ms(hi)}"


def print_show(sources, rows, provenance, counts, out) -> None:
    """The text report: the files, then key by key what each file chose (under a table's entry,
    what the table knows of it: ``table_show.entry_lines``)."""
    print(f"{len(sources)} file{'s' * (len(sources) != 1)}:", file=out)
    tables = table_show.table_documents(sources)
    for s in sources:
        print(_describe_source(s), file=out)
    current = None
    for row in rows:
        if (row["arch"], row["kernel"]) != current:
            current = (row["arch"], row["kernel"])
            print(f"\n{row['kernel']}  [arch {row['arch']}]", file=out)
            print("".join(f"{line}\n" for line in provenance_lines(provenance, row["kernel"])), end="", file=out)
        n = len(row["choices"])
        verdict = "agree" if row["agree"] else f"DISAGREE: {len(row['configs'])} configs (a, b, ...: most chosen first)"
        library = "  [library-decided: its library chose the config itself; merge leaves it out of tables]" \
            if row["library_decided"] else ""
        print(f"  key ({row['key']}): {verdict}, {n} file{'s' * (n != 1)}{library}", file=out)
        ordered = sorted(row["configs"], key=lambda sig: (-row["configs"][sig], sig))
        marks = {sig: " " if row["agree"] else chr(ord("a") + i) if i < 26 else "+" for i, sig in enumerate(ordered)}
        below = partial(table_show.entry_lines, tables, row)
        if n <= LIST_FILES_UP_TO:
            _print_each_file(row["choices"], marks, out, below)
        else:
            _print_files_by_config(row["choices"], ordered, marks, out, below)
        if row["winner_ms_range"] and n > 1 and not (row["agree"] and n > LIST_FILES_UP_TO):  # (said on its line)
            lo, hi = row["winner_ms_range"]
            print(f"    winners' medians across files: {_ms(lo)}..{_ms(hi)}", file=out)
        _print_min_cost(row["choices"], n <= LIST_FILES_UP_TO, out)
    keys, kernels, disagree, *fell = counts
    fell = fell[0] if fell else 0  # a caller may pass no fallback count
    print(f"\n{kernels} kernel{'s' * (kernels != 1)}, {keys} key{'s' * (keys != 1)}, "
          f"{disagree} disagreement{'s' * (disagree != 1)}{fallback_text(fell, ', ')}", file=out)


def fallback_text(fell: int, lead: str) -> str:
    """The choices a fallback made, counted, so that none passes for an ordinary pinned one."""
    return (f"{lead}{fell} fallback{'s' * (fell != 1)} (keys the tables lacked, run by the AUTOTUNE_ON_MISS rule: "
            "often several times slower)") if fell else ""


def _print_each_file(choices, marks, out, below) -> None:
    width = max(len(e["label"]) for e in choices)
    for e in choices:
        line = f"   {marks[e['config']]} {e['label']:<{width}}  {e['config']}  [{e['how']}]"
        line += f"  {e['added_by']}" if e["added_by"] else ""
        line += f"  [{e['verdict']}]" if e.get("verdict") else ""
        if e["timed"]:
            line += f"  {_ms(e['winner_ms'])} (fastest..slowest of {e['timed']} timed: " \
                    f"{_ms(e['fastest_ms'])}..{_ms(e['slowest_ms'])})"
        print(line, file=out)
        print("".join(f"{said}\n" for said in below(e)), end="", file=out)


def _print_files_by_config(choices, ordered, marks, out, below) -> None:
    """One line a config: how many files chose it, how, their winners' medians, the first labels
    (a table's entry keeps a line of its own: who added it)."""
    by_config: dict[str, list] = {sig: [] for sig in ordered}
    for e in choices:
        if e["added_by"] or e.get("verdict"):
            said = "  ".join(x for x in (e["added_by"], f"[{e['verdict']}]" if e.get("verdict") else None) if x)
            print(f"   {marks[e['config']]} {e['label']}  {e['config']}  [{e['how']}]  {said}", file=out)
            print("".join(f"{line}\n" for line in below(e)), end="", file=out)
        else:
            by_config[e["config"]].append(e)
    for sig, chosen in by_config.items():
        if not chosen:
            continue
        hows = ", ".join(sorted({e["how"] for e in chosen}))
        winners = [e["winner_ms"] for e in chosen if e["winner_ms"] is not None]
        times = f"  winners' medians {_span(min(winners), max(winners))}" if winners else ""
        print(f"   {marks[sig]} {len(chosen)} file{'s' * (len(chosen) != 1)}  {sig}  [{hows}]{times}: "
              f"{label_list([e['label'] for e in chosen])}", file=out)


def _print_min_cost(choices, each_file: bool, out) -> None:
    """The min-cost config's slowdown against the winner: on each file, or past
    ``LIST_FILES_UP_TO`` files its range and the files where it failed."""
    costs = [e for e in choices if e["min_cost"]]
    if not costs:
        return
    names = " / ".join(sorted({e["min_cost"] for e in costs}))
    if each_file:
        known = [f"failed on {e['label']}" if e["min_cost_failed"] else f"{e['min_cost_slowdown']:.2f}x on {e['label']}"
                 for e in costs if e["min_cost_failed"] or e["min_cost_slowdown"] is not None]
        text = ", ".join(known) if known else "not measured"
    else:
        failed = [e["label"] for e in costs if e["min_cost_failed"]]
        slower = [e for e in costs if not e["min_cost_failed"] and e["min_cost_slowdown"] is not None]
        parts = []
        if slower:
            lo, hi = min(e["min_cost_slowdown"] for e in slower), max(e["min_cost_slowdown"] for e in slower)
            parts.append(f"{lo:.2f}x..{hi:.2f}x on {len(slower)} files")
        if failed:
            parts.append(f"failed on {label_list(failed)}")
        text = ", ".join(parts) if parts else "not measured"
    print(f"    min-cost {names}: {text}", file=out)


def run(args, out) -> int:
    """The ``show`` command.  Each file is reduced to compact rows as it is read (``rows.py``);
    the HTML page reads the keys it shows again, whole (``details_reader``)."""
    accept = ("record", "choices", "table")
    if args.format == "python":
        return python_out.run(args, accept, out)
    rows = Rows()
    sources = read_sources(args.files, accept, "show", args.all_runs, fold=rows, jobs=args.jobs)
    table_show.say_notes(sources)
    counts = rows.counts(sources) + (sum(rows.fallbacks(sources).values()),)
    args.check_status = 1 if args.check and counts[2] else 0  # kept by the CLI whatever happens to stdout
    args.check_why = f"{counts[2]} of {counts[0]} kernel/key entries disagree across {len(sources)} files"
    if args.format == "html":
        out.write(html.show_page(sources, rows, details_reader(sources, accept, "show", args.jobs)))
        return args.check_status
    if args.json or args.format == "json":
        dump_streamed([("files", [source_json(s) for s in sources]), ("keys", analyse(rows.grouped(sources))),
                       ("disagreements", counts[2]), ("fallbacks", counts[3]), ("tables", table_show.tables_json(sources, rows))], out)
    elif args.format == "markdown":
        print_show_markdown(sources, lambda: analyse(rows.grouped(sources)), counts, out)
    else:
        print_show(sources, analyse(rows.grouped(sources)), rows.provenance_documents(sources), counts, out)
    return args.check_status


def print_show_markdown(sources, analysed, counts, out) -> None:
    """Disagreements first, in a table; the keys where every file agrees folded away below them.
    ``analysed()`` gives the keys' dicts afresh: once for each of the two tables."""
    keys, kernels, disagree, *fell = counts
    fell = fell[0] if fell else 0  # a caller may pass no fallback count
    agree = keys - disagree
    if len(sources) == 1:  # nothing to compare: what the one file holds
        verdict = f"{keys} kernel/key entr{'y' if keys == 1 else 'ies'} in {os.path.basename(sources[0].path)}"
    elif disagree:
        verdict = f"{disagree} of {keys} kernel/key entries DISAGREE"
    else:
        verdict = f"all {keys} kernel/key entries agree across {len(sources)} files"
    print(f"### autotune_guard: {verdict}\n", file=out)
    print(f"{kernels} kernel{'s' * (kernels != 1)}, {keys} key{'s' * (keys != 1)}, "
          f"{len(sources)} file{'s' * (len(sources) != 1)}{fallback_text(fell, '; **')}{'**' * bool(fell)}:\n", file=out)
    for s in sources:
        print(f"- {_describe_source(s).strip()}", file=out)
    if disagree:
        print("\n| kernel | key | arch | what each file chose |\n|---|---|---|---|", file=out)
        for r in (r for r in analysed() if not r["agree"]):
            by_config: dict[str, list[str]] = {}
            for e in r["choices"]:
                by_config.setdefault(e["config"], []).append(e["label"])
            chosen = "<br>".join(f"{md(sig)}: {label_list(labels)}"
                                 for sig, labels in sorted(by_config.items(), key=lambda kv: (-len(kv[1]), kv[0])))
            print(f"| {md(r['kernel'])} | {md(r['key'])} | {r['arch']} | {chosen} |", file=out)
    if agree:
        if len(sources) > 1:
            print(f"\n<details><summary>{agree} kernel/key entr{'y' if agree == 1 else 'ies'} where every "
                  "file agrees</summary>", file=out)
        print("\n| kernel | key | arch | config | how | files |\n|---|---|---|---|---|---|", file=out)
        for r in (r for r in analysed() if r["agree"]):
            hows = ", ".join(sorted({e["how"] for e in r["choices"]}))
            print(f"| {md(r['kernel'])} | {md(r['key'])} | {r['arch']} | {md(next(iter(r['configs'])))} | {md(hows)} | "
                  f"{len(r['choices'])} |", file=out)
        if len(sources) > 1:
            print("\n</details>", file=out)
    table_show.print_markdown(sources, analysed, out)


def add_parser(commands, common) -> None:
    show = commands.add_parser("show", parents=[common], help="what each rank chose, per kernel and key (the default)",
                               description="Per kernel and key: what each rank chose (or a table holds), "
                                           "disagreements, the spread of measured times, and the slowdown of the "
                                           "min-cost config vs the winner.")
    show.add_argument("files", nargs="+", metavar="FILE", help="record, choices or table files, table folders (every <arch>.json in them), or the "
                           "AUTOTUNE_RECORD_PATH/AUTOTUNE_DIGEST_PATH prefixes")
    show.add_argument("--format", choices=("text", "json", "markdown", "html", "python"), default="text",
                      help="markdown: a CI job summary or a pull-request comment; html: one self-contained page "
                           "(a grid of ranks x keys, the measured times) to open in a browser (--json is --format json); "
                           "python: each chosen config as a triton.Config(...) line to pin in source")
    show.add_argument("-o", "--output", dest="write_to", metavar="FILE",
                      help="write the output to FILE (atomically) instead of stdout")
    show.set_defaults(run=run)


def provenance_lines(documents, kernel: str) -> list[str]:
    """Each distinct provenance the files give ``kernel`` (tables per kernel, records per entry),
    one line each, for ``report show``."""
    seen = []
    for document in documents:
        table = document.get(PROVENANCE) if isinstance(document.get(PROVENANCE), dict) else {}
        found = [table.get(kernel)] + [e.get(PROVENANCE) for e in ((document.get("kernels") or {}).get(kernel) or {}).values()
                                       if isinstance(e, dict)]
        seen += [p for p in found if isinstance(p, dict) and p not in seen]
    return [f"    provenance: {provenance_text(p)}" for p in seen]
