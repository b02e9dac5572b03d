"""Two torchrun ranks that choose, say "ready" (a file per rank under argv[1]), then block in
native code for good: rank 1 in a c10d Store wait for a key nobody sets, rank 0 in a barrier that
waits for rank 1.  No Python handler can run in either until the call returns."""

import datetime
import os
import sys

import torch
import torch.distributed as dist

from kernels import demo

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
x = torch.arange(100 + rank, dtype=torch.float32)
demo.add(x, x)
dist.barrier()
with open(os.path.join(sys.argv[1], f"ready{rank}"), "w") as out:
    out.write(str(os.getpid()))
if rank == 1:
    store = dist.distributed_c10d._get_default_store()
    store.wait(["never set"], datetime.timedelta(seconds=600))
else:
    dist.barrier()
