"""A GPU kernel whose output says which config ran: each program writes its BLOCK, so a compiled
call under dynamic shapes shows the launcher the guard chose for that call's key."""

import triton
import triton.language as tl

CONFIGS = [triton.Config({"BLOCK": block}, num_warps=4) for block in (128, 256, 512, 1024)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def block_of(out_ptr, n, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.program_id(0), BLOCK + n * 0)


def blocks(x):
    import torch

    out = torch.empty(4, device=x.device, dtype=torch.int32)
    block_of[(4,)](out, x.shape[0])
    return out
