"""What the guard adds to a launch of a kernel compiled by ``torch.compile``, measured on the CPU.

Inductor compiles Triton kernels only for GPUs, so this drives the guard's Inductor adapter on a
stand-in for ``CachingAutotuner`` whose ``run`` does what Inductor's steady state does before it
launches (one launcher left, the re-tuning flags read, the launcher called; the launch itself is a
no-op).  The user kernel is a real ``@triton.autotune`` kernel registered in Dynamo's side table,
as Dynamo does when it traces ``kernel[grid](...)``, so the guard names and keys it as it would on
a GPU.  The kernels are launched from a module shaped like Inductor's generated wrapper:

* ``static``   ``row_sum_0.run(x, out, 16384, stream=0)``: the key is a literal, so the guard
               leaves no wrapper and this is the stand-in's own ``run``;
* ``dynamic``  ``row_sum_0.run(x, out, n, stream=0)``: the key can change, so the guard follows
               it with its per-key wrapper (``adapters.inductor.step.follow_keys``) on every launch.

Both pinned from the same table.  Repetitions interleave the variants; figures are medians.

Usage:  python scripts/bench_compiled_launch.py [--reps 40] [--launches 20000]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
import types

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from autotune_guard import choice_log, install  # noqa: E402
from autotune_guard.adapters import inductor  # noqa: E402


def row_sum(x_ptr, out_ptr, n, BLOCK):  # the user's kernel; only its source is read
    pass


class Launcher:
    def __init__(self, config):
        self.config, self.def_args = config, ["x_ptr", "out_ptr", "n"]

    def __call__(self, *args, stream):
        return None


class CachingAutotuner:
    """Inductor's steady state before the launch, without the GPU."""

    def __init__(self, fn, configs):
        self.fn, self.custom_kernel = fn, True
        self.launchers = [Launcher(c) for c in configs]
        self.inductor_meta, self.triton_meta = {"kernel_name": "row_sum_0"}, {"constants": {}}

    def autotune_to_one_config(self, *args, **kwargs):
        raise AssertionError("pinned mode never times")

    def benchmark_all_configs(self, *args, **kwargs):
        raise AssertionError("pinned mode never times")

    def run(self, *args, stream, benchmark_run=False, **kwargs):
        if len(self.launchers) != 1:
            self.autotune_to_one_config(*args, **kwargs)
        if not getattr(self.launchers[0].config, "found_by_coordesc", False) \
                and self.inductor_meta.get("coordinate_descent_tuning", False):
            raise AssertionError("not in this benchmark")
        (launcher,) = self.launchers
        return launcher(*args, stream=stream)


class AutotuneCache:  # Inductor's .best_config cache: the guard bypasses it under pinned
    def read_best(self, inductor_meta, configs):
        return None

    def save(self, *args, **kwargs):
        return None


def program(directory, name, key_argument):
    """A module shaped like Inductor's generated wrapper, launching ``row_sum_0``."""
    path = os.path.join(directory, f"{name}.py")
    with open(path, "w") as f:
        f.write(f"def call(x, out, n):\n    row_sum_0.run(x, out, {key_argument}, stream=0)\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--launches", type=int, default=20000)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="bench-compiled-launch-")
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512, 1024) for w in (4, 8)]
    user = triton.autotune(configs=configs, key=["n"], do_bench=lambda *a, **k: [1.0, 1.0, 1.0])(JITFunction(row_sum))
    kernel_side_table.add_kernel(user)
    with open(os.path.join(work, "interpret.json"), "w") as f:
        json.dump({"format": "autotune_guard.table/1", "arch": "interpret", "kernels": {
            f"{__name__}.row_sum": {"*": {"kwargs": {"BLOCK": 1024}, "num_warps": 4}}}}, f)
    inductor.patch(types.SimpleNamespace(CachingAutotuner=CachingAutotuner, AutotuneCache=AutotuneCache))
    install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": work, "AUTOTUNE_ON_MISS": "error"})

    copy = types.SimpleNamespace(__name__="row_sum", src=user.fn.src)
    x, out = torch.zeros(4), torch.zeros(4)
    calls = {}
    for name, key_argument in (("static", "16384"), ("dynamic", "n")):
        kernel = CachingAutotuner(copy, configs)
        module = program(work, f"generated_{name}", key_argument)
        module.row_sum_0 = kernel
        module.call(x, out, 16384)  # the first launch: the guard's choice, and its wrapper or none
        assert kernel.launchers[0].config.kwargs == {"BLOCK": 1024}, kernel.launchers[0].config
        assert ("run" in kernel.__dict__) == (name == "dynamic"), name
        calls[name] = module.call

    per_launch = {name: [] for name in calls}
    for rep in range(args.reps):
        order = list(calls) if rep % 2 == 0 else list(reversed(calls))
        for name in order:
            call = calls[name]
            start = time.perf_counter()
            for _ in range(args.launches):
                call(x, out, 16384)
            per_launch[name].append((time.perf_counter() - start) / args.launches * 1e6)
    static, dynamic = (statistics.median(per_launch[n]) for n in ("static", "dynamic"))
    print(f"torch {torch.__version__}, Triton {triton.__version__}, Python {sys.version.split()[0]}; "
          f"{args.reps} interleaved repetitions of {args.launches} launches, medians")
    print(f"static shapes (no wrapper, the stand-in's own run): {static:.3f} µs per launch")
    print(f"dynamic shapes (the guard's per-key wrapper):       {dynamic:.3f} µs per launch "
          f"({dynamic - static:+.3f} µs)")
    print("choices:", json.dumps({k: v for k, v in choice_log().items() if "row_sum" in k}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
