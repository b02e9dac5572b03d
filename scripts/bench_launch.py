"""Steady-state launch path: a pinned (and an observing auto-mode) autotuner vs Triton's own
cached path, with the launch itself stubbed out so that only the Python dispatch is measured.

One kernel with 8 candidates, one autotuner object, the same arguments for every variant:

* ``triton``  Triton's own ``Autotuner.run`` (the guard's patch taken off the class for the block),
              after Triton has tuned the key once: a tuning-cache hit;
* ``pinned``  the guard's ``run`` under ``AUTOTUNE_MODE=pinned``, the key already selected: on
              Triton 3.8+ the choice is in Triton's cache (it was the only survivor of the
              kernel's pruning), so this is Triton's own cached path under the autotuner's lock;
              on 3.3-3.7 the guard's key lookup and Triton's single-config branch (the swap);
* ``pinned_pruned``  the same, for a kernel with an ``early_config_prune`` (identity here): on
              3.8+ Triton's own cached path too (the pruning of a new key reads that call's own
              arguments, so nothing needs a lock once a key is decided); on 3.3-3.7 the same path
              as ``pinned``;
* ``triton_hooked``, ``pinned_hooked``  the same two, for a kernel whose Configs have a
              ``pre_hook`` (a no-op here), compared with each other: on 3.8+ a decided key's
              launch is Triton's cached path written out by the guard, with no lock, so that the
              pre_hook gets the call's own arguments rather than the ones Triton's run keeps on
              the autotuner (``nargs``), which another thread's launch would rewrite; on 3.3-3.7
              the same path as ``pinned``;
* ``auto``, ``record``  under ``AUTOTUNE_MODE=auto`` / ``record`` (Triton times; the guard notes
              the winner as Triton stores it in its ``cache``): Triton's own run, on every release;
* ``consensus``  under ``AUTOTUNE_MODE=consensus`` (no process group here: this process decides
              alone), the key decided: Triton's cached path written out over the guard's choice.

The autotuner's ``.fn`` (a ``JITFunction``, or an ``InterpretedFunction`` under
``TRITON_INTERPRET=1``) gets a no-op ``run``, so nothing compiles or launches and no GPU is needed;
the tuning timer is a stub too.  Repetitions interleave the variants (the order rotates), each
times ``--launches`` calls of ``kernel[grid](...)``; the figures are medians over repetitions, and
a variant's difference from its baseline is the median of the per-repetition differences.

Usage:  python scripts/bench_launch.py [--reps 60] [--launches 10000] [--no-interpret]
Goal:   every mode - triton <= +0.3 us per launch (issue 23).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time

GOAL_US = 0.3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--launches", type=int, default=10000)
    ap.add_argument("--no-interpret", action="store_true",
                    help="leave TRITON_INTERPRET alone (on a GPU machine: measure the JITFunction path)")
    opts = ap.parse_args()
    import tempfile

    record_prefix = os.path.join(tempfile.mkdtemp(prefix="bench-launch-"), "rec")
    for name in [k for k in os.environ if k.startswith("AUTOTUNE_")]:
        del os.environ[name]  # this script installs its policies itself
    if not opts.no_interpret:
        os.environ["TRITON_INTERPRET"] = "1"

    import torch
    import triton
    import triton.language as tl
    from triton.runtime import autotuner as triton_autotuner

    import autotune_guard
    from autotune_guard import _patching
    from autotune_guard.adapters import triton as triton_adapter

    def stub_timer(kernel_call, quantiles):
        kernel_call()
        return [1.0, 1.0, 1.0]

    @triton.autotune(
        configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (128, 256, 512, 1024) for w in (4, 8)],
        key=["n"], do_bench=stub_timer,
    )
    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    autotune_guard.install({"AUTOTUNE_MODE": "auto"})  # patches Autotuner.run
    cls = triton_autotuner.Autotuner
    guarded, original = cls.run, _patching.original(cls, "run")
    assert getattr(guarded, "_autotune_guard", False) and original is not None

    launched = []
    add_kernel.fn.run = lambda *args, **kwargs: launched.append(1)  # the launch, stubbed
    fn_kind = type(add_kernel.fn).__name__
    n = 4096
    x, y, out = torch.ones(n), torch.ones(n), torch.empty(n)
    grid = (1,)
    args = (x, y, out, n)

    def keep_all(configs, nargs, **kwargs):
        return configs

    def no_op(nargs):
        pass

    def variant(name):
        """Put the process in the variant's state and make sure its key needs no more work."""
        add_kernel.early_config_prune = keep_all if name == "pinned_pruned" else None
        for config in add_kernel.configs:
            config.pre_hook = no_op if name.endswith("_hooked") else None
        if name.startswith("triton"):
            cls.run = original
            add_kernel.__dict__.pop("run", None)  # a pinned variant's launch path (3.8+) goes too
            add_kernel.cache = dict(add_kernel.cache)  # Triton's own plain dict (auto's is observed)
        else:
            cls.run = guarded
            mode = name.split("_")[0]
            settings = {"AUTOTUNE_MODE": mode}
            if mode == "record":
                settings["AUTOTUNE_RECORD_PATH"] = record_prefix
            autotune_guard.install(settings)
        add_kernel[grid](*args)  # first launch of a new policy builds its state / selection

    for name in ("triton", "pinned", "auto"):
        variant(name)
        if name == "pinned":
            pinned_log = autotune_guard.choice_log()
            pinned_strategy = triton_adapter.strategy_of(add_kernel)
    assert len(add_kernel.cache) == 1  # Triton tuned the key once; later 'triton' blocks are cache hits
    assert len(pinned_log) == 1 and list(pinned_log.values())[0].endswith(";pinned"), pinned_log

    names = ["triton", "pinned", "pinned_pruned", "triton_hooked", "pinned_hooked", "auto", "record", "consensus"]
    baseline = {name: "triton_hooked" if name.endswith("_hooked") else "triton" for name in names}
    per_launch = {name: [] for name in names}
    direct = set()
    strategies = {}
    loops = range(opts.launches)
    for rep in range(opts.reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            variant(name)
            if triton_adapter.strategy_of(add_kernel) in ("pin-through-pruning:direct", "observe:direct"):
                direct.add(name)  # the guard handed the launches to Triton's own run
            strategies[name] = triton_adapter.strategy_of(add_kernel)
            launch = add_kernel[grid]
            gc.collect()
            gc.disable()
            t0 = time.thread_time()
            for _ in loops:
                launch(*args)
            elapsed = time.thread_time() - t0
            gc.enable()
            per_launch[name].append(elapsed / opts.launches * 1e6)
    cls.run = guarded
    assert launched, "the stub never ran"

    med = {n: statistics.median(v) for n, v in per_launch.items()}
    print(f"autotune_guard launch-path benchmark  ({time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
          f"Triton {triton.__version__}, torch {torch.__version__}, {platform.machine()})")
    print(f"command: python scripts/bench_launch.py --reps {opts.reps} --launches {opts.launches}"
          f"{' --no-interpret' if opts.no_interpret else ''}   (.fn is a {fn_kind}, its run stubbed)")
    print(f"pinned choice: {pinned_log}")
    print("pinned steady state: " + ("Triton's own cached path (the choice survived the kernel's pruning alone); "
                                     "with pre_hooks, that path written out by the guard (the pre_hook gets "
                                     "the call's own arguments), no lock"
                                     if pinned_strategy.startswith("pin-through-pruning") else
                                     "the guard's key lookup + Triton's single-config branch (configs swapped), "
                                     "under the autotuner's lock"))
    print("launched by Triton's own run, nothing of the guard between: "
          + (", ".join(n for n in names if n in direct) or "none"))
    print("strategies: " + ", ".join(f"{n}={strategies[n]}" for n in names if not n.startswith("triton")))
    print("figures: CPU time of the launching thread (time.thread_time), so that time the thread spends "
          "descheduled on a busy machine is left out")
    print()
    # The difference is the median over repetitions of each repetition's own difference: the two
    # blocks of a pair ran within a fraction of a second of each other, so the machine's slow drift
    # (which moves whole medians by a microsecond on a shared VM) cancels out.
    paired = {name: statistics.median(v - b for v, b in zip(per_launch[name], per_launch[baseline[name]]))
              for name in names if not name.startswith("triton")}
    print(f"  {'variant':<13} {'median us/launch':>17} {'min':>8} {'max':>8} {'vs triton':>10}  "
          "(median of per-repetition differences; triton_hooked for *_hooked)")
    for name in names:
        vals = per_launch[name]
        diff = f"{paired[name]:+.3f}" if name in paired else ""
        print(f"  {name:<13} {med[name]:>17.3f} {min(vals):>8.3f} {max(vals):>8.3f} {diff:>10}")
    slowest = max(paired, key=paired.get)
    worst = paired[slowest]
    verdict = "ok" if worst <= GOAL_US else "MISSED"
    print(f"\nevery mode vs Triton's cached path, the slowest variant ({slowest}): {worst:+.3f} us per launch "
          f"(goal <= +{GOAL_US} us): {verdict}")
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
