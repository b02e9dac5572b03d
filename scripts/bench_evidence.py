"""What keeping the evidence files current costs at 1,000 / 5,000 / 20,000 choices: bytes
written against the final files' size, and the loop's time against the same program without
the guard, side by side in one run.

Each measurement is a fresh process (``python bench_evidence.py --child N VARIANT``): one
autotuned kernel (3 candidates, a timer that launches once, as cheap as Triton's under the CPU
interpreter gets) launched with N distinct keys, so N choices are made as fast as the
interpreter runs them.  Variants: ``none`` (no ``AUTOTUNE_*`` variable: the guard is not
loaded), ``auto`` (the guard observing, no files: what the guard costs without evidence) and ``record`` (``AUTOTUNE_RECORD_PATH`` and ``AUTOTUNE_DIGEST_PATH``: a record and a
choices file, the record the largest evidence there is).  Bytes written are the process's own
count of bytes passed to ``write()`` (``wchar`` of ``/proc/self/io``, read after the exit
handlers wrote the final files), less the same count of the ``none`` process.  Variants
alternate; the loop's figure is the median over ``--reps``.

Usage:  python scripts/bench_evidence.py [--choices 1000 5000 20000] [--reps 3]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def _wchar() -> int:
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("wchar:"))


def child(keys: int, result_path: str) -> int:
    """The measured program (run with or without the guard's variables)."""
    result = {}

    def report():  # registered before the guard's handlers: runs after them (atexit is LIFO)
        result["wchar"] = _wchar()
        with open(result_path, "w") as out:
            json.dump(result, out)

    atexit.register(report)
    import torch
    import triton
    import triton.language as tl

    def timer(kernel_call, quantiles=None, **_):
        start = time.perf_counter()
        kernel_call()
        took = (time.perf_counter() - start) * 1e3
        return [took, took, took]

    @triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"], do_bench=timer)
    @triton.jit
    def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < 1), mask=offs < 1)

    x, out = torch.ones(1), torch.empty(1)
    began = time.perf_counter()
    for n in range(1, keys + 1):
        copy_kernel[(1,)](x, out, n)
    result["loop_s"] = time.perf_counter() - began
    return 0


def run_child(keys: int, variant: str, tmp: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "_AUTOTUNE"))}
    env.update(TRITON_INTERPRET="1", PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    prefix = os.path.join(tmp, f"{variant}{keys}")
    if variant == "auto":
        env.update(AUTOTUNE_MODE="auto", AUTOTUNE_LOG_LEVEL="warning")
    if variant == "record":
        env.update(AUTOTUNE_RECORD_PATH=prefix + "-rec", AUTOTUNE_DIGEST_PATH=prefix + "-ch",
                   AUTOTUNE_LOG_LEVEL="warning")
    result_path = prefix + ".result"
    subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(keys), result_path], env=env, check=True)
    with open(result_path) as src:
        result = json.load(src)
    os.unlink(result_path)
    files = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith(os.path.basename(prefix))]
    result["final"] = sum(os.path.getsize(f) for f in files)
    result["left"] = sorted(os.path.basename(f) for f in files)
    for f in files:
        os.unlink(f)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--choices", type=int, nargs="+", default=[1000, 5000, 20000])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("N", "RESULT"), help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child:
        return child(int(opts.child[0]), opts.child[1])
    import triton

    tmp = tempfile.mkdtemp(prefix="bench_evidence-")
    print(f"evidence cost ({time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, Triton "
          f"{triton.__version__}, CPU interpreter, {os.cpu_count()} cores)")
    print(f"command: python scripts/bench_evidence.py --choices {' '.join(map(str, opts.choices))} --reps {opts.reps}")
    print(f"{'choices':>8} {'final files':>12} {'guard wrote':>12} {'ratio':>7} {'loop none':>10} {'loop auto':>10} "
          f"{'loop record':>12} {'record/none':>12} {'record/auto':>12}  files left")
    try:
        for keys in opts.choices:
            runs = {"none": [], "auto": [], "record": []}
            order = ["none", "auto", "record"]
            for rep in range(opts.reps):
                for variant in order[rep % 3:] + order[:rep % 3]:
                    runs[variant].append(run_child(keys, variant, tmp))
            written = statistics.median(r["wchar"] for r in runs["record"]) - statistics.median(
                r["wchar"] for r in runs["none"])
            final = runs["record"][0]["final"]
            loops = {v: statistics.median(r["loop_s"] for r in rs) for v, rs in runs.items()}
            print(f"{keys:>8} {final / 2**20:>9.2f} MiB {written / 2**20:>8.2f} MiB {written / final:>6.2f}x "
                  f"{loops['none']:>9.2f}s {loops['auto']:>9.2f}s {loops['record']:>11.2f}s "
                  f"{loops['record'] / loops['none']:>11.3f}x {loops['record'] / loops['auto']:>11.3f}x  "
                  f"{', '.join(runs['record'][0]['left'])}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
