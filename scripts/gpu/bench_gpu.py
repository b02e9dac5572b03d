"""GPU benchmarks of autotune_guard, all in one run (``bash scripts/run_gpu_bench.sh`` on a GPU
machine; ``python scripts/gpu/bench_gpu.py all --smoke`` checks the logic on a CPU through
Triton's interpreter, where the figures mean nothing).

1. reproducibility: a row sum over 16k columns whose 10 candidates give different output bits,
   in 4 cold processes started at once: distinct winners and distinct output hashes, auto vs
   pinned (goal: pinned 1 and 1);
2. first call: time to the first result of that 10-candidate kernel in a cold process, pinned vs
   Triton's autotune, with Triton's compile cache cold and warm (goal: >= N/2 = 5x faster);
3. steady state: per-launch time of a tiny kernel, guard pinned vs plain Triton's cached path,
   same config, same process, interleaved (goal: <= 1%);
4. throughput: a 4096^3 fp16 matmul pinned from a table recorded in another process and merged
   with ``python -m autotune_guard.report merge``, vs Triton's autotuned winner in this process
   (goal: within 2%), and the min-cost choice's slowdown without a table.

Every process is a cold interpreter in which the package's ``.pth`` installs the guard from the
``AUTOTUNE_*`` environment, as for any user program.  Results: a table on stdout and
``results.json`` in ``--out``.  Child roles (``repro``, ``first``, ...) print one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import glob
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
GOALS = {"repro": "pinned: 1 winner, 1 hash", "first": ">= N/2 x faster", "steady": "<= 1%",
         "matmul": "within 2%"}


# --- child side ---------------------------------------------------------------------------------

class Counter:
    """A do_bench that counts its calls: Triton's own timer (``triton.testing.do_bench``) on a GPU,
    one plain run under the interpreter (whose default timer needs a GPU)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, kernel_call, quantiles):
        self.calls += 1
        import gpu_kernels

        if gpu_kernels.INTERPRET:
            t0 = time.perf_counter()
            kernel_call()
            t = (time.perf_counter() - t0) * 1e3
            return [t, t, t]
        import triton.testing

        return triton.testing.do_bench(kernel_call, quantiles=quantiles)


def sync():
    import torch

    if torch.cuda.is_available() and not _interpret():
        torch.cuda.synchronize()


def _interpret():
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def digest(tensor) -> str:
    return hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


def only_choice(kernel_name: str) -> str:
    """The config signature this process chose for the (single) key of ``kernel_name``."""
    from autotune_guard import choice_log

    found = [v for k, v in choice_log().items() if k.split("|")[1].endswith(kernel_name)]
    return found[0] if len(found) == 1 else f"? {found}"


def rowsum_input(rows, cols):
    import torch
    import gpu_kernels

    gen = torch.Generator(device=gpu_kernels.DEVICE).manual_seed(1234)
    return torch.randn(rows, cols, device=gpu_kernels.DEVICE, generator=gen, dtype=torch.float32)


def role_hashes(opts):
    """Each candidate of the row sum run directly: how many distinct output bit patterns."""
    import gpu_kernels
    import torch

    x = rowsum_input(opts.rows, opts.cols)
    ref = x.double().sum(dim=1)
    found = {}
    for block, warps in gpu_kernels.ROWSUM_CONFIGS:
        out = torch.empty(opts.rows, device=x.device, dtype=torch.float32)
        gpu_kernels.rowsum_body[(opts.rows,)](x, out, opts.cols, x.stride(0), BLOCK=block, num_warps=warps)
        sync()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert err < 1e-5, (block, warps, err)
        found[f"BLOCK={block},num_warps={warps}"] = digest(out)
    return {"candidates": len(found), "distinct": len(set(found.values())), "hashes": found}


def role_repro(opts):
    """One cold process of the reproducibility run: tune (auto) or pin, report winner and hash."""
    import gpu_kernels
    import torch

    timer = Counter()
    kernel = gpu_kernels.make_rowsum(timer)
    x = rowsum_input(opts.rows, opts.cols)
    sync()
    if opts.barrier:  # start tuning together with the other processes
        open(os.path.join(opts.barrier, f"ready.{os.getpid()}"), "w").close()
        deadline = time.time() + 600
        while not os.path.exists(os.path.join(opts.barrier, "go")) and time.time() < deadline:
            time.sleep(0.005)
    out = gpu_kernels.rowsum(kernel, x)
    sync()
    ref = x.double().sum(dim=1)
    return {"winner": only_choice("rowsum_body"), "hash": digest(out), "timer_calls": timer.calls,
            "rel_err": ((out.double() - ref).norm() / ref.norm()).item(), "device": str(x.device),
            "torch": torch.__version__}


def role_first(opts):
    """Time to the first result of the 10-candidate row sum in this cold process."""
    import gpu_kernels
    import torch

    timer = Counter()
    kernel = gpu_kernels.make_rowsum(timer)
    x = rowsum_input(opts.rows, opts.cols)
    (x * 2).sum().item()  # CUDA context and allocator warm: not part of the kernel's first call
    if opts.prewarm:
        # Triton already in use in this process (another kernel launched): its one-time costs
        # (hashing its own binary for the cache key, loading the launcher) are paid before t0.
        y = torch.empty(1024, device=x.device)
        gpu_kernels.add_body[(1,)](y, y, y, 1024, BLOCK=1024)
    sync()
    t0 = time.perf_counter()
    out = gpu_kernels.rowsum(kernel, x)
    sync()
    seconds = time.perf_counter() - t0
    assert torch.isfinite(out).all()
    return {"seconds": seconds, "timer_calls": timer.calls, "winner": only_choice("rowsum_body")}


def role_steady(opts):
    """Per-launch time of a tiny kernel: the guard's pinned path vs Triton's cached path, both
    running the same config in this process, blocks interleaved."""
    import gpu_kernels
    import torch
    from triton.runtime import autotuner as triton_autotuner

    import autotune_guard
    from autotune_guard import _patching

    cls = triton_autotuner.Autotuner
    guarded, original = cls.run, _patching.original(cls, "run")
    assert getattr(guarded, "_autotune_guard", False), "the .pth did not install the guard"
    kernel = gpu_kernels.make_add(Counter())
    n = opts.n
    x = torch.randn(n, device=gpu_kernels.DEVICE)
    y = torch.randn(n, device=gpu_kernels.DEVICE)
    out = torch.empty_like(x)

    cls.run = original  # Triton tunes the key once; its winner is then a cache hit
    gpu_kernels.add(kernel, x, y, out)
    winner = next(iter(kernel.cache.values()))
    block = winner.kwargs["BLOCK"]
    cls.run = guarded  # pin that same config, so both variants launch the same compiled kernel
    autotune_guard.install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_BLOCK_SIZES": f"BLOCK={block}"})
    gpu_kernels.add(kernel, x, y, out)
    pinned = only_choice("add_body")
    assert pinned.startswith(f"BLOCK={block},") and pinned.endswith(";pinned"), pinned
    assert torch.equal(out, x + y)

    # --diagnose adds: Triton's single-config branch without the guard (what the pinned path
    # runs inside it), and the pinned path with its lock replaced by a no-op.
    names = ["triton", "pinned"] + (["triton_single", "pinned_nolock"] if opts.diagnose else [])
    state = kernel.__dict__["_autotune_guard_state"]  # (--diagnose swaps its lock)
    lock, configs = state.lock, kernel.configs

    class NoLock:
        def acquire(self):
            return True

        def release(self):
            pass

    def variant(name):
        cls.run = original if name.startswith("triton") else guarded
        kernel.configs = [winner] if name == "triton_single" else configs
        state.lock = NoLock() if name == "pinned_nolock" else lock

    per_launch = {name: [] for name in names}
    cpu = {name: [] for name in names}
    for rep in range(opts.reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            variant(name)
            for _ in range(50):
                gpu_kernels.add(kernel, x, y, out)
            sync()
            if opts.no_gc:
                gc.collect()
                gc.disable()
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(opts.launches):
                gpu_kernels.add(kernel, x, y, out)
            c1 = time.thread_time()
            sync()
            per_launch[name].append((time.perf_counter() - t0) / opts.launches * 1e6)
            cpu[name].append((c1 - c0) / opts.launches * 1e6)
            gc.enable()
    variant("pinned")
    med = {name: statistics.median(v) for name, v in per_launch.items()}
    # This machine's speed drifts from block to block by far more than the effect measured, so
    # the overhead is the median over repetitions of pinned / triton in adjacent blocks.
    paired = [p / t for p, t in zip(per_launch["pinned"], per_launch["triton"])]
    return {"config": pinned.split(";")[0], "n": n, "launches": opts.launches, "reps": opts.reps,
            "gc": not opts.no_gc, "median_us": med, "min_us": {k: min(v) for k, v in per_launch.items()},
            "cpu_median_us": {k: statistics.median(v) for k, v in cpu.items()},
            "overhead_pct": (statistics.median(paired) - 1) * 100,
            "paired_quartiles_pct": [(q - 1) * 100 for q in statistics.quantiles(paired, n=4)],
            "overhead_of_medians_pct": (med["pinned"] / med["triton"] - 1) * 100}


def matmul_inputs(size):
    import gpu_kernels
    import torch

    gen = torch.Generator(device=gpu_kernels.DEVICE).manual_seed(7)
    a = torch.randn(size, size, device=gpu_kernels.DEVICE, generator=gen, dtype=torch.float16)
    b = torch.randn(size, size, device=gpu_kernels.DEVICE, generator=gen, dtype=torch.float16)
    return a, b, torch.empty(size, size, device=gpu_kernels.DEVICE, dtype=torch.float16)


def matmul_error(a, b, c) -> float:
    ref = a.double() @ b.double()
    return ((c.double() - ref).norm() / ref.norm()).item()


def role_mm_record(opts):
    """AUTOTUNE_MODE=record: Triton tunes the matmul; the guard records winner and timings."""
    import gpu_kernels

    kernel = gpu_kernels.make_matmul(None if not gpu_kernels.INTERPRET else Counter())
    a, b, c = matmul_inputs(opts.size)
    gpu_kernels.matmul(kernel, a, b, c)
    sync()
    return {"winner": only_choice("matmul_body"), "rel_err": matmul_error(a, b, c)}


def role_mm_measure(opts):
    """In one process: the matmul pinned from the table (the environment's policy), Triton's own
    autotuned winner, and the min-cost pin without a table; do_bench medians, interleaved."""
    import gpu_kernels
    import triton
    from triton.runtime import autotuner as triton_autotuner

    import autotune_guard
    from autotune_guard import _patching

    cls = triton_autotuner.Autotuner
    guarded, original = cls.run, _patching.original(cls, "run")
    table_policy = autotune_guard.active_policy()
    assert table_policy is not None and table_policy.mode == "pinned", table_policy
    kernel = gpu_kernels.make_matmul(None if not gpu_kernels.INTERPRET else Counter())
    a, b, c = matmul_inputs(opts.size)
    launch = lambda: gpu_kernels.matmul(kernel, a, b, c)  # noqa: E731

    def pinned_table():
        cls.run = guarded
        autotune_guard.install(table_policy)

    def triton_own():
        cls.run = original

    def min_cost():
        cls.run = guarded
        autotune_guard.install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "min_cost"})

    variants = {"pinned_table": pinned_table, "triton": triton_own, "min_cost": min_cost}
    configs, errors = {}, {}
    for name, setup in variants.items():  # first launches: selection, Triton's tuning, compiles
        setup()
        c.fill_(float("nan"))
        launch()
        sync()
        errors[name] = matmul_error(a, b, c)
        configs[name] = (next(iter(kernel.cache.values())) if name == "triton" else None)
        if name != "triton":
            configs[name] = only_choice("matmul_body")
    triton_winner = configs["triton"]
    configs["triton"] = ",".join([f"{k}={v}" for k, v in sorted(triton_winner.kwargs.items())] +
                                 [f"num_warps={triton_winner.num_warps}", f"num_stages={triton_winner.num_stages}"])
    names = list(variants)
    times = {name: [] for name in names}
    for rep in range(opts.mm_reps):
        for name in names[rep % 3:] + names[:rep % 3]:
            variants[name]()
            launch()  # a new policy selects on its first launch: not timed
            if gpu_kernels.INTERPRET:
                t0 = time.perf_counter()
                launch()
                times[name].append((time.perf_counter() - t0) * 1e3)
            else:
                times[name].append(triton.testing.do_bench(launch, warmup=25, rep=200, return_mode="median"))
    cls.run = guarded
    med = {name: statistics.median(v) for name, v in times.items()}
    flops = 2.0 * opts.size ** 3
    return {"size": opts.size, "configs": configs, "rel_err": errors, "median_ms": med,
            "tflops": {k: flops / (v * 1e-3) / 1e12 for k, v in med.items()},
            "pinned_vs_triton_pct": (med["pinned_table"] / med["triton"] - 1) * 100,
            "min_cost_slowdown": med["min_cost"] / med["triton"]}


ROLES = {"hashes": role_hashes, "repro": role_repro, "first": role_first, "steady": role_steady,
         "mm-record": role_mm_record, "mm-measure": role_mm_measure}


# --- parent side --------------------------------------------------------------------------------

class Run:
    def __init__(self, opts):
        self.opts = opts
        self.work = tempfile.mkdtemp(prefix="ag-gpu-")
        self.log = open(os.path.join(opts.out, "children.log"), "a")

    def env(self, **settings):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
        env.pop("TRITON_INTERPRET", None)
        if self.opts.smoke:
            env["TRITON_INTERPRET"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env.update({k: str(v) for k, v in settings.items()})
        return env

    def argv(self, role, *extra):
        o = self.opts
        return [sys.executable, os.path.abspath(__file__), role, "--rows", str(o.rows), "--cols", str(o.cols),
                "--size", str(o.size), "--n", str(o.n), "--reps", str(o.reps), "--launches", str(o.launches),
                "--mm-reps", str(o.mm_reps), *extra]

    def finish(self, role, proc, stdout, stderr):
        self.log.write(f"=== {role} exit {proc.returncode}\n{stdout}\n--- stderr\n{stderr[-20000:]}\n")
        self.log.flush()
        if proc.returncode != 0:
            raise RuntimeError(f"child {role} failed with exit {proc.returncode}:\n{stderr[-3000:]}")
        return json.loads(stdout.strip().splitlines()[-1])

    def child(self, role, env, *extra, timeout=600):
        proc = subprocess.run(self.argv(role, *extra), env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=self.work)
        return self.finish(role, proc, proc.stdout, proc.stderr)

    def together(self, role, env, count):
        """``count`` cold processes started at once, tuning released together."""
        barrier = tempfile.mkdtemp(dir=self.work, prefix="barrier-")
        procs = [subprocess.Popen(self.argv(role, "--barrier", barrier), env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=self.work) for _ in range(count)]
        deadline = time.time() + 600
        while len(glob.glob(os.path.join(barrier, "ready.*"))) < count and time.time() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.01)
        open(os.path.join(barrier, "go"), "w").close()
        return [self.finish(role, p, *p.communicate(timeout=600)) for p in procs]


def bench_repro(run):
    hashes = run.child("hashes", run.env())
    result = {"candidates": hashes}
    for mode in ("auto", "pinned"):
        procs = run.together("repro", run.env(AUTOTUNE_MODE=mode), run.opts.procs)
        result[mode] = {"winners": sorted({p["winner"] for p in procs}), "hashes": sorted({p["hash"] for p in procs}),
                        "timer_calls": [p["timer_calls"] for p in procs], "max_rel_err": max(p["rel_err"] for p in procs)}
    return result


FIRST_KINDS = {  # (Triton's compile cache, another kernel launched before) -> what it shows
    "cold": ("cold", False), "warm": ("warm", False), "cold, Triton in use": ("cold", True),
    "warm, Triton in use": ("warm", True)}


def bench_first(run):
    result = {"candidates": 10, **{kind: {} for kind in FIRST_KINDS}}
    warm_cache = os.path.join(run.work, "triton-cache-warm")
    # Fill the warm cache with every candidate's binary (an autotuning run compiles them all).
    run.child("first", run.env(AUTOTUNE_MODE="auto", TRITON_CACHE_DIR=warm_cache), "--prewarm")
    for rep in range(run.opts.first_reps):
        for mode in ("auto", "pinned") if rep % 2 == 0 else ("pinned", "auto"):
            for kind, (cache, prewarm) in FIRST_KINDS.items():
                cache_dir = warm_cache if cache == "warm" else tempfile.mkdtemp(dir=run.work, prefix="triton-cache-cold-")
                r = run.child("first", run.env(AUTOTUNE_MODE=mode, TRITON_CACHE_DIR=cache_dir),
                              *(["--prewarm"] if prewarm else []))
                result[kind].setdefault(mode, []).append(r)
    for kind in FIRST_KINDS:
        secs = {mode: statistics.median(r["seconds"] for r in runs) for mode, runs in result[kind].items()}
        result[kind]["median_s"] = secs
        result[kind]["speedup"] = secs["auto"] / secs["pinned"]
    return result


def bench_steady(run):
    return run.child("steady", run.env(AUTOTUNE_MODE="pinned"))


def bench_matmul(run):
    prefix = os.path.join(run.work, "mm", "rec")
    record = run.child("mm-record", run.env(AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=prefix))
    files = glob.glob(prefix + ".rank*.json")
    assert files, "record mode wrote no record file"
    with open(files[0]) as src:
        arch = json.load(src)["arch"]
    tables = os.path.join(run.work, "mm", "tables")
    os.makedirs(tables, exist_ok=True)
    table = os.path.join(tables, f"{arch}.json")
    merge = subprocess.run([sys.executable, "-m", "autotune_guard.report", "merge", prefix, "-o", table],
                           capture_output=True, text=True, env=run.env(), cwd=run.work)
    run.log.write(f"=== merge exit {merge.returncode}\n{merge.stdout}\n{merge.stderr}\n")
    if merge.returncode != 0:
        raise RuntimeError(f"report merge failed: {merge.stderr}")
    with open(table) as src:
        table_doc = json.load(src)
    measure = run.child("mm-measure", run.env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables,
                                              AUTOTUNE_ON_MISS="error"))
    return {"arch": arch, "recorded_winner": record["winner"], "record_rel_err": record["rel_err"],
            "table": table_doc, **measure}


def versions(run):
    code = ("import json, platform, sys, torch, triton; import autotune_guard; "
            "cuda = torch.cuda.is_available(); "
            "print(json.dumps({'python': platform.python_version(), 'torch': torch.__version__, "
            "'triton': triton.__version__, 'autotune_guard': autotune_guard.__version__, "
            "'gpu': torch.cuda.get_device_name(0) if cuda else 'none (interpreter)', "
            "'capability': list(torch.cuda.get_device_capability(0)) if cuda else None, "
            "'cuda': torch.version.cuda}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=run.env(), cwd=run.work)
    info = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-500:]}
    try:
        info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["driver"] = None
    return info


def report(results) -> str:
    v = results["versions"]
    lines = [f"autotune_guard GPU benchmarks  {results['date']}  {v.get('gpu')} (driver {v.get('driver')}), "
             f"Python {v.get('python')}, torch {v.get('torch')}, Triton {v.get('triton')}, "
             f"autotune_guard {v.get('autotune_guard')}",
             f"command: {results['command']}", ""]
    rows = []
    r = results.get("repro")
    if isinstance(r, dict) and "auto" in r:
        procs = results["options"]["procs"]
        c = r["candidates"]
        rows.append(("1. reproducibility: row sum 16k cols, 10 candidates "
                     f"({c['distinct']} distinct output hashes among them), {procs} cold processes at once",
                     f"auto: {len(r['auto']['winners'])} winners, {len(r['auto']['hashes'])} hashes",
                     f"pinned: {len(r['pinned']['winners'])} winner, {len(r['pinned']['hashes'])} hash",
                     GOALS["repro"],
                     "met" if len(r["pinned"]["winners"]) == 1 and len(r["pinned"]["hashes"]) == 1 else "MISSED"))
    f = results.get("first")
    if isinstance(f, dict) and "cold" in f:
        need = f["candidates"] / 2
        for kind in FIRST_KINDS:
            s = f[kind]["median_s"]
            rows.append((f"2. first call, 10 candidates, Triton cache {kind}",
                         f"Triton autotune: {s['auto']:.3f} s", f"pinned: {s['pinned']:.3f} s "
                         f"({f[kind]['speedup']:.1f}x faster)", GOALS["first"],
                         "met" if f[kind]["speedup"] >= need else "MISSED"))
    s = results.get("steady")
    if isinstance(s, dict) and "median_us" in s:
        q1, _, q3 = s["paired_quartiles_pct"]
        rows.append((f"3. steady state, tiny kernel (n={s['n']}, {s['config']}), per launch",
                     f"plain Triton: {s['median_us']['triton']:.2f} us",
                     f"pinned: {s['median_us']['pinned']:.2f} us (paired median {s['overhead_pct']:+.2f}%, "
                     f"quartiles {q1:+.1f}%..{q3:+.1f}%)", GOALS["steady"],
                     "met" if s["overhead_pct"] <= 1.0 else "MISSED"))
    m = results.get("matmul")
    if isinstance(m, dict) and "median_ms" in m:
        t = m["tflops"]
        rows.append((f"4. matmul {m['size']}^3 fp16, pinned from recorded table",
                     f"Triton's winner: {m['median_ms']['triton']:.3f} ms ({t['triton']:.0f} TFLOP/s)",
                     f"pinned: {m['median_ms']['pinned_table']:.3f} ms ({t['pinned_table']:.0f} TFLOP/s, "
                     f"{m['pinned_vs_triton_pct']:+.2f}%)", GOALS["matmul"],
                     "met" if m["pinned_vs_triton_pct"] <= 2.0 else "MISSED"))
        rows.append(("   matmul, min-cost pin without a table",
                     f"Triton's winner: {m['median_ms']['triton']:.3f} ms",
                     f"min_cost: {m['median_ms']['min_cost']:.3f} ms ({m['min_cost_slowdown']:.2f}x slower)",
                     "(reported)", ""))
    for name in ("repro", "first", "steady", "matmul"):
        if isinstance(results.get(name), str):
            rows.append((name, "FAILED", results[name].splitlines()[0][:100], "", ""))
    lines.append("| benchmark | baseline | autotune_guard | goal | |")
    lines.append("|---|---|---|---|---|")
    lines += [f"| {' | '.join(row)} |" for row in rows]
    if isinstance(m, dict) and "configs" in m:
        lines += ["", f"matmul configs: recorded winner {m['recorded_winner']}; table -> {m['configs']['pinned_table']}; "
                      f"Triton in-process winner {m['configs']['triton']}; min_cost {m['configs']['min_cost']}"]
    if isinstance(r, dict) and "auto" in r:
        lines += [f"reproducibility: auto winners {r['auto']['winners']}; timer calls auto "
                  f"{r['auto']['timer_calls']}, pinned {r['pinned']['timer_calls']}"]
    return "\n".join(lines)


def main_all(opts) -> int:
    os.makedirs(opts.out, exist_ok=True)
    run = Run(opts)
    results = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(["python"] + sys.argv),
               "options": vars(opts), "host": platform.node()}
    results["versions"] = versions(run)
    benches = {"repro": bench_repro, "first": bench_first, "steady": bench_steady, "matmul": bench_matmul}
    for name in opts.only or list(benches):
        t0 = time.time()
        try:
            results[name] = benches[name](run)
        except Exception as exc:  # one failed benchmark does not lose the others' figures
            results[name] = f"{type(exc).__name__}: {exc}"
        print(f"[{name}: {time.time() - t0:.1f} s]", file=sys.stderr, flush=True)
        with open(os.path.join(opts.out, "results.json"), "w") as dst:
            json.dump(results, dst, indent=1, default=str)
    text = report(results)
    with open(os.path.join(opts.out, "table.md"), "w") as dst:
        dst.write(text + "\n")
    print(text)
    return 0 if not any(isinstance(results.get(n), str) for n in benches) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=["all", *ROLES])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes under TRITON_INTERPRET=1 (logic check, no GPU)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--only", nargs="*", choices=["repro", "first", "steady", "matmul"])
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--cols", type=int, default=16384)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=150, help="steady: interleaved blocks per variant")
    ap.add_argument("--launches", type=int, default=500, help="steady: launches per block")
    ap.add_argument("--mm-reps", type=int, default=7, help="interleaved do_bench repetitions per matmul variant")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--first-reps", type=int, default=2)
    ap.add_argument("--barrier")
    ap.add_argument("--prewarm", action="store_true", help="first: launch another kernel before timing")
    ap.add_argument("--diagnose", action="store_true", help="steady: also Triton's single-config path, pinned without lock")
    ap.add_argument("--no-gc", action="store_true", help="steady: garbage collector off while timing")
    opts = ap.parse_args()
    if opts.role == "all":
        if opts.smoke:
            opts.rows, opts.cols, opts.size, opts.n, opts.reps, opts.launches = 4, 4096, 64, 1024, 3, 5
            opts.first_reps, opts.mm_reps = 1, 2
        return main_all(opts)
    sys.path.insert(0, HERE)
    print(json.dumps(ROLES[opts.role](opts), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
