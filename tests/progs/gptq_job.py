"""A job over the GPTQ-style ``custom_autotune`` (kernels.gptq_autotune), one process or one torchrun rank.

usage: gptq_job.py [OUT_DIR]

Multiplies (M x 32) @ (32 x 32) for M = 32, 30, 64 (the tuner's keys 32,32,32 and 64,32,32: 30
rounds to 32 through its nearest_power_of_two), in an order rotated by rank, then all again (the
steady state); checks each product and prints one JSON line: the choice log, the timer calls (all,
and each launch's own), the config the tuner keeps per key, what was not governed. Under torchrun
(gloo) each rank also writes OUT_DIR/rank<N>.json. GPTQ_VERSION=another launches the kernel with
one candidate more (another version of it, for a table recorded against the first).
"""

import json
import os
import sys

import torch

import kernels.gptq_autotune as gptq

RANK = int(os.environ.get("RANK", "0"))
if "RANK" in os.environ:
    import torch.distributed as dist

    dist.init_process_group("gloo")

import autotune_guard  # noqa: E402
from autotune_guard.core.model import descriptor, signature  # noqa: E402

tuner = gptq.another_version() if os.environ.get("GPTQ_VERSION") == "another" else gptq.matmul_kernel
sizes = [32, 30, 64]
sizes = sizes[RANK % 3:] + sizes[:RANK % 3]
launches = []
torch.manual_seed(0)
for m in sizes + sizes:
    a, b = torch.rand(m, 32), torch.rand(32, 32)
    before = len(gptq.TIMER_CALLS)
    assert torch.allclose(gptq.matmul(a, b, tuner), a @ b, atol=1e-4), m
    launches.append([m, len(gptq.TIMER_CALLS) - before])
result = {"rank": RANK, "choices": autotune_guard.choice_log(), "timer_calls": len(gptq.TIMER_CALLS),
          "launches": launches, "ungoverned": dict(autotune_guard.ungoverned()),
          "cached": {",".join(map(str, key)): signature(descriptor(c)) for key, c in tuner.cache.items()}}
if "RANK" in os.environ:
    with open(os.path.join(sys.argv[1], f"rank{RANK}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
print(json.dumps(result))
