"""A kernel one of whose candidates fails while timed: Triton's time for it is infinite (as for a
config that fails to compile or runs out of resources)."""

import torch
import triton
import triton.language as tl


def timer(kernel_call, quantiles):
    kernel_call()
    timer.calls += 1
    return [float("inf")] * 3 if timer.calls == 1 else [0.5 * timer.calls, 0.4, 0.6]


timer.calls = 0


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"], do_bench=timer)
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


x = torch.arange(100, dtype=torch.float32)
out = torch.empty_like(x)
copy_kernel[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, out, 100)
assert torch.equal(out, x)
