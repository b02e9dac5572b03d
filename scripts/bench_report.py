"""The report at scale: ``merge`` and ``show --check`` of many generated rank files, their time
and peak memory: of the largest process (``ru_maxrss`` from ``os.wait4``: the report or one of
the workers it reads on) and of all of them together (sampled from ``/proc`` every 50 ms).

The files are records as a record run writes them: ``--files`` ranks, ``--entries`` keys each
(``--kernels`` kernels), each entry with 8 candidates and Triton's timings of all 8; one rank in
50 chose differently for one key in 10 (so show reports disagreements and merge votes).

``--old COMMIT`` measures the package as it was at COMMIT too, side by side in one run (the
machine's load then weighs on both alike); ``--jobs N`` is passed to the report of today.

Usage:  python scripts/bench_report.py [--files 1024] [--entries 2000] [--keep DIR] [--old COMMIT] [--jobs N] [--html]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

CANDIDATES = [{"kwargs": {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 32}, "num_warps": w, "num_stages": 3, "num_ctas": 1}
              for m in (64, 128) for n in (64, 128) for w in (4, 8)]


def _sig(desc):
    parts = [f"{k}={v}" for k, v in sorted(desc["kwargs"].items())]
    return ",".join(parts + [f"{k}={desc[k]}" for k in ("num_warps", "num_stages", "num_ctas")])


def generate(directory: str, files: int, entries: int, kernels: int) -> int:
    prefix = os.path.join(directory, "rec")
    sigs = [_sig(c) for c in CANDIDATES]
    total = 0
    for rank in range(files):
        rng = random.Random(rank)
        table = {}
        for i in range(entries):
            winner = i % len(CANDIDATES)
            if i % 10 == 0 and rank % 50 == 7:
                winner = (winner + 1) % len(CANDIDATES)
            timings = {sig: [t, t * 0.98, t * 1.02] for sig in sigs for t in [round(rng.uniform(0.01, 0.05), 6)]}
            table.setdefault(f"model.ops.kernel_{i % kernels}", {})[f"{i},4096,torch.float16"] = {
                "config": CANDIDATES[winner], "signature": sigs[winner], "how": "timed", "timings": timings,
                "candidates": CANDIDATES}
        document = {"format": "autotune_guard.record/1", "arch": "sm90", "rank": rank, "world_size": files,
                    "mode": "record", "versions": {"triton": "3.6.0", "torch": "2.11.0", "python": "3.12.3"},
                    "packages": {"model": "1.0"}, "run_id": "bench", "attempt": 0, "pid": 1000 + rank, "host": "node",
                    "started": 0.0, "updated": 0.0, "written": "2026-12-03T00:00:00+0000", "complete": True,
                    "kernels": table}
        path = f"{prefix}.rank{rank}.node-{1000 + rank}.json"
        with open(path, "w") as out:
            json.dump(document, out, indent=1, sort_keys=True)
        total += os.path.getsize(path)
    return total


def _tree_rss(pid: int) -> int:
    """The resident bytes of ``pid`` and every process under it (the report's workers), now."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/statm") as statm:
                total += int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{current}/task/{current}/children") as children:
                todo += [int(child) for child in children.read().split()]
        except (OSError, ValueError):
            pass  # it ended between two reads
    return total


def measure(args: list[str], package_dir: str | None = None) -> tuple[float, float, float, int]:
    """Seconds, peak RSS in MiB of the largest process (``os.wait4``: the report or one of its
    workers), the peak of all of them together (sampled every 50 ms), and the exit status of
    ``python -m autotune_guard.report ARGS`` (the package found in ``package_dir`` when given)."""
    env = dict(os.environ)
    if package_dir:
        env["PYTHONPATH"] = package_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    peak_tree = [0]
    began = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "autotune_guard.report", *args], stdout=subprocess.DEVNULL,
                                stderr=err, env=env, cwd=package_dir or None)
        done = threading.Event()

        def sample():
            while not done.wait(0.05):
                peak_tree[0] = max(peak_tree[0], _tree_rss(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the largest child's so far
        took = time.perf_counter() - began
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        if proc.returncode not in (0, 1):
            sys.exit(f"report {' '.join(args)} failed ({proc.returncode}): {err.read()[-2000:]}")
    return took, usage.ru_maxrss / 1024, peak_tree[0] / 2**20, proc.returncode


def _checkout(commit: str) -> str:
    """The package's files at ``commit``, in a temporary directory (run from there: its
    ``autotune_guard`` comes first on the path, before the installed one)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = tempfile.mkdtemp(prefix="bench_report-old-")
    archive = subprocess.run(["git", "-C", root, "archive", commit, "autotune_guard"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", target], input=archive, check=True)
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1024)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--kernels", type=int, default=40)
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (reused when it holds the files)")
    ap.add_argument("--old", metavar="COMMIT", help="also measure the package as it was at COMMIT (git archive)")
    ap.add_argument("--jobs", help="passed to the report (default: its own choice, the cores available)")
    ap.add_argument("--html", action="store_true",
                    help="also measure show --format html (today's code only with --old: the old page read every "
                         "file whole, about 3x their size in memory)")
    opts = ap.parse_args()
    opts.report_args = ["--jobs", opts.jobs] if opts.jobs else []
    old_dir = _checkout(opts.old) if opts.old else None
    directory = os.path.abspath(opts.keep) if opts.keep else tempfile.mkdtemp(prefix="bench_report-")
    os.makedirs(directory, exist_ok=True)
    try:
        existing = [f for f in os.listdir(directory) if f.startswith("rec.rank")]
        if len(existing) != opts.files:
            began = time.perf_counter()
            size = generate(directory, opts.files, opts.entries, opts.kernels)
            print(f"generated {opts.files} files of {opts.entries} entries, {size / 2**20:.0f} MiB, in "
                  f"{time.perf_counter() - began:.0f} s", flush=True)
        else:
            size = sum(os.path.getsize(os.path.join(directory, f)) for f in existing)
        print(f"report at scale ({time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
              f"{os.cpu_count()} cores): {opts.files} record files x {opts.entries} entries, {size / 2**20:.0f} MiB")
        print(f"command: python scripts/bench_report.py --files {opts.files} --entries {opts.entries}"
              + (f" --old {opts.old}" if opts.old else "") + (f" --jobs {opts.jobs}" if opts.jobs else "")
              + (" --html" if opts.html else ""))
        prefix = os.path.join(directory, "rec")
        out = os.path.join(directory, "out")
        os.makedirs(out, exist_ok=True)
        commands = [("merge", ["merge", prefix, "-o", os.path.join(out, "sm90.json")], True),
                    ("show --check", ["show", "--check", prefix], True)]
        if opts.html:
            commands.append(("show html", ["show", "--format", "html", "-o", os.path.join(out, "page.html"), prefix], False))
        for label, args, compare_old in commands:
            for name, package_dir in ((f"at {opts.old}", old_dir), ("now", None)) if old_dir and compare_old \
                    else (("", None),):
                took, peak, together, status = measure(args + (opts.report_args if package_dir is None else []), package_dir)
                print(f"{label:14} {name:>16} {took:7.1f} s   peak RSS {peak:5.0f} MiB (largest process), "
                      f"{together:5.0f} MiB (all processes)   exit {status}", flush=True)
    finally:
        if not opts.keep:
            shutil.rmtree(directory, ignore_errors=True)
        if old_dir:
            shutil.rmtree(old_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
