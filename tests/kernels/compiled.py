"""A GPU kernel for the torch.compile tier: a float32 row sum whose ten candidates add in ten
different orders (BLOCK sets the chunking, num_warps the tree), so a different choice gives
different bits.  Decorated with plain ``@triton.autotune``: Triton's own timer on the GPU."""

import triton
import triton.language as tl

CONFIGS = [triton.Config({"BLOCK": block}, num_warps=warps) for block in (256, 512, 1024, 2048, 4096)
           for warps in (4, 8)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def row_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def rowsum(x):
    """What a user's model calls: eager or under torch.compile alike."""
    import torch

    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    row_sum[(x.shape[0],)](x, out, x.shape[1])
    return out
