"""What the batch-invariance wake test costs at interpreter start when nothing is set.

``autotune_guard.pth`` wakes the guard on an ``AUTOTUNE_*`` variable, on ``VLLM_BATCH_INVARIANT``
not 0 or on ``TORCHINDUCTOR_BATCH_INVARIANT=1`` (issue 47). Without any, the line now makes two
more ``os.environ.get`` and compares their text. Two variants of the line, side by side in one run,
with no ``AUTOTUNE_*`` and neither switch in the environment:

* ``before``  the line without the switch tests (the shipped line with those clauses removed);
* ``after``   the shipped line.

1. In one process: each line compiled once, then executed ``--reps`` times per round, the rounds
   interleaved (the order alternating), median per-execution ns. The finder the line puts on
   ``sys.meta_path`` is there from the first execution on, as in a venv that runs the ``.pth``
   twice, so what is timed is the test and the finder check.
2. Cold interpreters: ``python -S`` running ``site.addsitedir`` of a folder holding one line,
   ``--rounds`` each, interleaved; the median of per-round differences.

Usage:  python scripts/bench_switch_check.py [--reps 200000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLAUSE = (' or os.environ.get("VLLM_BATCH_INVARIANT", "0").strip() not in ("", "0")'
          ' or os.environ.get("TORCHINDUCTOR_BATCH_INVARIANT") == "1"')
SWITCHES = ("VLLM_BATCH_INVARIANT", "TORCHINDUCTOR_BATCH_INVARIANT")
COLD = ("import site, sys, time\n"
        "t0 = time.perf_counter_ns(); site.addsitedir(sys.argv[1]); t1 = time.perf_counter_ns()\n"
        "print(t1 - t0)\n")


def lines() -> dict[str, str]:
    with open(os.path.join(REPO, "autotune_guard.pth")) as f:
        after = f.read()
    if CLAUSE not in after:
        raise SystemExit(f"the shipped .pth line has no {CLAUSE.strip()!r}: nothing to compare")
    return {"before": after.replace(CLAUSE, ""), "after": after}


def in_process(variants: dict[str, str], reps: int, rounds: int = 20) -> dict[str, float]:
    code = {name: compile(text, f"<{name}>", "exec") for name, text in variants.items()}
    per = {name: [] for name in variants}
    saved = list(sys.meta_path)
    try:
        for r in range(rounds):
            for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                glob = {"__name__": "pth"}
                t0 = time.perf_counter_ns()
                for _ in range(reps):
                    exec(code[name], glob)
                per[name].append((time.perf_counter_ns() - t0) / reps)
                sys.meta_path[:] = saved  # the next variant puts its own finder
    finally:
        sys.meta_path[:] = saved
    return {name: statistics.median(found) for name, found in per.items()}


def cold(variants: dict[str, str], rounds: int, env: dict) -> list[float]:
    with tempfile.TemporaryDirectory() as d:
        dirs = {}
        for name, text in variants.items():
            dirs[name] = os.path.join(d, name)
            os.mkdir(dirs[name])
            with open(os.path.join(dirs[name], "autotune_guard.pth"), "w") as out:
                out.write(text)
        diffs = []
        for r in range(rounds):
            got = {}
            for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                run = subprocess.run([sys.executable, "-S", "-c", COLD, dirs[name]], env=env, check=True,
                                     capture_output=True, text=True)
                got[name] = int(run.stdout) / 1e6
            diffs.append(got["after"] - got["before"])
        return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_") and k not in SWITCHES}
    for name in [k for k in os.environ if k.startswith("AUTOTUNE_") or k in SWITCHES]:
        del os.environ[name]  # this process too: the in-process lines must take the inactive branch
    variants = lines()
    timed = in_process(variants, args.reps)
    print(f"{sys.executable} (Python {sys.version.split()[0]}), {len(os.environ)} variables, none set:")
    print(f"  the line executed in-process, median ns: before {timed['before']:.0f}, after {timed['after']:.0f}, "
          f"difference {timed['after'] - timed['before']:+.0f} ns")
    diffs = cold(variants, args.rounds, env)
    q = statistics.quantiles(diffs, n=4)
    print(f"  cold `python -S` + site.addsitedir, {args.rounds} paired rounds: median of differences "
          f"{statistics.median(diffs):+.4f} ms (quartiles {q[0]:+.4f} .. {q[2]:+.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
