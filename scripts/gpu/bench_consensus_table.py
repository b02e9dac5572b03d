"""On a CUDA GPU: plain Triton vs consensus + a table directory, first run and second run.

    python scripts/gpu/bench_consensus_table.py OUT_DIR [--ranks 2]

Runs the same torchrun job (gloo; every rank on cuda:0, so it fits a machine of one GPU) three
times: ``plain`` (no AUTOTUNE_* setting: Triton's own autotuning on each rank), then twice with
``AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH=<fresh dir>``. Each rank launches the row sum of
tests/kernels/compiled.py (ten candidates that add in ten orders) at four row lengths. Printed per
run: Triton's benchmark calls summed over ranks (``Autotuner._bench``), time to first result
(slowest rank, from a common start until every key has run once), the steady time of one pass
over the four keys (rank 0 alone on the GPU, median of 5 x 200 launches per key), and the
number of distinct output hashes across the ranks of the run and across runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROWS, LENGTHS = 4096, (4096, 8192, 16384, 32768)
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def worker(out_dir: str) -> None:
    import torch
    import torch.distributed as dist
    from triton.runtime import autotuner

    sys.path.insert(0, os.path.join(REPO, "tests"))
    from kernels.compiled import rowsum

    benched = []
    own_bench = autotuner.Autotuner._bench

    def counted(self, *args, **kwargs):
        benched.append(1)
        return own_bench(self, *args, **kwargs)

    autotuner.Autotuner._bench = counted
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    generator = torch.Generator(device="cuda").manual_seed(0)
    inputs = [torch.rand(ROWS, n, device="cuda", generator=generator) for n in LENGTHS]
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    outputs = [rowsum(x) for x in inputs]
    torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    digest = hashlib.sha256(b"".join(o.cpu().numpy().tobytes() for o in outputs)).hexdigest()[:16]
    dist.barrier()
    step_ms = None
    if rank == 0:  # alone on the GPU: the others wait at the barrier
        passes = []
        for _ in range(5):
            total = 0.0
            for x in inputs:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                for _ in range(200):
                    rowsum(x)
                end.record()
                torch.cuda.synchronize()
                total += begin.elapsed_time(end) / 200
            passes.append(total)
        step_ms = statistics.median(passes)
    dist.barrier()
    import autotune_guard

    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "benched": len(benched), "first_s": first_s, "step_ms": step_ms, "hash": digest,
                   "choices": autotune_guard.choice_log()}, f)
    dist.destroy_process_group()


def run(name: str, ranks: int, settings: dict) -> dict:
    with tempfile.TemporaryDirectory() as out_dir:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
        env.update(settings, OMP_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               os.path.abspath(__file__), "--worker", out_dir]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=500)
        if proc.returncode != 0:
            sys.exit(f"{name} failed:\n{proc.stderr[-4000:]}")
        results = [json.load(open(os.path.join(out_dir, f"rank{r}.json"))) for r in range(ranks)]
    return {"name": name, "benched": sum(r["benched"] for r in results), "first_s": max(r["first_s"] for r in results),
            "step_ms": results[0]["step_ms"], "hashes": sorted({r["hash"] for r in results}),
            "stderr_tail": proc.stderr[-1500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--worker", metavar="OUT_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    table_dir = tempfile.mkdtemp(prefix="tables-")
    consensus = {"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": table_dir}
    rows = [run("plain", args.ranks, {}), run("consensus+table 1st", args.ranks, consensus),
            run("consensus+table 2nd", args.ranks, consensus)]
    plain = rows[0]["step_ms"]
    print(f"{args.ranks} ranks on cuda:0 (gloo), row sum {ROWS} rows x {LENGTHS}, 10 candidates per key")
    print(f"{'run':<20} {'bench calls':>11} {'first result':>13} {'steady pass':>12} {'vs plain':>9} {'hashes':>7}")
    for r in rows:
        print(f"{r['name']:<20} {r['benched']:>11} {r['first_s']:>12.3f}s {r['step_ms']:>10.4f}ms "
              f"{(r['step_ms'] / plain - 1) * 100:>+8.2f}% {len(r['hashes']):>7}")
    across = {h for r in rows[1:] for h in r["hashes"]}
    print(f"distinct output hashes over both consensus runs' ranks: {len(across)}")
    grown = sorted(name for name in os.listdir(table_dir) if name.endswith(".json"))
    table = open(os.path.join(table_dir, grown[0])).read() if grown else None
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bench_consensus_table.json"), "w") as f:
            json.dump({"rows": rows, "table": table}, f, indent=1)


if __name__ == "__main__":
    main()
