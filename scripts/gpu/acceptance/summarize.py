"""One table for runs of train_lm.py (scripts/gpu/acceptance.sh): per run, the ranks that finished,
benchmark calls (Triton's do_bench and Inductor's, all processes), time to first step (slowest
rank), steady step (median of steps 10 on, all ranks) against the first run named, and the
parameter hashes: distinct across ranks, and whether they equal the other runs'.

usage: summarize.py WORK_DIR RUN [RUN...]     (the first RUN is the reference, normally plain)
"""

import glob
import json
import os
import statistics
import sys


def load(work, name):
    folder = os.path.join(work, name)
    results = []
    for line in open(os.path.join(folder, "log.txt"), errors="replace"):
        if line.startswith("RESULT "):
            results.append(json.loads(line[len("RESULT "):]))
    calls = {"do_bench": 0, "inductor": 0}
    for path in glob.glob(os.path.join(folder, "calls.*.json")):
        found = json.load(open(path))
        calls["do_bench"] += found["do_bench"]
        calls["inductor"] += found["inductor"]
    steady = [t for r in results for t in r["step_s"][10:]]
    return {"ranks": len(results), "calls": calls, "first": max((r["first_step_s"] for r in results), default=None),
            "steady": statistics.median(steady) if steady else None,
            "hashes": sorted({r["params"] for r in results})}


def main():
    work, names = sys.argv[1], sys.argv[2:]
    runs = {name: load(work, name) for name in names}
    base = runs[names[0]]
    print(f"| run | ranks | do_bench + Inductor calls (job) | first step (s) | vs {names[0]} | steady step (ms) | "
          f"vs {names[0]} | param hashes across ranks | same as |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, run in runs.items():
        first = f"{run['first']:.1f}" if run["first"] is not None else "-"
        ratio = f"{run['first'] / base['first']:.2f}x" if run["first"] and base["first"] else "-"
        steady = f"{run['steady'] * 1e3:.2f}" if run["steady"] else "-"
        sratio = f"{run['steady'] / base['steady']:.3f}x" if run["steady"] and base["steady"] else "-"
        same = [other for other, o in runs.items() if other != name and o["hashes"] == run["hashes"]
                and len(run["hashes"]) == 1]
        print(f"| {name} | {run['ranks']} | {run['calls']['do_bench']} + {run['calls']['inductor']} | {first} | {ratio} "
              f"| {steady} | {sratio} | {len(run['hashes'])} ({', '.join(run['hashes'])}) | {', '.join(same) or '-'} |")
    print(json.dumps(runs))


if __name__ == "__main__":
    main()
