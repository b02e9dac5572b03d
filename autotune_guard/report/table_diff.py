"""``report diff TABLE RUN``: a table against what a run met (its choices or record files). Per
key the run met: ``same`` (the table holds the config the run chose), ``differs`` (the table holds
another: a pinned run would not run what this run chose), ``lacks`` (the table holds nothing for
it: a pinned run falls back); per kernel, ``stale`` where the table's provenance of it differs from
the run's (another source, candidate list, tuning options or FP fusion). Entries are looked up as
the pinned rule looks them up: the key, else the kernel's ``*``; the qualified name, else the bare."""

from __future__ import annotations

from ..core.errors import InputError
from ..core.model import provenance_differences
from ..core.numerics import FUSION, numerics_differences
from ..core.tables import PROVENANCE
from .output import dump
from .reading import md, natural_key, read_sources
from .rows import Rows
from .table_show import say_notes

STATUSES = ("same", "differs", "lacks")


def run(args, out, tables, table_fold: Rows) -> int:
    """The command, once RUN_A was read and found to name tables (``tables``, folded by ``table_fold``)."""
    if any(s.kind != "table" for s in tables):
        raise InputError(f"{args.a}: names tables and run files together; diff TABLE RUN takes the tables alone as "
                         "its first argument", path=args.a)
    if args.format == "html":
        raise InputError("report diff TABLE RUN writes text, json or markdown (--format html compares two runs)")
    run_fold = Rows()
    run_sources = read_sources([args.b], ("record", "choices"), "diff", args.all_runs, fold=run_fold, jobs=args.jobs)
    say_notes(tables)
    result = compare(tables, table_fold, run_sources, run_fold)
    failing = result["counts"]["differs"] + result["counts"]["lacks"] + len(result["stale"])
    args.check_status = 1 if args.check and failing else 0
    result["differences"] = failing
    if args.json or args.format == "json":
        dump(result, out)
    elif args.format == "markdown":
        print_markdown(result, out)
    else:
        print_text(result, out)
    return args.check_status


def _held(tables, fold: Rows) -> dict:
    """(arch, kernel) -> key -> the config the first table holding it gives."""
    held: dict = {}
    for ident, entries in fold.grouped(tables):
        held.setdefault((ident.arch, ident.kernel), {}).setdefault(ident.key, entries[0]["config"])
    return held


def lookup(held: dict, arch: str, kernel: str, key: str):
    """(config, the table's kernel name, the table's key) as pinned mode finds it, or None."""
    for name in dict.fromkeys((kernel, kernel.rpartition(".")[2])):
        entries = held.get((arch, name))
        if entries:
            for found in (key, "*"):
                if found in entries:
                    return entries[found], name, found
    return None


def compare(tables, table_fold: Rows, run_sources, run_fold: Rows) -> dict:
    """What ``run`` prints, as plain data (``--json``)."""
    held, archs = _held(tables, table_fold), {s.arch for s in tables}
    keys, used, other_arch = [], set(), 0
    for ident, configs in sorted(run_fold.configs(run_sources).items(), key=lambda kv: natural_key(kv[0])):
        if ident.arch not in archs:
            other_arch += 1
            continue
        found = lookup(held, *ident)
        chosen = sorted(configs)
        row = {"arch": ident.arch, "kernel": ident.kernel, "key": ident.key, "run": chosen, "table": None,
               "table_key": None, "status": "lacks"}
        if found is not None:
            config, name, key = found
            used.add((ident.arch, name, key))
            row.update(table=config, table_key=key if name == ident.kernel else f"{name} {key}",
                       status="same" if chosen == [config] else "differs")
        keys.append(row)
    only = [{"arch": arch, "kernel": kernel, "key": key} for (arch, kernel), entries in held.items()
            for key in entries if (arch, kernel, key) not in used]
    return {"tables": [s.path for s in tables], "run": [s.path for s in run_sources], "keys": keys,
            "stale": stale_kernels(tables, held, run_sources, run_fold),
            "only_in_table": only, "other_arch": other_arch,
            "counts": {status: sum(r["status"] == status for r in keys) for status in STATUSES}}


def run_provenance(run_sources, run_fold: Rows) -> tuple[dict, list]:
    """(kernel -> the distinct provenance its record entries give, the processes' numerics)."""
    per_kernel: dict = {}
    processes: list = []
    for s in run_sources:
        for kernel, found in run_fold.provenance.get(s.index, {}).items():
            slot = per_kernel.setdefault(kernel, [])
            slot.extend(p for p in found if isinstance(p, dict) and p not in slot)
        numerics = s.document.get("numerics")
        if isinstance(numerics, dict) and numerics.get(FUSION) and numerics not in processes:
            processes.append(numerics)
    return per_kernel, processes


def stale_kernels(tables, held: dict, run_sources, run_fold: Rows) -> list[dict]:
    """Each kernel the run met whose provenance in the table differs from the run's (its record
    entries'; where it recorded none, only the FP fusion of the processes is compared)."""
    recorded: dict = {}
    for s in tables:
        said = s.document.get(PROVENANCE)
        for kernel, p in (said.items() if isinstance(said, dict) else ()):
            if isinstance(p, dict):
                recorded.setdefault((s.arch, kernel), p)
    per_kernel, processes = run_provenance(run_sources, run_fold)
    met = sorted({(k.arch, k.kernel) for k in run_fold.configs(run_sources)})
    found = []
    for arch, kernel in met:
        name = next((n for n in dict.fromkeys((kernel, kernel.rpartition(".")[2])) if held.get((arch, n))), None)
        table = recorded.get((arch, name)) if name else None
        if table is None:
            continue
        differs = kernel_differences(table, per_kernel.get(kernel) or [], processes)
        if differs:
            found.append({"arch": arch, "kernel": kernel, "table_kernel": name, "entries": len(held[(arch, name)]),
                          "differs": differs})
    return found


def kernel_differences(table: dict, own: list, processes: list) -> list[str]:
    """What differs between a table's provenance of a kernel and a run's: against each provenance
    the run's record entries give (``own``), its source, candidates, options and FP fusion; where
    they give none, the FP fusion of the run's processes (``processes``' numerics) alone."""
    differs: list[str] = []
    for live in own or processes:
        phrases = (provenance_differences(table, live) if own else []) + numerics_differences(table, live)
        differs += [p for p in phrases if p not in differs]
    return differs


def _where(r: dict) -> str:
    return f"{r['kernel']} key ({r['key']}) [arch {r['arch']}]"


def print_text(result: dict, out) -> None:
    """The stale kernels, then key by key (``same``, ``LACKS``, ``DIFFERS``), then the counts."""
    print(f"TABLE: {', '.join(result['tables'])}", file=out)
    print(f"RUN: {', '.join(result['run'])}", file=out)
    for s in result["stale"]:
        print(f"  STALE    {s['kernel']} [arch {s['arch']}]: the table's {s['entries']} entr"
              f"{'y' if s['entries'] == 1 else 'ies'} of {s['table_kernel']} were recorded against another version "
              f"of it: {'; '.join(s['differs'])} (report prune TABLE --stale RUN drops them)", file=out)
    for r in result["keys"]:
        via = f" (its {r['table_key']} entry)" if r["table_key"] not in (None, r["key"]) else ""
        if r["status"] == "same":
            print(f"  same     {_where(r)}: {r['table']}{via}", file=out)
        elif r["status"] == "lacks":
            print(f"  LACKS    {_where(r)}: the run chose {' | '.join(r['run'])}", file=out)
        else:
            print(f"  DIFFERS  {_where(r)}:\n      table: {r['table']}{via}\n      run:   {' | '.join(r['run'])}",
                  file=out)
    print(summary(result), file=out)


def summary(result: dict) -> str:
    """The counts, in one line (what is only in the table, or of another arch, is no difference)."""
    counts, stale = result["counts"], result["stale"]
    text = (f"{counts['same']} same, {counts['differs']} differ, {counts['lacks']} the table lacks, "
            f"{len(stale)} stale kernel{'s' * (len(stale) != 1)}; {len(result['only_in_table'])} table "
            f"entr{'y' if len(result['only_in_table']) == 1 else 'ies'} the run did not meet (not a difference)")
    if result["other_arch"]:
        text += f"; {result['other_arch']} key{'s' * (result['other_arch'] != 1)} of another arch, not compared"
    return text


def print_markdown(result: dict, out) -> None:
    """A verdict line, the counts, and a table of the stale kernels and the keys not the same."""
    failing = result["differences"]
    verdict = f"{failing} difference{'s' * (failing != 1)}" if failing else "the table holds what the run chose"
    print(f"### autotune_guard diff TABLE RUN: {verdict}\n", file=out)
    print(f"- table: {', '.join(result['tables'])}\n- run: {', '.join(result['run'])}\n\n{summary(result)}", file=out)
    shown = [r for r in result["keys"] if r["status"] != "same"]
    if shown or result["stale"]:
        print("\n| kernel | key | arch | status | table | run |\n|---|---|---|---|---|---|", file=out)
    for s in result["stale"]:
        print(f"| {md(s['kernel'])} | — | {s['arch']} | stale: {md('; '.join(s['differs']))} | "
              f"{s['entries']} entries | — |", file=out)
    for r in shown:
        run_configs = "<br>".join(md(sig) for sig in r["run"])
        print(f"| {md(r['kernel'])} | {md(r['key'])} | {r['arch']} | {r['status']} | "
              f"{md(r['table']) if r['table'] else '—'} | {run_configs} |", file=out)

