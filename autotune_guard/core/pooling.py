"""A winner pooled over cold runs (``AUTOTUNE_POOL_RUNS``): pure rules over the measurements a
table keeps for a key (``deciding.retime.summary``: every candidate's median, one per process).

One process's rounds agree to 0.1-0.3 % a timing, yet the same pair's ratio moves 1-3 % from one
cold process to the next (an H100, 2026-12-06): a key whose candidates are closer than that has no
best that one process can find. Pooled, each run's timings count relative to that run's own speed
(absolute times move more between processes than ratios do): ``log(median) = run + candidate``,
fitted over the timings the runs made, so that a candidate one run did not time (it was new then,
or its timing failed) counts by the runs that did time it. The candidate with the lowest score
wins (a run's spike left out); candidates within ``TIE_FLOOR`` of it tie and go to the one declared
first, as inside one run.
"""

from __future__ import annotations

import math
import statistics
from typing import Mapping, NamedTuple, Sequence

from .selection import TIE_FLOOR, usable

EARLIER = "earlier"  # in a table's measured entry: measurements of other runs kept beside it (core.tables)
MOST_RUNS = 5  # a table keeps the newest measurement and 4 beside it (tables.EARLIER_KEPT)
SPIKE = 0.1  # a run's log ratio this far from the runs' median is another process's spike, left out
CONTENDS = 0.10  # a candidate pooled this far behind the best is settled: later pooling runs skip it
SETTLED = "settled"  # in a pooling run's measurement: the candidates it left out, settled for good
FIT_ROUNDS = 200  # the alternating fit converges in a few dozen on any real table


class Pooled(NamedTuple):
    """The pooled verdict: the winner (a signature), ``clear`` or ``tie``, the next best's pooled
    slowdown as a fraction (0.10: 10 % slower; None: no other candidate), the candidates tied with
    the winner, how many runs were pooled, the spread between runs of the winner's log ratio to the
    next best (None under 2 runs that timed both), and how many runs timed each candidate."""

    winner: str
    how: str
    margin: float | None
    tied: tuple
    runs: int
    spread: float | None
    timed_by: dict = {}

    def as_dict(self) -> dict:
        return {"winner": self.winner, "how": self.how, "runs": self.runs, "tied": list(self.tied),
                "margin": None if self.margin is None else round(self.margin, 6),
                "spread": None if self.spread is None else round(self.spread, 6),
                "timed_by": dict(self.timed_by)}


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
    candidates = measurement.get("candidates") if isinstance(measurement, Mapping) else None
    for sig in signatures if isinstance(candidates, Mapping) else ():
        entry = candidates.get(sig)
        median = entry.get("median") if isinstance(entry, Mapping) else None
        if usable(median):
            found[sig] = math.log(median)
    return found


def _centre(values: Sequence[float]) -> float:
    """The mean of one candidate's log ratios over the runs, leaving out a run more than ``SPIKE`` from
    their median (another process slowed a µs-long kernel 2x for seconds in one run on an H100); all
    of them where that leaves none."""
    middle = statistics.median(values)
    kept = [v for v in values if abs(v - middle) <= SPIKE]
    return statistics.fmean(kept or values)


def _linked(runs: list[dict[str, float]], signatures: Sequence[str]) -> list[str]:
    """The candidates linked to the most-timed one through runs that timed two of them (only those
    can be compared: a run that timed nothing they timed says nothing of them)."""
    timed = [sig for sig in signatures if any(sig in r for r in runs)]
    if not timed:
        return []
    start = max(timed, key=lambda sig: (sum(sig in r for r in runs), -timed.index(sig)))
    reached, changed = {start}, True
    while changed:
        changed = False
        for r in runs:
            if reached & r.keys() and not r.keys() <= reached:
                reached |= r.keys()
                changed = True
    return [sig for sig in timed if sig in reached]


def _fit(runs: list[dict[str, float]], common: Sequence[str]) -> tuple[dict[str, float], list[float]]:
    """Least squares of ``log t = run + candidate`` by alternating means: each candidate's score and
    each run's offset."""
    offset = [statistics.fmean(r.values()) if r else 0.0 for r in runs]
    score: dict[str, float] = {}
    for _ in range(FIT_ROUNDS):
        score = {sig: statistics.fmean(r[sig] - o for r, o in zip(runs, offset) if sig in r) for sig in common}
        moved = [statistics.fmean(v - score[sig] for sig, v in r.items()) if r else 0.0 for r in runs]
        done = max((abs(a - b) for a, b in zip(moved, offset)), default=0.0) < 1e-12
        offset = moved
        if done:
            break
    return score, offset


def log_ratios(measurements: Sequence[Mapping], signatures: Sequence[str]) -> dict[str, list[float]]:
    """Each comparable candidate (in ``signatures``' order): its log timing less its run's offset,
    one value per run that timed it. The offsets are fitted (``_fit``), again without the timings
    more than ``SPIKE`` from their candidate's median (a spike moves its run's offset), and shifted so
    that the best candidate's mean is 0; with every run timing every candidate and no spike, this
    is each run's log ratio to its best."""
    runs = [_logs(m, signatures) for m in measurements]
    common = _linked(runs, signatures)
    runs = [{sig: v for sig, v in r.items() if sig in common} for r in runs]
    score, offset = _fit(runs, common)
    middle = {sig: statistics.median(r[sig] - o for r, o in zip(runs, offset) if sig in r) for sig in common}
    calm = [{sig: v for sig, v in r.items() if abs(v - o - middle[sig]) <= SPIKE} for r, o in zip(runs, offset)]
    if all(any(sig in r for r in calm) for sig in common):
        _, offset = _fit(calm, common)
    ratios = {sig: [r[sig] - o for r, o in zip(runs, offset) if sig in r] for sig in common}
    best = min((statistics.fmean(values) for values in ratios.values()), default=0.0)
    return {sig: [v - best for v in values] for sig, values in ratios.items()}


def pool(measurements: Sequence[Mapping], signatures: Sequence[str]) -> Pooled | None:
    """The pooled verdict over ``measurements`` (one per cold run) among ``signatures`` (declaration
    order), each candidate counted by the runs that timed it; None when no candidate could be compared."""
    ratios = log_ratios(measurements, signatures)
    common = list(ratios)
    if not common:
        return None
    score = {sig: _centre(values) for sig, values in ratios.items()}
    leader = min(common, key=lambda sig: (score[sig], common.index(sig)))
    close = [sig for sig in common if score[sig] - score[leader] <= TIE_FLOOR]  # declaration order
    winner = close[0]
    others = sorted((score[sig] - score[winner], sig) for sig in common if sig not in close)
    margin = math.expm1(others[0][0]) if others else None
    nearest = next((sig for sig in sorted(common, key=score.get) if sig != winner), None)
    tied = tuple(sig for sig in close if sig != winner)
    timed_by = {sig: len(values) for sig, values in ratios.items()}
    return Pooled(winner, "tie" if tied else "clear", margin, tied, len(measurements),
                  _spread(measurements, signatures, winner, nearest), timed_by)


def _spread(measurements: Sequence[Mapping], signatures: Sequence[str], winner: str, nearest: str | None):
    """The standard deviation between runs of log(nearest / winner), over the runs that timed both."""
    if nearest is None:
        return None
    pairs = [r[nearest] - r[winner] for r in (_logs(m, signatures) for m in measurements)
             if nearest in r and winner in r]
    return statistics.stdev(pairs) if len(pairs) > 1 else None


def to_time(measurements: Sequence[Mapping], signatures: Sequence[str], wanted: int) -> list[str] | None:
    """What a pooling run still has to time for a key (``signatures``: today's candidates), None when
    the key is settled: every candidate that still contends (within ``CONTENDS`` of the pooled best,
    or never timed: new since) was timed by ``wanted`` runs, or only one contends. A candidate the
    runs found far behind is not timed again (a pooling run this cheap times only the close ones),
    nor is one an earlier pooling run left out as settled unless it leads now: otherwise a later
    run's shift of the best could bring it back within reach and pool the key once more."""
    ratios = log_ratios(measurements, signatures)
    score = {sig: _centre(values) for sig, values in ratios.items()}
    best = min(score.values(), default=0.0)
    left_out = {sig for m in measurements if isinstance(m.get(SETTLED), list) for sig in m[SETTLED]}
    contending = [sig for sig in signatures if sig not in score
                  or (score[sig] - best <= math.log1p(CONTENDS) and not (sig in left_out and score[sig] > best))]
    if len(contending) < 2 or all(len(ratios.get(sig, ())) >= wanted for sig in contending):
        return None
    return contending


def left_out(measured: Mapping, signatures: Sequence[str]) -> list[str]:
    """The candidates a pooling run's measurement did not time: settled by the runs before it."""
    timed = measured.get("candidates") if isinstance(measured.get("candidates"), Mapping) else {}
    return [sig for sig in signatures if sig not in timed]
