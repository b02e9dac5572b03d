"""Does recording cost anything on steady-state launches?  Record vs auto vs no guard, same run.

One autotuned kernel (8 candidates), one autotuner object, one tuning key that Triton has
already tuned (every launch measured is a tuning-cache hit), in three variants:

* ``none``    Triton's own ``Autotuner.run`` (the guard's patch taken off the class for the block);
* ``auto``    the guard under ``AUTOTUNE_MODE=auto`` (Triton times, the guard observes);
* ``record``  the guard under ``AUTOTUNE_MODE=record`` with ``AUTOTUNE_RECORD_PATH`` (the key's
              winner and timings are in the record file before measuring starts).

Two measurements per variant:

* ``dispatch``  the kernel's ``fn.run`` stubbed: Python dispatch alone, the part the guard could
                slow down (CPU time of the launching thread);
* ``launch``    the real launch: Triton's interpreter on a CPU (``TRITON_INTERPRET=1``, the
                default here), a real kernel launch on a GPU with ``--gpu`` (wall time, host side).

Blocks interleave the variants (the order rotates each repetition); figures are medians over
repetitions (and minima, which other load on the machine disturbs least), and the ratios
compare figures of the same run.

What keeping the evidence files current costs in bytes and loop time at thousands of choices is
``scripts/bench_evidence.py``'s.

Usage:  python scripts/bench_record.py [--reps 30] [--launches 5000] [--real-launches N] [--gpu]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=30, help="repetitions of every (variant, measurement) block")
    ap.add_argument("--launches", type=int, default=5000, help="launches per dispatch block")
    ap.add_argument("--real-launches", type=int, default=None,
                    help="launches per real-launch block (default: 2000 with --gpu, 20 under the interpreter)")
    ap.add_argument("--gpu", action="store_true", help="launch on the GPU (default: TRITON_INTERPRET=1 on the CPU)")
    opts = ap.parse_args()
    if opts.real_launches is None:
        opts.real_launches = 2000 if opts.gpu else 20
    for name in [k for k in os.environ if k.startswith("AUTOTUNE_")]:
        del os.environ[name]  # this script installs its policies itself
    if not opts.gpu:
        os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # a checkout, not installed

    import torch
    import triton
    import triton.language as tl
    from triton.runtime import autotuner as triton_autotuner

    import autotune_guard
    from autotune_guard import _patching

    if opts.gpu:
        timer = None  # Triton's own
    else:
        def timer(kernel_call, quantiles):  # Triton's default timer needs a GPU
            start = time.perf_counter()
            kernel_call()
            t = (time.perf_counter() - start) * 1e3
            return [t, t, t]

    @triton.autotune(
        configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (128, 256, 512, 1024) for w in (4, 8)],
        key=["n"], do_bench=timer,
    )
    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    device = "cuda" if opts.gpu else "cpu"
    n = 128  # one program for most candidates: the interpreter's launch stays short
    x, y, out = (torch.ones(n, device=device) for _ in range(3))
    args = (x, y, out, n)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    sync = torch.cuda.synchronize if opts.gpu else (lambda: None)

    tmp = tempfile.mkdtemp(prefix="bench_record-")
    record_path = os.path.join(tmp, "rec")
    quiet = {"AUTOTUNE_LOG_LEVEL": "warning"}
    policies = {"auto": {"AUTOTUNE_MODE": "auto", **quiet}, "record": {"AUTOTUNE_RECORD_PATH": record_path, **quiet}}
    # The record policy first, so that the one tuning of the key happens (and is recorded) under it.
    autotune_guard.install(policies["record"])
    cls = triton_autotuner.Autotuner
    guarded, original = cls.run, _patching.original(cls, "run")
    add_kernel[grid](*args)
    sync()
    from autotune_guard import evidence as writer

    writer.write_files()
    with open(writer.rank_file(record_path, 0)) as src:
        recorded = json.load(src)["kernels"]
    assert len(add_kernel.cache) == 1 and recorded, "the key was not tuned and recorded"

    def variant(name):
        if name == "none":
            cls.run = original
        else:
            cls.run = guarded
            autotune_guard.install(policies[name])
        add_kernel[grid](*args)  # a new policy builds its per-autotuner state on its first launch
        sync()

    real_run = add_kernel.fn.run
    stubbed = []

    def measure(name, kind):
        variant(name)
        count = opts.launches if kind == "dispatch" else opts.real_launches
        add_kernel.fn.run = (lambda *a, **k: stubbed.append(1)) if kind == "dispatch" else real_run
        clock = time.thread_time if kind == "dispatch" else time.perf_counter
        launch = add_kernel[grid]
        gc.collect()
        gc.disable()
        try:
            t0 = clock()
            for _ in range(count):
                launch(*args)
            sync()
            elapsed = clock() - t0
        finally:
            gc.enable()
            add_kernel.fn.run = real_run
        return elapsed / count * 1e6

    names = ["none", "auto", "record"]
    kinds = ["dispatch", "launch"]
    results = {(v, k): [] for v in names for k in kinds}
    tuned_before = len(add_kernel.cache)
    for rep in range(opts.reps):
        for kind in kinds:
            for name in names[rep % 3:] + names[:rep % 3]:
                results[(name, kind)].append(measure(name, kind))
    cls.run = guarded
    assert stubbed and len(add_kernel.cache) == tuned_before, "a measured launch tuned, or the stub never ran"
    autotune_guard.install(policies["auto"])  # nothing left to write at exit
    shutil.rmtree(tmp, ignore_errors=True)

    where = torch.cuda.get_device_name() if opts.gpu else "CPU, TRITON_INTERPRET=1"
    print(f"record-mode steady-state launch cost  ({time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
          f"Triton {triton.__version__}, torch {torch.__version__}, {where})")
    print(f"command: python scripts/bench_record.py --reps {opts.reps} --launches {opts.launches} "
          f"--real-launches {opts.real_launches}{' --gpu' if opts.gpu else ''}")
    print("us per launch over the repetitions (dispatch: fn.run stubbed, thread CPU time; launch: real, wall time)")
    print(f"{'':18}{'none':>12}{'auto':>12}{'record':>12}{'record/auto':>13}{'record/none':>13}{'auto/none':>11}")
    for kind in kinds:
        for stat, reduce in (("median", statistics.median), ("min", min)):
            row = [reduce(results[(v, kind)]) for v in names]
            print(f"{kind + ' ' + stat:18}" + "".join(f"{value:>12.3f}" for value in row)
                  + f"{row[2] / row[1]:>12.3f}x{row[2] / row[0]:>12.3f}x{row[1] / row[0]:>10.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
