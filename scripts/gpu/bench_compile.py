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
import gc, importlib.util, json, os, statistics, sys, tempfile, time
import torch, triton
import kernels.compiled as kc
from torch._inductor.runtime.triton_heuristics import CachingAutotuner
from autotune_guard import choice_log

CONFIG = {"BLOCK": 1024, "num_warps": 4}
BLOCKS = 100  # blocks of 300 calls per variant, interleaved: the host's per-call time drifts by several µs

# The baseline: the same ten-config kernel, compiled the same way, left to Inductor (out of the
# guard's scope: AUTOTUNE_MODULES names kernels.compiled only), its timer fixed to pick CONFIG.  A
# copy of kernels/compiled.py with one comment added, so that Dynamo and Inductor see two kernels.
source = open(kc.__file__).read().replace("    row = tl.program_id(0)\n", "    # baseline copy\n    row = tl.program_id(0)\n")
path = os.path.join(tempfile.mkdtemp(), "baseline_rowsum.py")
open(path, "w").write(source)
spec = importlib.util.spec_from_file_location("baseline_rowsum", path)
base = importlib.util.module_from_spec(spec)
sys.modules["baseline_rowsum"] = base
spec.loader.exec_module(base)

def chosen(config):
    return config.kwargs.get("BLOCK") == CONFIG["BLOCK"] and config.num_warps == CONFIG["num_warps"]

timed = {"bench": 0}
def fixed_bench(self, launcher, *args, **kwargs):
    timed["bench"] += 1
    return 0.001 if chosen(launcher.config) else 1.0
CachingAutotuner.bench = fixed_bench

# The same kernel declared with CONFIG alone: Inductor runs it with no autotuning step at all.
alone = triton.autotune(configs=[triton.Config({"BLOCK": CONFIG["BLOCK"]}, num_warps=CONFIG["num_warps"])],
                        key=["n"])(base.row_sum.fn)

def rowsum_alone(x):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    alone[(x.shape[0],)](x, out, x.shape[1])
    return out

variants = {"pinned": torch.compile(lambda t: kc.rowsum(t), dynamic=False),
            "inductor_same_config": torch.compile(lambda t: base.rowsum(t), dynamic=False),
            "one_config": torch.compile(lambda t: rowsum_alone(t), dynamic=False),
            # dynamic=True: one compiled kernel for every n, so the guard follows the key on each launch
            "pinned_dynamic": torch.compile(lambda t: kc.rowsum(t), dynamic=True),
            "inductor_same_config_dynamic": torch.compile(lambda t: base.rowsum(t), dynamic=True)}

def guarded_kernels():
    found = []
    for o in gc.get_objects():
        try:  # gc also holds weak proxies whose referent is gone: isinstance() raises on those
            if isinstance(o, CachingAutotuner):
                found.append(o)
        except ReferenceError:
            pass
    return found

result = {"timer_calls": timed, "inputs": {}}
# 1024x16384: the GPU's time dominates; 32x16384 and 8x1024: the host's launch path does
for rows, cols in ((1024, 16384), (32, 16384), (8, 1024)):
    x = torch.randn(rows, cols, device="cuda")
    outs = {name: fn(x) for name, fn in variants.items()}
    # dynamic=True compiles do not know that n divides by 16, so they may vectorise, and add, otherwise
    assert all(torch.equal(outs["pinned" + ("_dynamic" if name.endswith("dynamic") else "")], o)
               for name, o in outs.items()), "not the same config everywhere"
    kernels = guarded_kernels()
    wrapped = [k for k in kernels if "run" in k.__dict__]
    chosen_ok = all(chosen(k.launchers[0].config) for k in kernels if len(k.launchers) == 1)
    per_call = {name: [] for name in variants}
    if wrapped:
        per_call["pinned_dynamic_unwrapped"] = []
    for _ in range(BLOCKS):
        for name in per_call:
            fn = variants["pinned_dynamic" if name == "pinned_dynamic_unwrapped" else name]
            for k in wrapped:
                if name == "pinned_dynamic_unwrapped":
                    k.__dict__["_ag_run"] = k.__dict__.pop("run", None) or k.__dict__["_ag_run"]
                elif "_ag_run" in k.__dict__:
                    k.__dict__["run"] = k.__dict__.pop("_ag_run")
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(300):
                fn(x)
            torch.cuda.synchronize()
            per_call[name].append((time.perf_counter() - t0) / 300 * 1e6)
    for k in wrapped:  # the guard's wrapper back in place
        if "_ag_run" in k.__dict__:
            k.__dict__["run"] = k.__dict__.pop("_ag_run")
    paired = {"static": statistics.median(a - b for a, b in zip(per_call["pinned"], per_call["inductor_same_config"])),
              "dynamic": statistics.median(a - b for a, b in zip(per_call["pinned_dynamic"],
                                                                 per_call["inductor_same_config_dynamic"]))}
    from autotune_guard.adapters.inductor import keyed
    result["inputs"][f"{rows}x{cols}"] = {
        "us": {name: statistics.median(v) for name, v in per_call.items()}, "paired_us": paired,
        "followed": sorted({keyed.how_followed(k) for k in wrapped}),
        "kernels": len(kernels), "with_launch_wrapper": len(wrapped), "all_run_CONFIG": chosen_ok}
result["log"] = choice_log()
print(json.dumps(result))
"""


def steady(work):
    """The compiled function's steady per-call time in one process, blocks interleaved: pinned vs
    the same ten-config kernel left to Inductor with its timer fixed to the same config, and vs
    the kernel declared with that config alone; static and dynamic=True compiles; at a GPU-bound
    and a launch-bound size."""
    tables = os.path.join(work, "steady-tables")
    os.makedirs(tables, exist_ok=True)
    with open(os.path.join(tables, "sm90.json"), "w") as f:
        json.dump({"format": "autotune_guard.table/1", "arch": "sm90", "kernels": {
            "kernels.compiled.row_sum": {"*": {"kwargs": {"BLOCK": 1024}, "num_warps": 4}}}}, f)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.pop("TRITON_INTERPRET", None)
    env.update(PYTHONPATH=TESTS, AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables, AUTOTUNE_ON_MISS="error",
               AUTOTUNE_MODULES="kernels.compiled", TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "steady-inductor"))
    proc = subprocess.run([sys.executable, "-c", STEADY], env=env, capture_output=True, text=True, timeout=400)
    if proc.returncode != 0:
        raise SystemExit(f"steady child failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = []
    for size, r in result["inputs"].items():
        us = r["us"]
        static = r["paired_us"]["static"] / us["inductor_same_config"]
        dynamic = r["paired_us"]["dynamic"] / us["inductor_same_config_dynamic"]
        unwrapped = us.get("pinned_dynamic_unwrapped", float("nan"))
        lines.append(f"steady state, compiled, x {size}, BLOCK=1024 num_warps=4, one process, 100 interleaved blocks "
                     f"of 300 calls: pinned {us['pinned']:.2f} µs vs Inductor's own path with the same config "
                     f"{us['inductor_same_config']:.2f} µs ({static * 100:+.2f}%), the kernel declared with that "
                     f"config alone {us['one_config']:.2f} µs; dynamic=True ({'/'.join(r['followed']) or 'no per-key run'}): "
                     f"pinned {us['pinned_dynamic']:.2f} µs vs "
                     f"{us['inductor_same_config_dynamic']:.2f} µs ({dynamic * 100:+.2f}%), pinned without the guard's "
                     f"per-key run {unwrapped:.2f} µs (kernels with it: {r['with_launch_wrapper']}); percentages are the "
                     "median of per-block paired differences")
    return "\n".join(lines), result


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
    # Merge the 4 record files (rank 0 each, one per process, each its own run) into a table; pin with it.
    arch_table = os.path.join(work, "tables")
    files = sorted(os.path.join(work, f) for f in os.listdir(work) if f.startswith("rec") and f.endswith(".json"))
    merge = subprocess.run([sys.executable, "-m", "autotune_guard.report", "merge", "--rule", "fastest", "--all-runs", *files, "-o",
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
