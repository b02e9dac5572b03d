"""``report audit TABLE``: the entries whose verdict rests on one draw that other draws contradict.

One cold process's timings of two configs within a few % of each other can rank them either way
(docs/winners.md), so an entry frozen by one run may be the slower config. The table keeps the
other runs' measurements of a key beside its entry (``earlier``). The rule, kept simple:

- an entry is audited where the table kept its measurement (``measured``) and no pooled verdict
  (``pooled``: a pooled entry already rests on several draws);
- an earlier measurement counts where it was taken on the arch, Triton and torch its own
  measurement names (each field the entry's measurement gives must match);
- it contradicts the entry where it chose another winner (unless it timed the entry's config and
  tied it with that winner, or did not time the entry's config at all), or where it timed another
  candidate faster than the entry's config by more than ``TIE_FLOOR`` (0.5 %).

An entry with a contradicting draw is named, with each such draw; ``--check`` exits 1 then."""

from __future__ import annotations

import math
import shlex

from ..core.model import signature
from ..core.selection import TIE_FLOOR
from .configs import full_descriptor
from .output import dump
from .reading import natural, read_sources
from .table_facts import measurement, percent, same_versions, verdict_phrase
from .table_show import say_notes


def contradiction(m: dict, config: str) -> str | None:
    """How an earlier measurement ``m`` contradicts an entry whose config is ``config``, in words;
    None where it does not."""
    medians = m["candidates"]
    own = medians.get(config)
    timed_config = own is not None and math.isfinite(own)
    said = []
    if m["winner"] is not None and m["winner"] != config and config not in (m["tied"] or []):
        if timed_config or not medians:
            said.append(f"chose {m['winner']}")
    if timed_config:
        faster = sorted((own / median - 1, sig) for sig, median in medians.items()
                        if sig != config and math.isfinite(median) and median > 0 and own / median - 1 > TIE_FLOOR)
        if faster:
            by, sig = faster[-1]
            said.append(f"timed {sig} {percent(by)[1:]} faster than this config")
    return "; ".join(said) or None


def audit_entry(document: dict, kernel: str, key: str) -> dict | None:
    """The finding for one entry (None: not audited, no measurement or pooled), as plain data."""
    config = signature(full_descriptor(document["kernels"][kernel][key]))
    m = measurement(document, kernel, key)[0]
    if m is None or m["how"] is None and not m["earlier"]:
        return None
    pooled = m["pooled"] is not None and m["pooled"]["runs"] is not None
    draws = [item for item in m["earlier"] if same_versions(m, item)]
    against = [(n + 1, said) for n, said in enumerate(contradiction(item, config) for item in draws) if said]
    return {"kernel": kernel, "key": key, "config": config, "pooled": pooled, "verdict": verdict_phrase(m),
            "draws": len(draws), "other_versions": len(m["earlier"]) - len(draws),
            "contradicted": [] if pooled else [{"draw": n, "why": said} for n, said in against]}


def audit(document: dict) -> list[dict]:
    """Every audited entry of a table, in the report's order."""
    found = []
    for kernel in sorted(document["kernels"], key=natural):
        for key in sorted(document["kernels"][kernel], key=natural):
            finding = audit_entry(document, kernel, key)
            if finding is not None:
                found.append(finding)
    return found


def run(args, out) -> int:
    """The command: each table's findings, the count; ``--check``: 1 where any entry is contradicted."""
    sources = read_sources(args.tables, ("table",), "audit", True)
    say_notes(sources)
    results = [{"table": s.path, "entries": audit(s.document)} for s in sources]
    named = sum(1 for r in results for e in r["entries"] if e["contradicted"])
    args.check_status = 1 if args.check and named else 0
    if args.json:
        dump({"tables": results, "contradicted": named}, out)
        return args.check_status
    for r in results:
        _print_table(r, out)
    print(f"{named} entr{'y rests' if named == 1 else 'ies rest'} on one draw that other draws contradict", file=out)
    return args.check_status


def _print_table(result: dict, out) -> None:
    entries = result["entries"]
    pooled = sum(e["pooled"] for e in entries)
    alone = sum(not e["pooled"] and not e["draws"] for e in entries)
    print(f"{result['table']}: {len(entries)} measured entr{'y' if len(entries) == 1 else 'ies'}, {pooled} pooled, "
          f"{alone} with no other draw on the same versions", file=out)
    for e in entries:
        if not e["contradicted"]:
            continue
        print(f"  CONTRADICTED {e['kernel']} key ({e['key']}): {e['config']} [{e['verdict'] or 'no verdict kept'}]; "
              f"{len(e['contradicted'])} of {e['draws']} other draw{'s' * (e['draws'] != 1)} "
              f"contradict{'s' * (len(e['contradicted']) == 1)} it:", file=out)
        for c in e["contradicted"]:
            print(f"      draw {c['draw']}: {c['why']}", file=out)
        command = " ".join(shlex.quote(part) for part in (result["table"], "--kernel", e["kernel"], "--key", e["key"]))
        print(f"      (retime it: report retune {command}; or drop it: report prune {command})", file=out)


def add_parser(commands, common) -> None:
    audit_command = commands.add_parser(
        "audit", parents=[common], help="name table entries whose one-draw verdict other draws contradict",
        description="Per table entry kept with its measurement and no pooled verdict: the earlier measurements "
                    "of the same key (same arch, Triton and torch) that chose another winner or timed another "
                    "candidate more than 0.5 %% faster. --check exits 1 when any entry is named.")
    audit_command.add_argument("tables", nargs="+", metavar="TABLE", help="table files or table directories")
    audit_command.set_defaults(run=run)
