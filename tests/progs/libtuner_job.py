"""A job over the FlagGems-shaped LibTuner (kernels.libtuner), one process or one torchrun rank.

usage: libtuner_job.py [OUT_DIR]

Launches ``triple`` for n = 100, 300, 1000 and 100 again (library keys 128, 320, 1024 through its
``align32`` strategy) and prints one JSON line: the choice log, the timer calls, a hash of the
outputs. Under torchrun (gloo) each rank also writes OUT_DIR/rank<N>.json.
"""

import hashlib
import json
import os
import sys

import torch

from kernels import libtuner

if "RANK" in os.environ:
    import torch.distributed as dist

    dist.init_process_group("gloo")

import autotune_guard
from autotune_guard.adapters.triton import strategy_of

outputs = [libtuner.triple(torch.arange(n, dtype=torch.float32)) for n in (100, 300, 1000, 100)]
assert all(out.equal(torch.arange(out.numel(), dtype=torch.float32) * 3) for out in outputs)
digest = hashlib.sha256(b"".join(out.numpy().tobytes() for out in outputs)).hexdigest()[:16]
strategy = strategy_of(libtuner.triple_kernel)
result = {"choices": autotune_guard.choice_log(), "timer_calls": len(libtuner.TIMER_CALLS), "hash": digest,
          "strategy": strategy, "ungoverned": dict(autotune_guard.ungoverned())}
if "RANK" in os.environ:
    with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
print(json.dumps(result))
