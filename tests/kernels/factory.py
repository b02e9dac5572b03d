"""A kernel factory: one ``module.function`` name, several different autotuned kernels.

``make_scaled(blocks)`` returns a new autotuned kernel of the same source each call; kernels made
with different ``blocks`` have different candidate lists (what libraries that build kernels per
dtype or per feature flag do).  Timers are random, as in ``kernels.demo``.
"""

import triton
import triton.language as tl

from kernels.demo import random_timer


def make_scaled(blocks):
    @triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in blocks], key=["n"], do_bench=random_timer)
    @triton.jit
    def scaled(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

    return scaled


def launch(kernel, n=1000):
    import torch

    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    assert torch.equal(out, x * 2)
    return out
