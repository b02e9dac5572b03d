"""torch.compile on the GPU, side by side in one run: plain Triton vs autotune_guard pinned vs
record -> merge -> pinned, eager and compiled, 4 cold processes at once for each.

For each configuration it starts 4 interpreters together (each with empty Inductor and Triton
caches, so each compiles and tunes from cold) running the autotuned row sum of
tests/kernels/compiled.py on the same input, and reports: distinct winners, distinct output
hashes, Inductor/Triton benchmark calls, time to first result, and the steady per-call time of
the function (median of 20 blocks of 200 calls).

    python scripts/gpu/bench_compile.py --out DIR      # prints a markdown table, writes results.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(REPO, "tests")

CHILD = r"""
import hashlib, json, statistics, sys, time
start = time.perf_counter()
import torch
import triton.runtime.autotuner as ta
from torch._inductor.runtime import triton_heuristics as th
from kernels.compiled import rowsum, row_sum

counts = {"bench": 0}
winner = {}
for cls, name in ((th.CachingAutotuner, "bench"), (ta.Autotuner, "_bench")):
    original = getattr(cls, name)
    def counted(self, *a, __o=original, **k):
        counts["bench"] += 1
        return __o(self, *a, **k)
    setattr(cls, name, counted)
original_step = th.CachingAutotuner.autotune_to_one_config
def step(self, *a, **k):
    result = original_step(self, *a, **k)
    winner["config"] = repr(self.launchers[0].config)
    return result
th.CachingAutotuner.autotune_to_one_config = step
from autotune_guard import choice_log

variant = sys.argv[1]
gen = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(1024, 16384, device="cuda", generator=gen)
fn = rowsum if variant == "eager" else torch.compile(lambda t: rowsum(t))
torch.cuda.synchronize()
t0 = time.perf_counter()
out = fn(x)
torch.cuda.synchronize()
first = time.perf_counter() - t0
blocks = []
for _ in range(20):
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    for _ in range(200):
        fn(x)
    torch.cuda.synchronize()
    blocks.append((time.perf_counter() - t1) / 200 * 1e6)
if variant == "eager":
    cfg = row_sum.best_config
    winner["config"] = repr(cfg)
log = [v.split(";")[0] for k, v in choice_log().items() if "row_sum" in k]
print(json.dumps({"hash": hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest()[:16],
                  "winner": log[0] if log else winner.get("config", "?"), "bench": counts["bench"],
                  "first_s": first, "steady_us": statistics.median(blocks), "since_start_s": time.perf_counter() - start}))
"""


def run_four(variant, settings, workdir):
    procs = []
    for i in range(4):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
        env.pop("TRITON_INTERPRET", None)
        env["PYTHONPATH"] = TESTS
        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="ind-", dir=workdir)
        env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tri-", dir=workdir)
        env.update(settings)
        if "AUTOTUNE_RECORD_PATH" in settings:  # one record prefix per process: each is its own job
            env["AUTOTUNE_RECORD_PATH"] = f"{settings['AUTOTUNE_RECORD_PATH']}{i}"
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, variant], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, cwd=workdir))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=500)
        if p.returncode != 0:
            raise SystemExit(f"child failed ({variant}, {settings}):\n{err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=tempfile.mkdtemp())
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-compile-")
    rows = []
    record = os.path.join(work, "rec")
    configs = [
        ("plain Triton", "eager", {"AUTOTUNE_DISABLE": "1"}),
        ("plain Triton", "compiled", {"AUTOTUNE_DISABLE": "1"}),
        ("pinned (min_cost)", "eager", {"AUTOTUNE_MODE": "pinned"}),
        ("pinned (min_cost)", "compiled", {"AUTOTUNE_MODE": "pinned"}),
        ("record", "compiled", {"AUTOTUNE_RECORD_PATH": record}),
    ]
    results = {}
    for label, variant, settings in configs:
        results[(label, variant)] = run_four(variant, settings, work)
    # Merge the 4 record files (rank 0 each, one per process) into a table; pin with it.
    arch_table = os.path.join(work, "tables")
    files = sorted(os.path.join(work, f) for f in os.listdir(work) if f.startswith("rec") and f.endswith(".json"))
    merge = subprocess.run([sys.executable, "-m", "autotune_guard.report", "merge", "--rule", "fastest", *files, "-o",
                            os.path.join(arch_table, "sm90.json")], capture_output=True, text=True)
    print("merge:", merge.returncode, merge.stdout.strip()[-300:], merge.stderr.strip()[-500:])
    for variant in ("eager", "compiled"):
        results[("record -> merge -> pinned", variant)] = run_four(
            variant, {"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": arch_table, "AUTOTUNE_ON_MISS": "error"}, work)
    lines = ["| configuration | call | distinct winners | distinct output hashes | benchmark calls (4 procs) | "
             "time to first result (median s) | steady per call (median µs) |", "|---|---|---|---|---|---|---|"]
    for (label, variant), rs in results.items():
        first = sorted(r["first_s"] for r in rs)[1:3]
        steady = sorted(r["steady_us"] for r in rs)[1:3]
        lines.append(f"| {label} | {variant} | {len({r['winner'] for r in rs})} | {len({r['hash'] for r in rs})} | "
                     f"{sum(r['bench'] for r in rs)} | {sum(first) / 2:.2f} | {sum(steady) / 2:.1f} |")
    all_hashes = {(l, v): sorted({r["hash"] for r in rs}) for (l, v), rs in results.items()}
    lines.append("")
    lines.append(f"compiled pinned == eager pinned: {all_hashes[('pinned (min_cost)', 'compiled')] == all_hashes[('pinned (min_cost)', 'eager')]} "
                 "(hashes of the same row sums)")
    table = "\n".join(lines)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compile_table.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(args.out, "compile_results.json"), "w") as f:
        json.dump({f"{l} | {v}": rs for (l, v), rs in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
