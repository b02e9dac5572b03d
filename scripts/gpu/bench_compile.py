"""torch.compile on the GPU, side by side in one run: plain Triton vs autotune_guard pinned vs
record -> merge -> pinned, eager and compiled, 4 cold processes at once for each.

For each configuration it starts 4 interpreters together (each with empty Inductor and Triton
caches, so each compiles and tunes from cold) running the autotuned row sum of
tests/kernels/compiled.py on the same input, and reports: distinct winners, distinct output
hashes, Inductor/Triton benchmark calls, time to first result; and the steady per-call time of
the compiled function measured separately in one process (pinned vs plain with the same config,
interleaved), since 4 processes sharing one GPU make per-call times noise.

    python scripts/gpu/bench_compile.py --out DIR      # prints a markdown table, writes results.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(REPO, "tests")

CHILD = r"""
import hashlib, json, sys, time
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
if variant == "eager":
    cfg = row_sum.best_config
    winner["config"] = repr(cfg)
log = [v.split(";")[0] for k, v in choice_log().items() if "row_sum" in k]
print(json.dumps({"hash": hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest()[:16],
                  "winner": log[0] if log else winner.get("config", "?"), "bench": counts["bench"],
                  "first_s": first, "since_start_s": time.perf_counter() - start}))
"""


STEADY = r"""
import json, statistics, sys, time
import torch, triton
import kernels.compiled as kc
from autotune_guard import choice_log

# The same kernel twice: with its ten candidates, pinned by the guard to CONFIG through a table,
# and declared with CONFIG alone, which Inductor runs without any autotuning and the guard never sees.
alone = triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=4)], key=["n"])(kc.row_sum.fn)

def rowsum_alone(x):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    alone[(x.shape[0],)](x, out, x.shape[1])
    return out

x = torch.randn(1024, 16384, device="cuda")
pinned = torch.compile(lambda t: kc.rowsum(t))
plain = torch.compile(lambda t: rowsum_alone(t))
assert torch.equal(pinned(x), plain(x))
# The pinned kernel's own object, to time it also without the guard's per-key launch wrapper (a
# kernel whose key reads a runtime argument gets one; see autotune_guard/inductor.py).
import gc
from torch._inductor.runtime.triton_heuristics import CachingAutotuner
def _guarded(o):
    try:  # gc also holds weak proxies whose referent is gone: isinstance() raises on those
        return isinstance(o, CachingAutotuner) and "run" in o.__dict__
    except ReferenceError:
        return False
guarded = [o for o in gc.get_objects() if _guarded(o)]
wrapper = guarded[0].__dict__["run"] if guarded else None
per_call = {"pinned": [], "pinned_unwrapped": [], "plain": []}
for _ in range(30):
    for name, fn in (("pinned", pinned), ("pinned_unwrapped", pinned), ("plain", plain)):
        if wrapper is not None:
            if name == "pinned_unwrapped":
                del guarded[0].__dict__["run"]
            else:
                guarded[0].__dict__["run"] = wrapper
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(300):
            fn(x)
        torch.cuda.synchronize()
        per_call[name].append((time.perf_counter() - t0) / 300 * 1e6)
print(json.dumps({"pinned_us": statistics.median(per_call["pinned"]), "plain_us": statistics.median(per_call["plain"]),
                  "pinned_unwrapped_us": statistics.median(per_call["pinned_unwrapped"]),
                  "wrapped": wrapper is not None, "log": choice_log()}))
"""


def steady(work):
    """The compiled function's steady per-call time, pinned vs plain with the same config, one
    process, blocks interleaved."""
    tables = os.path.join(work, "steady-tables")
    os.makedirs(tables, exist_ok=True)
    with open(os.path.join(tables, "sm90.json"), "w") as f:
        json.dump({"format": "autotune_guard.table/1", "arch": "sm90", "kernels": {
            "kernels.compiled.row_sum": {"*": {"kwargs": {"BLOCK": 1024}, "num_warps": 4}}}}, f)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.pop("TRITON_INTERPRET", None)
    env.update(PYTHONPATH=TESTS, AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables, AUTOTUNE_ON_MISS="error")
    proc = subprocess.run([sys.executable, "-c", STEADY], env=env, capture_output=True, text=True, timeout=400)
    if proc.returncode != 0:
        raise SystemExit(f"steady child failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    ratio = result["pinned_us"] / result["plain_us"]
    return (f"steady state, compiled, BLOCK=1024 num_warps=4, one process, 30 interleaved blocks of 300 calls: "
            f"pinned {result['pinned_us']:.2f} µs vs plain {result['plain_us']:.2f} µs per call "
            f"({(ratio - 1) * 100:+.2f}%); the same pinned kernel without the guard's per-key wrapper "
            f"{result['pinned_unwrapped_us']:.2f} µs"), result


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
    parser.add_argument("--steady-only", action="store_true")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-compile-")
    if args.steady_only:
        line, result = steady(work)
        print(line)
        print(json.dumps(result))
        return
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
             "time to first result (median s) |", "|---|---|---|---|---|---|"]
    for (label, variant), rs in results.items():
        first = sorted(r["first_s"] for r in rs)[1:3]
        lines.append(f"| {label} | {variant} | {len({r['winner'] for r in rs})} | {len({r['hash'] for r in rs})} | "
                     f"{sum(r['bench'] for r in rs)} | {sum(first) / 2:.2f} |")
    all_hashes = {(l, v): sorted({r["hash"] for r in rs}) for (l, v), rs in results.items()}
    lines.append("")
    lines.append(f"compiled pinned == eager pinned: {all_hashes[('pinned (min_cost)', 'compiled')] == all_hashes[('pinned (min_cost)', 'eager')]} "
                 "(hashes of the same row sums)")
    lines.append(steady(work)[0])
    table = "\n".join(lines)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compile_table.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(args.out, "compile_results.json"), "w") as f:
        json.dump({f"{l} | {v}": rs for (l, v), rs in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
