"""A winner pooled over cold runs (``AUTOTUNE_POOL_RUNS``): pure rules over the measurements a
table keeps for a key (``deciding.retime.summary``: every candidate's median, one per process).

One process's rounds agree to 0.1-0.3 % a timing, yet the same pair's ratio moves 1-3 % from one
cold process to the next (an H100, 2026-12-06): a key whose candidates are closer than that has no
best that one process can find. Pooled, each run's timings count relative to that run's own best
(absolute times move more between processes than ratios do), and the candidate with the lowest
mean log ratio over the runs wins (a run's spike left out); candidates within ``TIE_FLOOR`` of it
tie and go to the one declared first, as inside one run.
"""

from __future__ import annotations

import math
import statistics
from typing import Mapping, NamedTuple, Sequence

from .selection import TIE_FLOOR

EARLIER = "earlier"  # in a table's measured entry: measurements of other runs kept beside it (core.tables)
MOST_RUNS = 5  # a table keeps the newest measurement and 4 beside it (tables.EARLIER_KEPT)
SPIKE = 0.1  # a run's log ratio this far from the runs' median is another process's spike, left out


class Pooled(NamedTuple):
    """The pooled verdict: the winner (a signature), ``clear`` or ``tie``, the next best's pooled
    slowdown (None: no other candidate), the candidates tied with the winner, how many runs were
    pooled, and the spread between runs of the winner's ratio to the next best (None under 2 runs)."""

    winner: str
    how: str
    margin: float | None
    tied: tuple
    runs: int
    spread: float | None

    def as_dict(self) -> dict:
        return {"winner": self.winner, "how": self.how, "runs": self.runs, "tied": list(self.tied),
                "margin": None if self.margin is None else round(self.margin, 6),
                "spread": None if self.spread is None else round(self.spread, 6)}


def comparable(measured: Mapping | None, on: Mapping) -> list[Mapping]:
    """The measurements a table kept for one key (its entry's, then those kept beside it) that were
    taken on ``on`` (arch, Triton and torch versions) and hold their candidates' timings."""
    if not isinstance(measured, Mapping):
        return []
    beside = measured.get(EARLIER) if isinstance(measured.get(EARLIER), list) else []
    found = [measured, *[m for m in beside if isinstance(m, Mapping)]]
    return [m for m in found if isinstance(m.get("candidates"), Mapping)
            and all(m.get(name) == value for name, value in on.items() if value)]


def _logs(measurement: Mapping, signatures: Sequence[str]) -> dict[str, float]:
    """log(median) of each candidate the measurement timed and could run."""
    found = {}
    for sig in signatures:
        entry = measurement["candidates"].get(sig)
        median = entry.get("median") if isinstance(entry, Mapping) else None
        if isinstance(median, (int, float)) and 0 < median < math.inf:
            found[sig] = math.log(median)
    return found


def _centre(values: Sequence[float]) -> float:
    """The mean of one candidate's log ratios over the runs, leaving out a run more than ``SPIKE`` from
    their median (another process slowed a µs-long kernel 2x for seconds in one run on an H100); all
    of them where that leaves none."""
    middle = statistics.median(values)
    kept = [v for v in values if abs(v - middle) <= SPIKE]
    return statistics.fmean(kept or values)


def log_ratios(measurements: Sequence[Mapping], signatures: Sequence[str]) -> dict[str, list[float]]:
    """Each candidate every run timed (in ``signatures``' order): its log ratio to that run's best,
    one per run."""
    runs = [_logs(m, signatures) for m in measurements]
    common = [sig for sig in signatures if runs and all(sig in r for r in runs)]
    return {sig: [r[sig] - min(r[c] for c in common) for r in runs] for sig in common}


def pool(measurements: Sequence[Mapping], signatures: Sequence[str]) -> Pooled | None:
    """The pooled verdict over ``measurements`` (one per cold run) among ``signatures`` (declaration
    order), over the candidates every run timed; None when no candidate was timed by all of them."""
    ratios = log_ratios(measurements, signatures)
    common = list(ratios)
    if not common:
        return None
    score = {sig: _centre(values) for sig, values in ratios.items()}
    leader = min(common, key=lambda sig: (score[sig], common.index(sig)))
    close = [sig for sig in common if score[sig] - score[leader] <= TIE_FLOOR]  # declaration order
    winner = close[0]
    others = sorted((score[sig] - score[winner], sig) for sig in common if sig not in close)
    margin = others[0][0] if others else None
    nearest = next((sig for sig in sorted(common, key=score.get) if sig != winner), None)
    spread = None
    if nearest is not None and len(measurements) > 1:
        spread = statistics.stdev(a - b for a, b in zip(ratios[nearest], ratios[winner]))
    tied = tuple(sig for sig in close if sig != winner)
    return Pooled(winner, "tie" if tied else "clear", margin, tied, len(measurements), spread)
