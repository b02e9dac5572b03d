"""What pooling cold runs (AUTOTUNE_POOL_RUNS, ``report merge --rule pooled``) buys where a config's
speed moves between processes: for each scenario, over SETS simulated jobs, how often the frozen
winner was the most frequent pick and how often it was within 0.5 % of the true best, for the
winner of one cold run (today's default) and the winner pooled over 3 and 5 cold runs.

Each simulated cold process draws its own speed for each candidate (the true cost times a
lognormal of ``between``), then runs the guard's selection (deciding/retime.py: first pass,
finalists, rounds) over timings with a per-call noise; pooling (core/pooling.py) then judges the
runs' kept measurements, as a table holds them. Pure rules: no Triton, no GPU.

The scenarios are fla's keys of the acceptance training program as six one-rank cold runs on an
H100 measured them (2026-12-06: each job's rounds agreed to 0.1-0.3 % a timing, the same pair's ratio
moved 0.8-3 % between jobs), beside a pure tie and a clear best.

The last columns run pooling as the guard does it (AUTOTUNE_POOL_RUNS=3): run 1 times every
candidate, each later run only the candidates that still contend (``pooling.to_time``), until the
key is settled; they say how often that froze a winner within 0.5 % of the true best, and what runs
2..N timed against run 1 (the price of pooling each run pays again).

    python scripts/bench_pooling.py [SETS]
"""

import collections
import math
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from autotune_guard.core import pooling  # noqa: E402
from autotune_guard.deciding import retime  # noqa: E402

# name: (true costs in declaration order, per-call noise, each candidate's spread between processes)
SCENARIOS = {
    "layer_norm_fwd: 2 warps 1.9 % ahead, pairs move 3.1 % between runs": ([1.019, 1.0, 1.17], 0.003, 0.022),
    "layer_norm_bwd: 3 within 0.6 %, pairs move 0.9 %": ([1.006, 1.0, 1.003], 0.003, 0.0065),
    "swiglu_fwd: 1.4 % apart, pairs move 1.9 %": ([1.014, 1.0] + [1.2] * 11, 0.003, 0.0135),
    "declared first 2 % behind, pairs move 1.4 %": ([1.02, 1.0, 1.3], 0.003, 0.01),
    "a pure tie of 3, pairs move 1.4 %": ([1.0, 1.0, 1.0], 0.003, 0.01),
    "a clear best (next 5 % behind), pairs move 3 %": ([1.05, 1.0, 1.2], 0.003, 0.021),
}
POOLS = (1, 3, 5)


def cold_run(costs, noise, between, rng, indices=None):
    """One cold process's selection, as a table keeps it (``retime.summary``), over ``indices`` (default all)."""
    speed = [c * math.exp(rng.gauss(0, between)) for c in costs]
    found = retime.select(lambda chosen: {i: speed[i] * math.exp(rng.gauss(0, noise)) for i in chosen},
                          range(len(costs)) if indices is None else indices, 0.03, 10)
    return retime.summary(found, [str(i) for i in range(len(costs))], 0.03, {})


def guard_pool(costs, noise, between, rng, wanted=3):
    """Pooling as the guard runs it: (the frozen winner, timings of run 1, timings of the runs after it,
    the runs made). A run after the first times only what ``pooling.to_time`` names, until settled."""
    signatures = [str(i) for i in range(len(costs))]
    runs = [cold_run(costs, noise, between, rng)]
    later = 0
    while len(runs) < 2 * wanted:  # a bound: a key always settles well before it
        todo = pooling.to_time(runs, signatures, wanted)
        if todo is None:
            break
        runs.append(cold_run(costs, noise, between, rng, [int(sig) for sig in todo]))
        later += runs[-1]["timed"]
    found = pooling.pool(runs, signatures) if len(runs) > 1 else None
    return int(found.winner if found else runs[0]["winner"]), runs[0]["timed"], later, len(runs)


def frozen(runs, count):
    """The winner a table freezes: the first run's own, or pooled over the first ``count`` runs."""
    if count == 1:
        return int(runs[0]["winner"])
    return int(pooling.pool(runs[:count], [str(i) for i in range(len(runs[0]["candidates"]))]).winner)


def main():
    sets = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    print(f"{sets} simulated jobs per scenario; the frozen winner: the most frequent pick / within 0.5 % of the "
          "true best, for 1 run, 3 pooled and 5 pooled")
    print("| scenario | 1 run | 3 pooled | 5 pooled | guard, POOL_RUNS=3: within 0.5 % | its runs | runs 2.. timed, x run 1 |")
    print("|---|---|---|---|---|---|---|")
    for name, (costs, noise, between) in SCENARIOS.items():
        rng = random.Random(1)
        picks = {count: [] for count in POOLS}
        guarded, first, later, made = [], 0, 0, 0
        for _ in range(sets):
            runs = [cold_run(costs, noise, between, rng) for _ in range(max(POOLS))]
            for count in POOLS:
                picks[count].append(frozen(runs, count))
            winner, timed_first, timed_later, count = guard_pool(costs, noise, between, rng)
            guarded.append(winner)
            first, later, made = first + timed_first, later + timed_later, made + count
        best = min(costs)
        cells = []
        for count in POOLS:
            same = collections.Counter(picks[count]).most_common(1)[0][1] / sets
            good = sum(costs[i] <= best * 1.005 for i in picks[count]) / sets
            cells.append(f"{same:.0%} / {good:.0%}")
        good = sum(costs[i] <= best * 1.005 for i in guarded) / sets
        cells += [f"{good:.0%}", f"{made / sets:.1f}", f"{later / first:.2f}"]
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
