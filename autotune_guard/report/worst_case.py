"""``report merge --rule worst-case``: one ``*`` entry per kernel, the candidate with the smallest
worst-case slowdown over the keys the records timed, and a key's own entry only where its own best
beats that ``*`` there by more than ``EXCEPTION`` (Megatron Core's rule for its packaged tables).

A table of shape-swept kernels then serves keys no record met (another token count) with the
config that is never far from the best, instead of the smallest tile."""

from __future__ import annotations

import math
import statistics
from typing import Callable

RULE = "worst-case"
EXCEPTION = 0.05  # a key's own best must beat ``*`` there by more than this to get an entry of its own
NAMED_UP_TO = 4  # keys named in a reason; the rest counted


def decide_all(keys: dict, descriptors: dict, decide: Callable) -> tuple[list[dict], dict, dict]:
    """``merge._decide_all`` for this rule: the decisions (the ``*`` entry, each with its
    ``worst_case`` summary, and the per-key exceptions), the table's kernels, and the keys left to
    their library. ``keys``: (arch, kernel, key) -> ``tally.KeyTally``, in the report's order;
    ``decide``: ``merge.decide``, for a kernel no candidate of which was timed at every timed key
    (each key its fastest) and a key with no timings ``*`` cannot serve (its vote)."""
    by_kernel: dict[str, list] = {}
    library: dict[str, list[str]] = {}
    for (_, kernel, key), tally in keys.items():
        if tally.voters:
            by_kernel.setdefault(kernel, []).append((key, tally))
        else:
            library.setdefault(kernel, []).append(key)
    decisions, kernels = [], {}
    for kernel, keyed in by_kernel.items():
        for decision in _kernel(kernel, keyed, descriptors, decide):
            decisions.append(decision)
            kernels.setdefault(kernel, {})[decision["key"]] = decision["descriptor"]
    return decisions, kernels, library


def source_of(decisions: list[dict]) -> dict:
    """What a table's ``source`` says of how each ``*`` was chosen (kernel -> summary); {} when
    no decision is this rule's."""
    chosen = {d["kernel"]: d["worst_case"] for d in decisions if d.get("worst_case")}
    return {"worst_case": chosen} if chosen else {}


def medians_of(tally) -> dict[str, float]:
    """signature -> the median, across ranks, of each rank's median timing of it at this key;
    a failed (inf, NaN) or zero timing is no timing."""
    found = {}
    for sig, values in tally.measured.items():
        usable = [v for v in values if math.isfinite(v) and v > 0]
        if usable:
            found[sig] = statistics.median(usable)
    return found


def _declared(keyed: list) -> list[str]:
    """The kernel's candidates in declaration order (the first key's list), then any other timed ones."""
    order = list(dict.fromkeys(next((t.raw_candidates for _, t in keyed if t.raw_candidates), ()) or ()))
    extra = sorted({sig for _, tally in keyed for sig in (*tally.candidates, *tally.measured)} - set(order))
    return order + extra


def _kernel(kernel: str, keyed: list, descriptors: dict, decide: Callable) -> list[dict]:
    order = _declared(keyed)
    timed = {key: medians_of(tally) for key, tally in keyed}
    timed = {key: found for key, found in timed.items() if found}
    if not timed:
        return [_own(kernel, key, tally, descriptors, decide, "no key of the kernel timed, so no '*' entry")
                for key, tally in keyed]
    untimed = [(key, tally) for key, tally in keyed if key not in timed]
    missing = {sig: [key for key in timed if sig not in timed[key]] for sig in order}
    eligible = [sig for sig in order if not missing[sig] and sig in descriptors]
    refused = {sig: keys for sig, keys in missing.items() if keys}
    if not eligible:  # nothing to stand for every key: each key its own fastest (its vote without timings)
        why = f"no candidate timed at all {len(timed)} timed keys, so no '*' entry ({_refused_text(refused, timed)})"
        return [_own(kernel, key, tally, descriptors, decide, why) for key, tally in keyed]
    best = {key: min(found.values()) for key, found in timed.items()}
    worst = {sig: max(timed[key][sig] / best[key] for key in timed) for sig in eligible}
    star = min(eligible, key=worst.__getitem__)  # ties: the first declared
    slowdowns = {key: timed[key][star] / best[key] for key in timed}
    exceptions = [_exception(kernel, key, tally, order, timed[key], star, descriptors)
                  for key, tally in keyed if key in timed and slowdowns[key] > 1 + EXCEPTION]
    served = [key for key, tally in untimed if star in tally.candidates or not tally.candidates]
    owns = [_own(kernel, key, tally, descriptors, decide, f"no timings, and '*' ({star}) is not among its candidates")
            for key, tally in untimed if key not in served]
    summary = {"chosen": star, "worst_slowdown": round(worst[star], 6), "worst_key": max(slowdowns, key=slowdowns.get),
               "keys": {key: round(value, 6) for key, value in slowdowns.items()},
               "exceptions": [d["key"] for d in exceptions], "threshold": EXCEPTION,
               "not_eligible": refused, "untimed_keys_served": served}
    return [_star(kernel, keyed, star, descriptors, summary)] + exceptions + owns


def _star(kernel: str, keyed: list, star: str, descriptors: dict, summary: dict) -> dict:
    votes: dict[str, int] = {}
    for _, tally in keyed:
        for sig, count in tally.votes().items():
            votes[sig] = votes.get(sig, 0) + count
    keys = summary["keys"]
    why = (f"smallest worst-case slowdown, {summary['worst_slowdown']:.3f}x at key ({summary['worst_key']}), "
           f"over {len(keys)} timed key{'s' * (len(keys) != 1)}")
    if summary["not_eligible"]:
        why += f"; not eligible: {_refused_text(summary['not_eligible'], keys)}"
    if summary["untimed_keys_served"]:
        count = len(summary["untimed_keys_served"])
        why += f"; {count} key{'s' * (count != 1)} with no timings left to '*'"
    agree = all(len(tally.voters) == 1 for _, tally in keyed)
    return {"kernel": kernel, "key": "*", "votes": _ordered(votes), "agree": agree, "chosen": star,
            "descriptor": descriptors[star], "worst_case": summary, "why": why}


def _exception(kernel: str, key: str, tally, order: list[str], found: dict, star: str, descriptors: dict) -> dict:
    """The key's own entry: its best (ties: the first declared), which beats ``*`` by more than EXCEPTION."""
    own = min((sig for sig in order if sig in found and sig in descriptors), key=found.__getitem__)
    behind = (found[star] / found[own] - 1) * 100
    votes = tally.votes()
    return {"kernel": kernel, "key": key, "votes": _ordered(votes), "agree": len(votes) == 1, "chosen": own,
            "descriptor": descriptors[own], "median_ms": found[own],
            "why": f"its own best beats '*' ({star}) here by {behind:.1f} % (more than {EXCEPTION * 100:g} %)"}


def _own(kernel: str, key: str, tally, descriptors: dict, decide: Callable, why: str) -> dict:
    known = {sig: descriptors[sig] for sig in (*tally.candidates, *tally.voters) if sig in descriptors}
    measured = {sig: list(values) for sig, values in tally.measured.items() if sig in known}
    decision = decide(tally.votes(), known, measured, "fastest")
    return {"kernel": kernel, "key": key, **decision, "why": f"{decision['why']}; {why}"}


def _refused_text(refused: dict, timed) -> str:
    """The candidates without a usable timing at every timed key, each with the keys it lacks (a few named)."""
    parts = []
    for sig, keys in refused.items():
        named = ", ".join(f"({key})" for key in keys[:NAMED_UP_TO])
        more = f" and {len(keys) - NAMED_UP_TO} more" if len(keys) > NAMED_UP_TO else ""
        parts.append(f"{sig} not timed (or failed) at {named}{more}" if len(keys) < len(timed)
                     else f"{sig} timed at no key")
    return "; ".join(parts)


def _ordered(votes: dict[str, int]) -> dict[str, int]:
    return dict(sorted(votes.items(), key=lambda kv: (-kv[1], kv[0])))
