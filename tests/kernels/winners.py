"""A real Triton kernel with a timer of known true costs and noise (run under TRITON_INTERPRET=1).

The kernel writes its ``BLOCK`` into ``tag``; the timer runs the launch it is given, reads which
config ran, and answers that config's true cost times a lognormal noise of ``NOISE`` a call (as
a GPU's timings of one config vary from call to call), and by ``BIAS`` (how a cold process's speed
for one config moves from one process to the next). ``COSTS``: two candidates 0.3 % apart, one
2 % behind them declared first (a tie to the first declared would pick it), three far behind.
"""

import math
import random

import triton
import triton.language as tl

COSTS = {16: 1.020, 32: 1.000, 64: 1.003, 128: 1.100, 256: 1.300, 512: 1.600}
NEW_COST = {8: 1.500}  # a candidate added later: far behind, so it joins no finalists
NOISE = 0.01
BIAS = {}  # BLOCK -> a factor this "process" times it slower by (a cold run's own draw; pooling's tests)
CALLS = []  # the BLOCK of every timed launch, in order
RANDOM = random.Random(0)


def timer(kernel_call, quantiles):
    kernel_call()
    block = int(TAG[0])
    CALLS.append(block)
    t = {**COSTS, **NEW_COST}[block] * BIAS.get(block, 1.0) * math.exp(RANDOM.gauss(0, NOISE))
    return [t, t * 0.99, t * 1.01]


TAG = None  # the tag tensor of the launch being timed (set by ``launch``)


@triton.jit
def tagged_kernel(x_ptr, out_ptr, tag_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)
    tl.store(tag_ptr, BLOCK)


def make(blocks):
    """An autotuner over ``blocks`` (in that declaration order), timed by ``timer``."""
    return triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=1) for b in blocks], key=["n"],
                           do_bench=timer)(tagged_kernel)


def launch(kernel, n=1000):
    import torch

    global TAG
    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    TAG = torch.zeros(1, dtype=torch.int32)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, TAG, n)
    return out
