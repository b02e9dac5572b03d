"""A torchrun program whose rank 1 fails after choosing while rank 0 waits: torchrun then sends
SIGTERM to rank 0, which must leave its choices on disk."""

import os
import time

import torch

from kernels import demo

rank = int(os.environ["RANK"])
x = torch.arange(100 + rank, dtype=torch.float32)
demo.add(x, x)
time.sleep(1.0)
if rank == 1:
    raise SystemExit("rank 1 fails on purpose")
time.sleep(300)
