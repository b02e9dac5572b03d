"""One rank of a consensus-mode job (run under torchrun, gloo, TRITON_INTERPRET=1).

usage: consensus_worker.py OUT_DIR

Every timer in this job returns random times, so without consensus the ranks would pick
different winners (``control_kernel`` shows it: it is left to Triton on purpose through
AUTOTUNE_CONFIG_INVARIANT=control_body).  Each rank writes OUT_DIR/rank<N>.json:

* ``choices``: its choice log; ``timer_calls``: how often the timers of kernels.demo ran here;
* ``ran``: the (kernel, key) pairs of kernels.demo it launched, uneven on purpose: three add keys
  on every rank, in an order rotated by rank so that different ranks claim different keys, from
  two threads at once; scale 1000 on every rank; one add key on this rank alone; scale 500 on
  even ranks only;
* ``control``: Triton's own winners for ``control_kernel``;
* ``mismatch``: ``pruned_kernel`` prunes by rank (rank 1 loses a candidate): rank 0 tunes it first,
  then the others launch it; rank 1 must refuse with a clear error;
* ``failed``: ``failing_kernel``'s timer raises on rank 0, which claims it first: the others must
  fail at once (not at the timeout) with rank 0's error.
"""

import json
import os
import random
import sys
import threading
import time

import torch
import torch.distributed as dist
import triton
import triton.language as tl

import kernels.demo as demo

RANK = int(os.environ["RANK"])
CONTROL_CALLS = []
OTHER_CALLS = []


def control_timer(kernel_call, quantiles):
    CONTROL_CALLS.append(1)
    t = random.random()
    return [t, t, t]


def other_timer(kernel_call, quantiles):
    OTHER_CALLS.append(1)
    t = random.random()
    return [t, t, t]


def failing_timer(kernel_call, quantiles):
    if RANK == 0:
        raise RuntimeError("timer broke on purpose")
    return [1.0, 1.0, 1.0]


def serialize_interpreted_runs():
    from triton.runtime import interpreter

    lock = threading.Lock()
    run = interpreter.GridExecutor.__call__

    def locked(self, *args, **kwargs):
        with lock:
            return run(self, *args, **kwargs)

    interpreter.GridExecutor.__call__ = locked


def rank_dependent_prune(configs, nargs, **kwargs):
    return configs[1:] if RANK == 1 else configs


# Three bodies, not one: a decision is named by the kernel function's qualified name, so
# autotuners over one function with different configs would meet under one name (and refuse).
@triton.jit
def control_body(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def pruned_body(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def failing_body(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (32, 64, 128, 256) for w in (1, 2)]
control_kernel = triton.autotune(configs=CONFIGS, key=["n"], do_bench=control_timer)(control_body)
pruned_kernel = triton.autotune(configs=CONFIGS[:4], key=["n"], do_bench=other_timer,
                                prune_configs_by={"early_config_prune": rank_dependent_prune})(pruned_body)
failing_kernel = triton.autotune(configs=CONFIGS[:3], key=["n"], do_bench=failing_timer)(failing_body)


def copy(kernel, n):
    x = torch.rand(n)
    out = torch.zeros_like(x)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    assert torch.equal(out, x)


def run(kernel, n):
    x, y = torch.rand(n), torch.rand(n)
    if kernel == "add":
        assert torch.allclose(demo.add(x, y), x + y)
    else:
        assert torch.allclose(demo.scale(x, 3.0), x * 3.0)


def main():
    out_dir = sys.argv[1]
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    ran = []

    # Two threads meet the same new keys of one kernel at once; ranks take the keys in rotated
    # orders, so different ranks claim them. Triton's interpreter is not thread-safe (it patches
    # triton.language while a kernel runs), and a decided key launches with no lock of the
    # guard's, as on a GPU: the interpreted run itself is serialized here, the claims are not.
    serialize_interpreted_runs()
    common = [("add", 1000), ("add", 2000), ("add", 4000)]
    common = common[RANK % len(common):] + common[:RANK % len(common)]
    errors = []

    def worker():
        try:
            for kernel, n in common:
                run(kernel, n)
        except BaseException as exc:  # reported, so that the test shows it
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ran += common
    run("scale", 1000)
    ran.append(("scale", 1000))
    run("add", 3000 + RANK)  # this rank alone
    ran.append(("add", 3000 + RANK))
    if RANK % 2 == 0:
        run("scale", 500)
        ran.append(("scale", 500))
    for kernel, n in common:  # steady state: pinned, no timing
        run(kernel, n)

    control = {}
    for n in (1000, 2000):
        copy(control_kernel, n)
    for key, config in control_kernel.cache.items():
        control[str(key[0])] = str(config)

    mismatch = failed = None
    if RANK == 0:
        copy(pruned_kernel, 512)
        try:
            copy(failing_kernel, 512)
        except RuntimeError as exc:
            failed = {"error": str(exc), "seconds": 0.0}
    dist.barrier()
    if RANK != 0:
        try:
            copy(pruned_kernel, 512)
            mismatch = "ok"
        except RuntimeError as exc:
            mismatch = f"{type(exc).__name__}: {exc}"
        start = time.monotonic()
        try:
            copy(failing_kernel, 512)
            failed = {"error": None}
        except RuntimeError as exc:
            failed = {"error": f"{type(exc).__name__}: {exc}", "seconds": time.monotonic() - start}

    import autotune_guard

    result = {
        "rank": RANK, "world": world, "choices": autotune_guard.choice_log(), "timer_calls": len(demo.TIMER_CALLS),
        "other_calls": len(OTHER_CALLS), "control_calls": len(CONTROL_CALLS), "ran": ran, "control": control,
        "mismatch": mismatch, "failed": failed,
        "candidates": {"add": len(demo.add_kernel.configs), "scale": len(demo.scale_kernel.configs)},
    }
    with open(os.path.join(out_dir, f"rank{RANK}.json"), "w") as out:
        json.dump(result, out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
