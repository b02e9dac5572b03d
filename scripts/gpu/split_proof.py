"""Split tuning (AUTOTUNE_MODE=consensus, AUTOTUNE_CONSENSUS_SPLIT=1) on a GPU: one key of a real
@triton.autotune row kernel with 8 configs over a 4096x4096 tensor, in 4-rank torchrun jobs
(gloo, every rank on cuda:0, a fresh TRITON_CACHE_DIR per job), split off vs split on.

    python scripts/gpu/split_proof.py --out DIR [--repeat 2]
    TRITON_INTERPRET=1 is set for you by --device cpu (a dry run of the logic; figures mean nothing)

Per job: tuning wall time (the slowest rank's first call), each rank's winner (all must agree), how
many candidates each rank timed (calls of the kernel's timer), that the first pass timed each of
the 8 candidates on one rank only and that the re-timing rounds (docs/winners.md) ran on one rank;
under split, that the published argmin was a finalist and the winner is one. Writes
DIR/split.json; exits 1 if ranks disagree, fail, or a rule does not hold.
``--worker DIR`` is one rank; it prints one JSON line and writes DIR/rank<N>.json.

Caveat: the 4 ranks share one GPU, so their timings run against each other; the wall-time ratio
split/unsplit is not what 4 separate GPUs give.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

CAVEAT = ("caveat: 4 ranks share one GPU and time against each other; the split/unsplit wall-time ratio "
          "is not what 4 separate GPUs give")
KERNEL = "row_sumsq_kernel"


def worker(out_dir: str, device: str, rows: int, cols: int) -> None:
    import torch
    import torch.distributed as dist
    import triton
    import triton.language as tl

    timed = []

    def counting_timer(kernel_call, quantiles):
        cells = dict(zip(kernel_call.__code__.co_freevars, (c.cell_contents for c in kernel_call.__closure__ or ())))
        config = cells.get("config")  # the config Triton's _bench is timing
        timed.append(f"{config.kwargs['BLOCK']}/{config.num_warps}" if config is not None else "?")
        if device == "cuda":
            return triton.testing.do_bench(kernel_call, quantiles=quantiles)
        start = time.perf_counter()
        kernel_call()
        ms = (time.perf_counter() - start) * 1e3
        return [ms, ms, ms]

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512, 1024, 2048) for w in (4, 8)]

    @triton.autotune(configs=configs, key=["n_cols"], do_bench=counting_timer)
    @triton.jit
    def row_sumsq_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
            acc += x * x
        tl.store(out_ptr + row, tl.sum(acc, axis=0))

    published = _watch_published()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if device == "cuda":
        torch.cuda.set_device(0)
    x = torch.randn(rows, cols, device=device, generator=torch.Generator(device=device).manual_seed(0))
    out = torch.empty(rows, device=device, dtype=torch.float32)
    dist.barrier()
    start, error, winner = time.perf_counter(), None, None
    try:
        row_sumsq_kernel[(rows,)](x, out, cols)
        if device == "cuda":
            torch.cuda.synchronize()
        best = row_sumsq_kernel.best_config
        winner = f"{best.kwargs['BLOCK']}/{best.num_warps}"
    except Exception as exc:  # the guard's refusal or a failed share: reported, not hidden
        error = f"{type(exc).__name__}: {exc}"[:1000]
    first_call_s = time.perf_counter() - start
    result = {"rank": rank, "winner": winner, "first_call_s": round(first_call_s, 3), "timed": timed,
              "choice": _choice(), "published": published, "error": error}
    print(json.dumps(result), flush=True)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as handle:
        json.dump(result, handle)
    dist.barrier()
    dist.destroy_process_group()


def _watch_published() -> dict:
    """The timings of every share this rank read (split only): ``deciding.split.share_timings``
    wrapped, so the driver can check the winner against them. Empty where split is not used."""
    seen: dict = {}
    try:
        from autotune_guard.deciding import split
    except ImportError:
        return seen
    own = split.share_timings

    def recording(*args):
        timings = own(*args)
        seen.update(timings)
        return timings

    split.share_timings = recording
    return seen


def _choice() -> str | None:
    """This rank's choice-log entry for the kernel: ``signature;how``."""
    try:
        import autotune_guard
        return next((v for k, v in autotune_guard.choice_log().items() if KERNEL in k), None)
    except Exception:  # the guard is not installed in this interpreter
        return None


def run_job(args, name: str, **settings) -> dict:
    work = os.path.join(args.work, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "ranks"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(settings, TRITON_CACHE_DIR=os.path.join(work, "triton-cache"), OMP_NUM_THREADS="1")
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
               os.path.abspath(__file__), "--worker", os.path.join(work, "ranks"), "--device", args.device,
               "--rows", str(args.rows), "--cols", str(args.cols)]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    with open(os.path.join(work, "job.log"), "w") as handle:
        handle.write(done.stdout + done.stderr)
    ranks = []
    for rank in range(4):
        path = os.path.join(work, "ranks", f"rank{rank}.json")
        ranks.append(json.load(open(path)) if os.path.exists(path) else {"rank": rank, "error": "no result"})
    return {"job": name, "rc": done.returncode, "job_wall_s": round(time.perf_counter() - started, 1),
            "ranks": ranks, **_judge(ranks, settings.get("AUTOTUNE_CONSENSUS_SPLIT") == "1")}


def _short(signature: str) -> str:
    """``BLOCK=512,num_warps=8,...`` as the worker's timer names it: ``512/8``."""
    fields = dict(part.split("=", 1) for part in signature.split(",") if "=" in part)
    return f"{fields.get('BLOCK')}/{fields.get('num_warps')}"


def _judge(ranks: list, split: bool) -> dict:
    """The job's figures and its problems: disagreement, failures, the split rule."""
    problems = [f"rank {r['rank']}: {r['error']}" for r in ranks if r.get("error")]
    winners = sorted({r.get("winner") for r in ranks}, key=str)
    choices = {r.get("choice") for r in ranks}
    if len(winners) != 1 or len(choices) != 1:
        problems.append(f"ranks disagree: winners {winners}, choices {sorted(choices, key=str)}")
    timed = [len(r.get("timed", [])) for r in ranks]
    timings = [r.get("timed", []) for r in ranks]
    again = [r["rank"] for r, ts in zip(ranks, timings) if len(ts) > len(set(ts))]
    if len(set().union(*map(set, timings))) != 8:
        problems.append(f"the job did not time each of the 8 candidates ({timed})")
    if len(again) > 1:
        problems.append(f"ranks {again} all re-timed finalists: candidates timed on different GPUs were compared")
    if split:
        tables = [r.get("published") or {} for r in ranks]
        if any(t != tables[0] or len(t) != 8 for t in tables):
            problems.append("ranks did not all read the same 8 published timings")
        if sum(len(ts) for r, ts in zip(ranks, timings) if r["rank"] not in again) + \
                sum(len(set(ts)) for r, ts in zip(ranks, timings) if r["rank"] in again) < 8:
            problems.append(f"the shares did not cover the 8 candidates ({timed})")
        published = {_short(sig): ms for sig, ms in tables[0].items()}
        argmin = min(published, key=lambda c: (published[c], c)) if published else None
        finalists = {t for ts in timings for t in ts if ts.count(t) > 1} or {argmin}
        chosen = {_short((r.get("choice") or "").rsplit(";", 1)[0]) for r in ranks}
        if argmin not in finalists or not chosen <= finalists:
            problems.append(f"winner {sorted(chosen)} is not a finalist {sorted(finalists)} of the published "
                            f"timings (argmin {argmin})")
    return {"tuning_wall_s": max((r.get("first_call_s") or 0) for r in ranks), "winner": winners[0],
            "timed_per_rank": timed, "problems": problems}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="where split.json goes (driver)")
    parser.add_argument("--worker", metavar="DIR", help="run as one torchrun rank, writing DIR/rank<N>.json")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: Triton's interpreter")
    parser.add_argument("--rows", type=int, default=None, help="default 4096 (cuda), 16 (cpu)")
    parser.add_argument("--cols", type=int, default=None, help="default 4096 (cuda), 512 (cpu)")
    parser.add_argument("--repeat", type=int, default=1, help="jobs per setting")
    parser.add_argument("--work", default="/tmp/split-proof", help="caches and logs (emptied per job)")
    args = parser.parse_args()
    args.rows = args.rows or (4096 if args.device == "cuda" else 16)
    args.cols = args.cols or (4096 if args.device == "cuda" else 512)
    if args.worker:
        worker(args.worker, args.device, args.rows, args.cols)
        return 0
    if not args.out:
        parser.error("--out is required")
    jobs = []
    for n in range(args.repeat):
        jobs.append(run_job(args, f"unsplit-{n}", AUTOTUNE_MODE="consensus"))
        jobs.append(run_job(args, f"split-{n}", AUTOTUNE_MODE="consensus", AUTOTUNE_CONSENSUS_SPLIT="1"))
    return report(args, jobs)


def report(args, jobs: list) -> int:
    print(f"{'job':<11} {'rc':>3} {'tuning s':>9} {'winner':>8}  timed/rank    problems")
    for job in jobs:
        print(f"{job['job']:<11} {job['rc']:>3} {job['tuning_wall_s']:>9.2f} {str(job['winner']):>8}  "
              f"{str(job['timed_per_rank']):<13} {'; '.join(job['problems']) or '-'}")
    walls = {kind: [j["tuning_wall_s"] for j in jobs if j["job"].startswith(kind)] for kind in ("unsplit", "split")}
    ratio = min(walls["split"]) / min(walls["unsplit"]) if min(walls["unsplit"]) else None
    print(f"ratio split/unsplit (best of each): {ratio:.3f}" if ratio else "ratio: n/a")
    print(CAVEAT)
    winners = {j["winner"] for j in jobs}
    ok = all(j["rc"] == 0 and not j["problems"] for j in jobs)
    if len(winners) != 1:
        print(f"note: jobs picked different winners {sorted(winners, key=str)} (timings on a shared GPU are noisy)")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "split.json"), "w") as handle:
        json.dump({"device": args.device, "shape": [args.rows, args.cols], "ratio": ratio, "caveat": CAVEAT,
                   "ok": ok, "jobs": jobs}, handle, indent=1)
    print(f"{'PASS' if ok else 'FAIL'}: wrote {os.path.join(args.out, 'split.json')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
