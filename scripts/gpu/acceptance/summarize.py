"""One table for runs of train_lm.py (scripts/gpu/acceptance.sh): per run, the ranks that finished,
benchmark calls (Triton's do_bench and Inductor's, all processes), time to first step (slowest
rank), steady step (median of steps 10 on, all ranks) against the first run named, and the
parameter hashes: distinct across ranks, and whether they equal the other runs'; Dynamo's graphs and
graph breaks, all ranks.

usage: summarize.py WORK_DIR RUN [RUN...] [--untimed RUN,RUN]   (the first RUN is the reference, normally plain)

A run that did not run (no log: skipped for a short lease) gets a row saying so. With ``--untimed``,
each run named there must have run, benchmarked nothing and ended with one hash across its ranks,
else the check's failures are printed and the exit status is 1.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys


def load(work, name):
    folder = os.path.join(work, name)
    if not os.path.exists(os.path.join(folder, "log.txt")):
        return None
    results, text = [], open(os.path.join(folder, "log.txt"), errors="replace").read()
    for found in re.finditer(r"RESULT (\{)", text):  # ranks print at once: lines may interleave
        try:
            results.append(json.JSONDecoder().raw_decode(text, found.start(1))[0])
        except ValueError:
            pass
    calls = {"do_bench": 0, "inductor": 0, "graphs": 0, "graph_breaks": 0}
    for path in glob.glob(os.path.join(folder, "calls.*.json")):
        found = json.load(open(path))
        for name in calls:
            calls[name] += found.get(name, 0)
    steady = [t for r in results for t in r["step_s"][10:]]
    return {"ranks": len(results), "calls": calls, "first": max((r["first_step_s"] for r in results), default=None),
            "steady": statistics.median(steady) if steady else None,
            "hashes": sorted({r["params"] for r in results})}


def check_untimed(runs, names):
    """What is wrong with the runs that should have timed nothing (a table answered every key)."""
    wrong = []
    for name in names:
        run = runs.get(name)
        if run is None:
            wrong.append(f"{name}: did not run")
        elif run["calls"]["do_bench"] or run["calls"]["inductor"] or len(run["hashes"]) != 1:
            wrong.append(f"{name}: {run['calls']['do_bench']} + {run['calls']['inductor']} benchmark calls, "
                         f"{len(run['hashes'])} hashes (expected 0 + 0 and 1)")
    return wrong


def main():
    parser = argparse.ArgumentParser(description="One table for runs of train_lm.py.")
    parser.add_argument("work")
    parser.add_argument("names", nargs="+", metavar="RUN")
    parser.add_argument("--untimed", default="", help="RUN,RUN: runs that must have timed nothing, with one hash")
    args = parser.parse_args()
    work, names, untimed = args.work, args.names, [n for n in args.untimed.split(",") if n]
    loaded = {name: load(work, name) for name in names}
    for name in [n for n, run in loaded.items() if run is None]:
        print(f"{name}: not run (no log)")
    runs = {name: run for name, run in loaded.items() if run is not None}
    base = runs.get(names[0]) or {"first": None, "steady": None}
    print(f"| run | ranks | do_bench + Inductor calls (job) | first step (s) | vs {names[0]} | steady step (ms) | "
          f"vs {names[0]} | param hashes across ranks | same as | dynamo graphs / breaks (job) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, run in runs.items():
        first = f"{run['first']:.1f}" if run["first"] is not None else "-"
        ratio = f"{run['first'] / base['first']:.2f}x" if run["first"] and base["first"] else "-"
        steady = f"{run['steady'] * 1e3:.2f}" if run["steady"] else "-"
        sratio = f"{run['steady'] / base['steady']:.3f}x" if run["steady"] and base["steady"] else "-"
        same = [other for other, o in runs.items() if other != name and o["hashes"] == run["hashes"]
                and len(run["hashes"]) == 1]
        print(f"| {name} | {run['ranks']} | {run['calls']['do_bench']} + {run['calls']['inductor']} | {first} | {ratio} "
              f"| {steady} | {sratio} | {len(run['hashes'])} ({', '.join(run['hashes'])}) | {', '.join(same) or '-'} "
              f"| {run['calls']['graphs']} / {run['calls']['graph_breaks']} |")
    print(json.dumps(runs))
    for name, run in runs.items():  # beside the log, for the record
        with open(os.path.join(work, name, "summary.json"), "w") as out:
            json.dump(run, out)
    wrong = check_untimed(runs, untimed)
    for line in wrong:
        print(f"CHECK FAILED: {line}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
