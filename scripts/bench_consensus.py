"""Consensus vs auto across N ranks: total timing work and time to first result, side by side.

    python scripts/bench_consensus.py [--ranks 4] [--keys 8] [--candidates 8] [--sleep-ms 20] [--repeat 3]

Runs one torchrun job (gloo, TRITON_INTERPRET=1) per mode and order and prints one table.  Each
rank launches one autotuned kernel at ``--keys`` tuning keys.  Its timer stands in for GPU timing:
it sleeps ``--sleep-ms`` per candidate and returns that time plus a little noise (so that, as on a
GPU, ranks left to themselves pick different winners).  Orders: ``same`` (every rank meets the
keys in one order, like data-parallel ranks) and ``rotated`` (rank r starts at key r, like
pipeline stages meeting layers at different times).

Columns: timer calls summed over ranks; the timing work they stand for; time to first result
(slowest rank, from a common start to the return of its first launch); time to all results
(slowest rank, all keys); how many different choice digests the ranks ended with (1 = agreement).
Times are the median over ``--repeat`` jobs.

Rows ``consensus+table 1st`` and ``2nd``: the same command twice with ``AUTOTUNE_TABLE_PATH`` naming
one fresh table directory: the first run tunes each key once for the job and grows the table, the
second pins it all (its choices say ``table``, the first run's ``consensus``: digests differ by that
word). Row ``pinned from table``: AUTOTUNE_MODE=pinned from the same table, right after the 2nd run;
``2nd / pinned``: the 2nd run's time to all results over pinned's, per job and their median (a
key the table holds should cost under consensus what it costs under pinned).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def worker(out_dir: str, keys: int, candidates: int, sleep_ms: float, order: str) -> None:
    import random

    import torch
    import torch.distributed as dist
    import triton
    import triton.language as tl

    import autotune_guard

    calls = []

    def sleeping_timer(kernel_call, quantiles):
        # The stand-in for timing a candidate on a GPU: a fixed cost, a noisy result.
        time.sleep(sleep_ms / 1000)
        calls.append(1)
        t = sleep_ms * (1 + 0.05 * random.random())
        return [t, t, t]

    configs = [triton.Config({"BLOCK": 2 ** (4 + i % 4)}, num_warps=2 ** (i // 4)) for i in range(candidates)]

    @triton.autotune(configs=configs, key=["n"], do_bench=sleeping_timer)
    @triton.jit
    def bench_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = [64 + 8 * i for i in range(keys)]
    if order == "rotated":
        shift = rank * keys // world
        sizes = sizes[shift:] + sizes[:shift]
    tensors = [(torch.rand(n), torch.empty(n)) for n in sizes]
    dist.barrier()  # a common start
    start = time.perf_counter()
    first = None
    for (x, out), n in zip(tensors, sizes):
        bench_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        if first is None:
            first = time.perf_counter() - start
    everything = time.perf_counter() - start
    ok = all(torch.equal(out, x * 2) for x, out in tensors)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "calls": len(calls), "first_s": first, "all_s": everything, "ok": ok,
                   "digest": autotune_guard.choice_digest()}, f)
    dist.barrier()
    dist.destroy_process_group()


def run_job(mode: str, order: str, args, table_dir: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as out_dir:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
        env.update(TRITON_INTERPRET="1", AUTOTUNE_MODE=mode, OMP_NUM_THREADS="1")
        if table_dir:
            env["AUTOTUNE_TABLE_PATH"] = table_dir
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.ranks}",
               os.path.abspath(__file__), "--worker", out_dir, "--keys", str(args.keys),
               "--candidates", str(args.candidates), "--sleep-ms", str(args.sleep_ms), "--order", order]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            sys.exit(f"{mode}/{order} failed:\n{proc.stderr[-4000:]}")
        ranks = [json.load(open(os.path.join(out_dir, f"rank{r}.json"))) for r in range(args.ranks)]
    if not all(r["ok"] for r in ranks):
        sys.exit(f"{mode}/{order}: wrong results")
    calls = sum(r["calls"] for r in ranks)
    return {"mode": mode, "order": order, "calls": calls, "work_s": calls * args.sleep_ms / 1000,
            "first_s": max(r["first_s"] for r in ranks), "all_s": max(r["all_s"] for r in ranks),
            "digests": len({r["digest"] for r in ranks}), "digest_set": sorted({r["digest"] for r in ranks})}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--sleep-ms", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3, help="jobs per row; times are their median")
    parser.add_argument("--order", choices=("same", "rotated"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", metavar="OUT_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.keys, args.candidates, args.sleep_ms, args.order)
        return
    print(f"{args.ranks} gloo ranks, 1 kernel x {args.keys} keys x {args.candidates} candidates, "
          f"timer sleeps {args.sleep_ms:g} ms per candidate (TRITON_INTERPRET=1), median of {args.repeat} jobs")
    header = f"{'mode':<20} {'order':<8} {'timer calls':>11} {'timing work':>12} {'first result':>13} " \
             f"{'all results':>12} {'digests':>8}"
    print(header)
    print("-" * len(header))
    for order in ("same", "rotated"):
        for mode in ("auto", "consensus"):
            _row(mode, order, [run_job(mode, order, args) for _ in range(args.repeat)])
        runs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as table_dir:
                first = run_job("consensus", order, args, table_dir)
                # the 2nd run and pinned from the same table, side by side (alternating which goes first)
                pair = [run_job("consensus", order, args, table_dir), run_job("pinned", order, args, table_dir)]
            runs.append((first, *pair))
        _row("consensus+table 1st", order, [r[0] for r in runs])
        _row("consensus+table 2nd", order, [r[1] for r in runs])
        _row("pinned from table", order, [r[2] for r in runs])
        ratios = [r[1]["all_s"] / r[2]["all_s"] for r in runs]
        print(f"{'2nd / pinned':<20} {order:<8} all results: {statistics.median(ratios):.3f}x "
              f"(each job: {', '.join(f'{x:.3f}' for x in ratios)})")


def _row(name: str, order: str, runs: list) -> None:
    r = dict(runs[0], first_s=statistics.median(x["first_s"] for x in runs),
             all_s=statistics.median(x["all_s"] for x in runs), digests=max(x["digests"] for x in runs))
    print(f"{name:<20} {order:<8} {r['calls']:>11} {r['work_s']:>11.2f}s {r['first_s']:>12.3f}s "
          f"{r['all_s']:>11.3f}s {r['digests']:>8}")
    sys.stdout.flush()

if __name__ == "__main__":
    main()
