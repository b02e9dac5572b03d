"""A kernel whose timer favours a different config on each rank, as noisy GPU timings can: rank 0
measures BLOCK 32 a little ahead of BLOCK 256, every other rank BLOCK 256 far ahead of BLOCK 32.
With 2 ranks the vote ties, and the recorded timings say BLOCK 256 is the faster across ranks."""

import os

import triton
import triton.language as tl

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=1) for b in (32, 64, 256)]
_TIMES = {0: {32: 1.0, 64: 3.0, 256: 1.1}, 1: {32: 9.0, 64: 3.0, 256: 1.0}}


def _timer_of(block):
    def timer(kernel_call, quantiles):
        kernel_call()
        t = _TIMES[min(int(os.environ.get("RANK", "0")), 1)][block]
        return [t, t * 0.9, t * 1.1]
    return timer


class _Bench:
    """Triton calls ``do_bench(kernel_call, quantiles=...)`` once per config, in the configs' order."""

    def __init__(self):
        self.calls = 0

    def __call__(self, kernel_call, quantiles):
        block = CONFIGS[self.calls % len(CONFIGS)].kwargs["BLOCK"]
        self.calls += 1
        return _timer_of(block)(kernel_call, quantiles)


@triton.autotune(configs=CONFIGS, key=["n"], do_bench=_Bench())
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def copy(x):
    import torch

    out = torch.empty_like(x)
    n = x.numel()
    copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out
