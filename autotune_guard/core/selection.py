"""Choosing a winner worth freezing from noisy timings: pure rules over plain numbers.

A first pass times every candidate once (a lone finalist and its runner-up twice, the lower
timing of each counting, unless the runner-up is out of the race: ``out_of_race``). The finalists (those within ``band`` of the best, or
within the noise the rounds measure) are then timed again in rounds, the order alternating
from round to round, and compared in pairs within each round, so that a drift of the device's
clock between rounds cancels. A finalist is dropped once it is slower than the leader by more
than ``TIE_FLOOR`` beyond ``Z`` standard errors, and kept as the leader's tie once it is within
``TIE_FLOOR`` beyond them. The rounds stop when one finalist is left (a clear winner), when every
one left is a tie, or after ``rounds`` rounds, when each open one is judged by its estimate. A tie
goes to the candidate declared first, so that two cold runs freeze the same config.

Nothing here times, sleeps or reads a clock: ``deciding.retime`` runs the rounds.
"""

from __future__ import annotations

import math
import statistics
from typing import Mapping, NamedTuple, Sequence

UNTIMED = "untimed"  # a verdict where no candidate could be timed: the first declared, never frozen
TIE_FLOOR = 0.005  # differences under 0.5 % never decide: such candidates tie
Z = 2.0  # how many standard errors an estimate must be from TIE_FLOOR to decide before the last round
SCREEN_Z = 3.0  # a first-pass candidate within this many per-call noises of the best joins the finalists
SCREEN_MOST = 4  # ... but never one further behind than this many bands
SPIKE_MOST = 2.0  # another process slows one timing by at most this factor (40-100 % seen on an H100)
MIN_ROUNDS = 3  # rounds a finalist is timed in before it can be dropped
MAD_TO_SD = 1.4826  # the median absolute deviation of a normal sample, to its standard deviation
OUTLIER = 4.0  # a paired difference this many robust deviations from their median is a spike, left out


class Sample(NamedTuple):
    """One timing of one candidate: its median (ms; inf: it cannot run), the relative spread the
    timer reported around it (p80 - p20 over the median; None when it gave only a median), and the
    timer that took it where it says (``wall-clock``: not a GPU timing; None: the kernel's or Triton's)."""

    median: float
    spread: float | None = None
    timer: str | None = None


def usable(median) -> bool:
    """A timing that can be compared: a finite positive number. inf says the candidate cannot run;
    0, a negative number, NaN or anything else is a timer that failed (the one rule: selection,
    pooling and the tables' checks read timings through it)."""
    return isinstance(median, (int, float)) and not isinstance(median, bool) and 0 < median < math.inf


def as_sample(value) -> Sample:
    """A timer's answer (a number, or Triton's ``[median, p20, p80]`` list) as a ``Sample``; a
    timing that is not ``usable`` counts as a candidate that cannot run (inf)."""
    if isinstance(value, Sample):
        return value
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    median = float(values[0]) if values and usable(values[0]) else math.inf
    spread = None
    if len(values) >= 3 and all(isinstance(v, (int, float)) for v in values[:3]) and 0 < median < math.inf:
        spread = abs(float(values[2]) - float(values[1])) / median
    timer = getattr(value, "timer", None)  # a list that names its timer (the guard's wall clock)
    return Sample(median, spread, timer if isinstance(timer, str) else None)


def finalists(first: Mapping[int, float], band: float) -> list[int]:
    """The candidates whose first-pass median is within ``band`` of the best (finite ones only), in
    declaration order; with the runner-up too where it is within SCREEN_MOST bands, so that the
    rounds measure the noise (one timing each cannot tell a clear best from a lucky one)."""
    finite = {i: t for i, t in first.items() if math.isfinite(t) and t > 0}
    if not finite:
        return []
    ranked = sorted(finite, key=lambda i: (finite[i], i))
    best = finite[ranked[0]]
    chosen = {i for i, t in finite.items() if t <= best * (1 + band)}
    if len(chosen) == 1 and len(ranked) > 1 and finite[ranked[1]] <= best * (1 + SCREEN_MOST * band):
        chosen.add(ranked[1])
    return sorted(chosen)


def out_of_race(first: Mapping[int, float], index: int, band: float) -> bool:
    """Whether candidate ``index`` is out of the race after the first pass: even were its timing
    slowed SPIKE_MOST-fold by another process, it would lie beyond the farthest any finalist is
    taken from (SCREEN_MOST bands of the best), so timing it again cannot change the winner."""
    finite = [t for t in first.values() if usable(t)]
    timing = first.get(index)
    if not finite or not usable(timing):
        return True  # it cannot run: nothing to time again
    return timing > min(finite) * SPIKE_MOST * (1 + SCREEN_MOST * band)


def to_confirm(first: Mapping[int, float], alive: Sequence[int], band: float) -> list[int]:
    """A lone finalist and the first pass's runner-up, to be timed once more (the lower of each one's
    two timings then screens): another process slowing one first-pass timing 1.4-2x can push the true
    best out of the band, and no round would time it again (2 of 6 four-rank jobs on an H100 froze a
    launcher 4.5-6 % behind so). Empty where there are several finalists, no runner-up, or the
    runner-up is ``out_of_race`` (a candidate whose timing takes 20 s was timed again for nothing)."""
    if len(alive) != 1:
        return []
    others = sorted((t, i) for i, t in first.items() if i not in alive and math.isfinite(t) and t > 0)
    if not others or out_of_race(first, others[0][1], band):
        return []
    return [alive[0], others[0][1]]


def round_order(alive: Sequence[int], round_number: int) -> list[int]:
    """The order of one round: declaration order in even rounds, reversed in odd ones."""
    ordered = sorted(alive)
    return ordered if round_number % 2 == 0 else ordered[::-1]


def _paired(rounds: Sequence[Mapping[int, float]], a: int, b: int) -> list[float]:
    """log(t_a / t_b) in each round that timed both (finite)."""
    found = []
    for timed in rounds:
        ta, tb = timed.get(a), timed.get(b)
        if ta is not None and tb is not None and 0 < ta < math.inf and 0 < tb < math.inf:
            found.append(math.log(ta / tb))
    return found


def _z(rounds: int) -> float:
    """Z widened for few rounds, as Student's t widens a normal quantile (Cornish-Fisher, to 1/df²):
    a few timings look quieter than they are."""
    df = max(1, rounds - 1)
    return Z + (Z ** 3 + Z) / (4 * df) + (5 * Z ** 5 + 16 * Z ** 3 + 3 * Z) / (96 * df * df)


def _estimate(differences: Sequence[float], per_call: float | None) -> tuple[float, float]:
    """(the mean of the paired differences, its standard error), leaving out spikes: those more than
    OUTLIER robust deviations from their median. Another process sharing the GPU slows a timing now
    and then by 40-100 % (4 ranks on an H100); kept, such spikes in 1 call of 20 froze a config
    4.5 % behind in 41 % of simulated cold runs (6 % without spikes). The error is the larger of the
    pair's own and the one the pooled per-call noise gives: a few rounds of one pair can look far
    quieter than they are."""
    ordered = sorted(differences)
    centre = statistics.median(ordered)
    scale = MAD_TO_SD * statistics.median(abs(d - centre) for d in ordered)
    kept = [d for d in ordered if abs(d - centre) <= OUTLIER * scale] if scale > 0 else ordered
    n = len(kept)
    middle = sum(kept) / n
    own = statistics.stdev(kept) / math.sqrt(n) if n > 1 else 0.0
    pooled = per_call * math.sqrt(2) / math.sqrt(n) if per_call else 0.0
    return middle, max(own, pooled)


def leader(rounds: Sequence[Mapping[int, float]], alive: Sequence[int]) -> int:
    """The finalist with the lowest median over the rounds (declaration order breaks an exact tie)."""
    def median_of(i):
        values = [r[i] for r in rounds if i in r]
        return statistics.median(values) if values else math.inf
    return min(sorted(alive), key=median_of)


def noise(rounds: Sequence[Mapping[int, float]], alive: Sequence[int]) -> float | None:
    """The per-call relative noise the rounds measured: the spread of each finalist's log timings
    around its own median, pooled (None before two rounds)."""
    deviations, count = [], 0
    for i in alive:
        logs = [math.log(r[i]) for r in rounds if 0 < r.get(i, math.inf) < math.inf]
        if len(logs) >= 2:
            middle = statistics.median(logs)
            deviations += [abs(v - middle) for v in logs]
            count = max(count, len(logs))
    if not deviations:
        return None
    return MAD_TO_SD * statistics.median(deviations) * count / (count - 1)  # a median's own pull, undone


def widened(first: Mapping[int, float], alive: Sequence[int], band: float, per_call: float | None) -> list[int]:
    """First-pass candidates that were not finalists but lie within the noise measured of the best
    (SCREEN_Z per-call noises of a difference): with noisy timings the true best can miss the band."""
    finite = {i: t for i, t in first.items() if math.isfinite(t) and t > 0}
    if not finite or not per_call:
        return []
    reach = min(max(band, SCREEN_Z * per_call * math.sqrt(2)), SCREEN_MOST * band)
    best = min(finite.values())
    return sorted(i for i, t in finite.items() if i not in alive and t <= best * (1 + reach))


class Standing(NamedTuple):
    """Where the rounds stand: the finalists still in, the leader, each other finalist's estimated
    slowdown against the leader and its standard error, and whether the rounds may stop."""

    alive: tuple[int, ...]
    leader: int
    behind: dict
    settled: bool


def standing(rounds: Sequence[Mapping[int, float]], alive: Sequence[int], joined: Mapping[int, int],
             last: bool = False) -> Standing:
    """Drop the finalists clearly behind the leader (by more than TIE_FLOOR, beyond Z standard
    errors); keep those clearly within it (a tie); the rest is open, and more rounds help. After the
    ``last`` round an open one is kept when its estimate is within TIE_FLOOR and one standard error,
    else dropped.
    ``joined``: the round each finalist joined at (none is judged before MIN_ROUNDS of its own)."""
    best = leader(rounds, alive)
    per_call = noise(rounds, alive)
    kept, behind, open_, sure = [best], {}, False, {best}
    for i in sorted(alive):
        if i == best:
            continue
        differences = _paired(rounds, i, best)
        if len(differences) < MIN_ROUNDS or len(rounds) - joined.get(i, 0) < MIN_ROUNDS:
            kept.append(i)
            open_ = True
            continue
        slower, error = _estimate(differences, per_call)
        behind[i] = (slower, error)
        z = _z(len(differences))
        if slower - TIE_FLOOR > z * error:
            continue  # clearly behind: dropped
        if slower + z * error < TIE_FLOOR or (last and slower <= TIE_FLOOR + error):
            kept.append(i)  # a tie
            sure.add(i)
        elif not last:
            kept.append(i)
            open_ = True
    # Settled only when no finalist is open: while one is, it may yet prove faster than the leader
    # by more than TIE_FLOOR and drop the first declared, even one leading now (a job on the H200
    # froze a config 2 % behind after 3 rounds when the rounds stopped on "the first declared leads").
    return Standing(tuple(sorted(kept)), best, behind, not open_)


class Verdict(NamedTuple):
    """The selection: the winner (an index of the candidates), how (``clear``, ``tie``, ``one
    finalist``, ``one pass``), the candidates tied with it, its margin (how much slower the next
    best is, relative; negative when a tie went to a slower candidate declared first), and how many
    rounds were timed."""

    winner: int
    how: str
    tied: tuple[int, ...]
    margin: float | None
    rounds: int


def verdict(first: Mapping[int, float], rounds: Sequence[Mapping[int, float]], alive: Sequence[int],
            retimed: bool) -> Verdict:
    """The verdict from the first pass and the rounds: with one finalist left, it; with several, the
    one declared first (a tie); without rounds, the first pass's best."""
    if not retimed or not rounds:
        finite = {i: t for i, t in first.items() if usable(t)}
        if not finite:  # every timing failed: the first declared runs, as Triton launches it
            return Verdict(min(first), UNTIMED, (), None, 0)
        winner = min(sorted(finite), key=lambda i: finite[i])
        others = [t for i, t in finite.items() if i != winner]
        margin = (min(others) / finite[winner] - 1) if others else None
        return Verdict(winner, "one pass" if not retimed else "one finalist", (), margin, 0)
    alive = sorted(alive)
    winner = alive[0]
    medians = _round_medians(rounds)
    others = [t for i, t in medians.items() if i != winner and math.isfinite(t)]
    if not others:  # the rounds timed the winner alone: the first pass says how far the rest is
        others = [t * medians[winner] / first[winner] for i, t in first.items()
                  if i != winner and math.isfinite(t) and first.get(winner)]
    margin = (min(others) / medians[winner] - 1) if others and medians.get(winner) else None
    return Verdict(winner, "tie" if len(alive) > 1 else "clear", tuple(alive) if len(alive) > 1 else (), margin,
                   len(rounds))


def _round_medians(rounds: Sequence[Mapping[int, float]]) -> dict[int, float]:
    timed: dict[int, list] = {}
    for r in rounds:
        for i, t in r.items():
            timed.setdefault(i, []).append(t)
    return {i: statistics.median(ts) for i, ts in timed.items()}


def summary(first: Mapping[int, Sample], rounds: Sequence[Mapping[int, float]],
            confirmed: Sequence[int] = ()) -> dict[int, dict]:
    """What a table keeps of each candidate: its median and relative spread (over the rounds where it
    was re-timed, else the first pass's), and how many timings that is (2 for a ``confirmed`` one:
    the lower of its two first-pass timings)."""
    kept = {}
    by_round: dict[int, list] = {}
    for r in rounds:
        for i, t in r.items():
            by_round.setdefault(i, []).append(t)
    for i, sample in first.items():
        values = by_round.get(i, [])
        if len(values) >= 2 and all(math.isfinite(v) for v in values):
            middle = statistics.median(values)
            spread = MAD_TO_SD * statistics.median(abs(v - middle) for v in values) / middle if middle else None
            kept[i] = {"median": middle, "spread": spread, "n": len(values)}
        else:
            kept[i] = {"median": sample.median if math.isfinite(sample.median) else None,
                       "spread": sample.spread, "n": 2 if i in confirmed else 1}
    return kept
