"""Under ``torchrun --max-restarts 1``: the first attempt chooses keys of its own (n = 100 + rank),
then rank 1 fails (the marker file argv[1] is absent: it creates it); the second attempt chooses
n = 300 + rank and exits normally."""

import os
import sys
import time

import torch

from kernels import demo

rank = int(os.environ["RANK"])
first = not os.path.exists(sys.argv[1])
x = torch.arange((100 if first else 300) + rank, dtype=torch.float32)
demo.add(x, x)
time.sleep(1.0)  # the background writer's copy
if first and rank == 1:
    with open(sys.argv[1], "w") as marker:
        marker.write(os.environ.get("TORCHELASTIC_RESTART_COUNT", "?"))
    raise RuntimeError("the first attempt fails on purpose")
if first:
    time.sleep(300)  # rank 0 waits, to be stopped by torchrun
