"""An ordinary distributed program with autotuned Triton kernels: it knows nothing of
autotune_guard.  Run it under torchrun; on a CPU-only machine with TRITON_INTERPRET=1.

Each step launches a float32 row sum whose candidates add the floats in different orders (so
different configs give different bits) and an elementwise kernel, then calls ``dist.barrier()``.
Every rank has the same data; each prints the hash of its results: different hashes mean the
ranks computed different numbers from the same input.
"""

import hashlib
import os
import random
import statistics
import time

import torch
import torch.distributed as dist
import triton
import triton.language as tl


# Under the interpreter a candidate's CPU time says little about a GPU; the row sum's candidates do
# the same work, so, as on a GPU, noise picks the winner. DEMO_TIMER_JITTER (default +-20%) adds the
# run-to-run noise of a shared GPU to make that visible on a quiet CPU.
JITTER = float(os.environ.get("DEMO_TIMER_JITTER", "0.2"))


def wall_clock_timer(kernel_call, quantiles):
    # Triton's default timer needs a GPU; under the interpreter time the call on the CPU.
    times = []
    for _ in range(3):
        start = time.perf_counter()
        kernel_call()
        times.append((time.perf_counter() - start) * 1e3 * random.uniform(1 - JITTER, 1 + JITTER))
    return [statistics.median(times), min(times), max(times)]


@triton.autotune(
    configs=[triton.Config({"BLOCK": b}) for b in (64, 128, 256, 512)],
    key=["n_cols"],
    do_bench=wall_clock_timer,
)
@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, N_POW2: tl.constexpr, BLOCK: tl.constexpr):
    # The row as an (N_POW2 // BLOCK, BLOCK) tile, summed down its columns, then across: BLOCK sets
    # the order in which the floats are added, so each candidate gives other low bits, for the
    # same work.
    row = tl.program_id(0)
    offs = tl.arange(0, N_POW2 // BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    tile = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(tl.sum(tile, axis=0), axis=0))


@triton.autotune(
    configs=[triton.Config({"BLOCK": b}) for b in (128, 256, 1024)],
    key=["n"],
    do_bench=wall_clock_timer,
)
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def row_sum(x):
    out = torch.empty(x.shape[0], dtype=torch.float32)
    row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], N_POW2=triton.next_power_of_2(x.shape[1]))
    return out


def axpy(alpha, x, y):
    out = torch.empty_like(x)
    n = x.numel()
    axpy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, alpha, n)
    return out


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same data on every rank
    digest = hashlib.sha256()
    for step in range(int(os.environ.get("DEMO_STEPS", "3"))):
        x = torch.randn(8, 3000 + 1000 * (step % 2))
        sums = row_sum(x)
        update = axpy(0.5, sums, torch.ones_like(sums))
        digest.update(update.numpy().tobytes())
        dist.barrier()
    print(f"rank {rank}: result hash {digest.hexdigest()[:12]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
