"""A 2-rank gloo job that meets three keys no table holds under AUTOTUNE_ON_MISS=error: the
program catches the first refusal (add_kernel at n=100) and goes on to n=200, whose refusal it
catches too, then scale_kernel's refusal is uncaught and ends the rank."""

import torch
import torch.distributed as dist

import autotune_guard
from kernels import demo

dist.init_process_group("gloo")
x = torch.randn(400)
for n in (100, 200):
    try:
        demo.add(x[:n], x[:n])
    except autotune_guard.GuardError:
        pass  # the program's own fallback: torch's add
dist.barrier()
demo.scale(x[:100], 2.0)
