"""Real Triton kernels for the tests (run under TRITON_INTERPRET=1 on the CPU).

Each autotuned kernel has a timer of its own: under the interpreter Triton's default timer
needs a GPU.  ``random_timer`` returns random times, so timed winners differ from process to
process, like noisy GPU timings do; ``TIMER_CALLS`` counts its calls in this process.
"""

import random

import triton
import triton.language as tl

TIMER_CALLS = []


def random_timer(kernel_call, quantiles):
    kernel_call()
    TIMER_CALLS.append(1)
    t = random.random()
    return [t, t * 0.9, t * 1.1]


ADD_CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (32, 64, 128, 256) for w in (1, 2)]


@triton.autotune(configs=ADD_CONFIGS, key=["n"], do_bench=random_timer)
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"], do_bench=random_timer)
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


def add(x, y):
    import torch

    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    return out


def scale(x, factor):
    import torch

    out = torch.empty_like(x)
    n = x.numel()
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, factor)
    return out
