"""The finalists timed again (``core.selection``'s rules carried out): the selection a job freezes.

``select(time_each, indices, settings)`` times every candidate once (the first pass), then the
finalists in rounds of alternating order, each timing the autotuner's own (Triton's ``_bench``:
its ``do_bench``, with its warm-up and the median of its repetitions), until the winner is clear,
a tie is declared or the rounds run out. ``time_each(indices)`` times the candidates at
``indices`` in that order and returns ``{index: timing}`` (a number, or ``[median, p20, p80]``).
A lone finalist and the runner-up are timed once more before it is believed (``selection.to_confirm``).

With ``known`` (timings a table kept, by index, measured on this kind of device with these
versions), the first pass times only the candidates it lacks.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable, Mapping, NamedTuple, Sequence

from ..core import selection
from ..core.selection import Sample, as_sample

logger = logging.getLogger("autotune_guard")


class Retimed(NamedTuple):
    """What the selection measured: the verdict, the first pass (by index), the rounds (index ->
    median, one dict a round), how many timings this process made, the seconds it took, and the
    candidates whose first pass was timed twice (a lone finalist and its runner-up)."""

    verdict: selection.Verdict
    first: dict
    rounds: list
    timed: int
    seconds: float
    confirmed: tuple = ()
    timer: str | None = None  # the timer that took the timings where it says (``Sample.timer``)


def select(time_each: Callable[[Sequence[int]], Mapping], indices: Sequence[int], band: float, max_rounds: int,
           known: Mapping[int, Sample] | None = None, kept: int | None = None) -> Retimed:
    """The selection over the candidates at ``indices`` (see the module's docstring). ``kept``: the
    winner chosen before among the ``known`` candidates; it stands when no new one is a finalist."""
    started = time.monotonic()
    known = {i: as_sample(value) for i, value in (known or {}).items()}
    timing = _Timing(time_each, known.values())
    missing = [i for i in indices if i not in known]
    first = {**{i: known[i] for i in indices if i in known}, **timing(missing)}
    medians = {i: s.median for i, s in first.items()}
    alive = selection.finalists(medians, band)
    if kept is not None and known and not set(alive) & set(missing):
        others = [t for i, t in medians.items() if i != kept and math.isfinite(t)]
        margin = min(others) / medians[kept] - 1 if others and medians.get(kept) else None
        return timing.retimed(selection.Verdict(kept, "kept", (), margin, 0), first, [], started)
    confirmed = tuple(selection.to_confirm(medians, alive, band)) if max_rounds > 0 else ()
    if confirmed:  # the runner-up first: a spike on the lone finalist's own timing is caught too
        again = timing(confirmed[::-1])
        first.update({i: min(first[i], again[i], key=lambda sample: sample.median) for i in confirmed})
        medians = {i: s.median for i, s in first.items()}
        alive = selection.finalists(medians, band)
    if max_rounds <= 0 or len(alive) <= 1:
        verdict = selection.verdict(medians, [], alive, retimed=max_rounds > 0)
        return timing.retimed(verdict, first, [], started, confirmed)
    rounds, alive = _rounds(timing, medians, alive, band, max_rounds)
    verdict = selection.verdict(medians, rounds, alive, retimed=True)
    return timing.retimed(verdict, first, rounds, started, confirmed)


def _rounds(timing, medians: Mapping[int, float], alive: list, band: float, max_rounds: int) -> tuple[list, list]:
    """The finalists timed in rounds of alternating order until the standing settles: (the rounds,
    the finalists left)."""
    rounds, joined, limit, number = [], {i: 0 for i in alive}, max_rounds, 0
    while number < limit:
        rounds.append({i: s.median for i, s in timing(selection.round_order(alive, number)).items()})
        number += 1
        if number == 2:  # the noise measured may say the band was too narrow for these timings
            late = selection.widened(medians, alive, band, selection.noise(rounds, alive))
            if late:
                alive = sorted([*alive, *late])
                joined.update({i: number for i in late})
                limit = max(limit, number + selection.MIN_ROUNDS)
        if number >= selection.MIN_ROUNDS:
            standing = selection.standing(rounds, alive, joined, last=number >= limit)
            alive = list(standing.alive)
            if len(alive) == 1 or standing.settled:
                break
    return rounds, alive


class _Timing:
    """``time_each`` as the selection calls it: how many timings it made here, and which timers
    named themselves (``Sample.timer``), kept timings' included."""

    def __init__(self, time_each, known):
        self.time_each, self.count = time_each, 0
        self.timers = {sample.timer for sample in known if sample.timer}

    def __call__(self, indices: Sequence[int]) -> dict[int, Sample]:
        if not indices:
            return {}
        found = self.time_each(list(indices))
        samples = {i: as_sample(found[i]) if found.get(i) is not None else Sample(math.inf) for i in indices}
        self.count += len(samples)
        self.timers.update(sample.timer for sample in samples.values() if sample.timer)
        return samples

    def retimed(self, verdict, first, rounds, started, confirmed=()) -> Retimed:
        timer = ", ".join(sorted(self.timers)) or None
        return Retimed(verdict, first, rounds, self.count, time.monotonic() - started, confirmed, timer)


def summary(retimed: Retimed, signatures: Sequence[str], band: float, versions: Mapping) -> dict:
    """What a record or table keeps of a selection: how it ended (``clear``, ``tie``, ``one
    finalist``, ``one pass``), the rounds, the winner's margin, the tie, every candidate's median and
    spread by signature, how many timings this process made, and what it was measured on (with the
    timer where it named itself: ``wall-clock`` timings are not GPU timings)."""
    verdict = retimed.verdict
    kept = selection.summary(retimed.first, retimed.rounds, retimed.confirmed)
    return {"how": verdict.how, "rounds": verdict.rounds, "band": band,
            "margin": None if verdict.margin is None else round(verdict.margin, 6),
            "tied": [signatures[i] for i in verdict.tied], "winner": signatures[verdict.winner],
            "timed": retimed.timed, "seconds": round(retimed.seconds, 3),
            "candidates": {signatures[i]: _rounded(entry) for i, entry in sorted(kept.items())},
            **({"timer": retimed.timer} if retimed.timer else {}),
            **{name: value for name, value in versions.items() if value}}


def _rounded(entry: dict) -> dict:
    return {name: (round(value, 6) if isinstance(value, float) and math.isfinite(value) else value)
            for name, value in entry.items()}


def known_timings(measured: Mapping | None, signatures: Sequence[str], versions: Mapping) -> dict[int, Sample] | None:
    """The timings a table kept for the key, by index of ``signatures``, where they were measured on
    this arch with these versions and some live candidate is new to them (only those are timed);
    None where they cannot serve (none kept, other versions, or nothing new). The kept winner's
    index is ``kept_winner(measured, signatures)``."""
    if not isinstance(measured, Mapping) or not isinstance(measured.get("candidates"), Mapping):
        return None
    if any(measured.get(name) != value for name, value in versions.items() if value):
        return None
    kept = measured["candidates"]
    known = {}
    timer = measured.get("timer") if isinstance(measured.get("timer"), str) else None
    for index, sig in enumerate(signatures):
        entry = kept.get(sig)
        if isinstance(entry, Mapping) and isinstance(entry.get("median"), (int, float)):
            known[index] = Sample(float(entry["median"]), entry.get("spread"), timer)
        elif isinstance(entry, Mapping) and sig in kept:
            known[index] = Sample(math.inf)  # it could not run then
    if len(known) == len(signatures) or not known:
        return None
    return known


def kept_winner(measured: Mapping, signatures: Sequence[str]) -> int | None:
    """The index of the winner a kept measurement chose (pooled over runs, where it was), among ``signatures``."""
    pooled = measured.get("pooled") if isinstance(measured, Mapping) else None
    winner = pooled.get("winner") if isinstance(pooled, Mapping) else None
    winner = winner or (measured.get("winner") if isinstance(measured, Mapping) else None)
    return signatures.index(winner) if winner in signatures else None
