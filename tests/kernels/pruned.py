"""A real autotuned kernel whose own ``early_config_prune`` can leave no candidate (for shapes it
refuses), as a library's pruning rule may for a shape its author never met."""

import triton
import triton.language as tl

from kernels.demo import random_timer

PRUNE_CALLS = []


def refuse_large(configs, named_args, **kwargs):
    """Keeps every candidate for ``n < 1000`` and none above: the kernel's own rule."""
    PRUNE_CALLS.append(named_args["n"])
    return list(configs) if named_args["n"] < 1000 else []


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"],
                 prune_configs_by={"early_config_prune": refuse_large}, do_bench=random_timer)
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
