"""What Triton measured, summarised per chosen entry: the winner's median, the fastest and slowest
timed candidate, and the candidate ``AUTOTUNE_ON_MISS=min_cost`` would pin with its slowdown.
One definition, used by the compact rows (``rows.py``) and the HTML page's whole entries."""

from __future__ import annotations

import math

from ..core.model import static_cost

_isfinite = math.isfinite


def median_of(measured):
    """Triton's timer returns ``[p50, p20, p80]`` (or one number): the median comes first."""
    value = measured[0] if isinstance(measured, list) else measured
    return math.inf if value is None else float(value)  # null: a candidate that failed while timed


def cost_order(descriptors: dict[str, dict]) -> list[str]:
    """The signatures cheapest first; ``sorted`` is stable, so the first one that passes a filter
    is what ``min`` over the filtered descriptors would give."""
    return sorted(descriptors, key=lambda sig: static_cost(descriptors[sig]))


def min_cost_in(order: list[str], timings) -> str | None:
    """The candidate pinned mode's ``min_cost`` would run: among those Triton timed (the ones left
    after the kernel's own pruning) when timings are known, else among the declared ones."""
    if timings:
        return next((sig for sig in order if sig in timings), None)
    return order[0] if order else None


def slowdown(cost, winner):
    """How many times slower min-cost's finite time ``cost`` is than the winner, when known."""
    if winner is not None and winner > 0 and math.isfinite(winner):
        return cost / winner
    return None


def summary_values(chosen_signature: str, timings, min_cost) -> tuple:
    """``summary`` as a tuple, without the slowdown: (winner_ms, fastest_ms, slowest_ms,
    min_cost_ms, min_cost, timed, min_cost_failed); what a report's worker computes per entry."""
    if not timings:
        return None, None, None, None, min_cost, 0, False
    firsts = [m[0] if type(m) is list else m for m in timings.values()]
    finite = [float(m) for m in firsts if m is not None and _isfinite(m)]
    cost = median_of(timings[min_cost]) if min_cost in timings else None
    failed = cost is not None and not _isfinite(cost)  # Triton's time for a candidate that failed to compile or run
    winner = median_of(timings[chosen_signature]) if chosen_signature in timings else None
    return (winner, min(finite) if finite else None, max(finite) if finite else None, None if failed else cost,
            min_cost, len(timings), failed)


def summary(chosen_signature: str, timings, min_cost) -> dict:
    """The winner's median, the spread over the timed candidates, and what min-cost would cost."""
    winner, fastest, slowest, cost, min_cost, timed, failed = summary_values(chosen_signature, timings, min_cost)
    return {"winner_ms": winner, "fastest_ms": fastest, "slowest_ms": slowest, "timed": timed, "min_cost": min_cost,
            "min_cost_ms": cost, "min_cost_slowdown": slowdown(cost, winner) if cost is not None else None,
            "min_cost_failed": failed}
