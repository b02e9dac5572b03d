"""One of two ranks of a consensus job started by hand (RANK, WORLD_SIZE, MASTER_*: no torchrun, so
no node Store: the job's TCPStore is read directly), whose Store a foreign process wrote to.

usage: consensus_foreign_name.py STORE_TIMEOUT_S

Rank 0 appends a name with no result to the attempt's ``announced`` list (as any process that
reaches the unauthenticated TCPStore can), then tunes every key; rank 1 starts late, so every
winner is published ahead of it and it reads the list. Each rank prints how long its kernels took.
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import kernels.demo as demo

RANK = int(os.environ["RANK"])


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(sys.argv[1])))
    from torch.distributed.distributed_c10d import _get_default_store

    if RANK == 0:
        _get_default_store().append("autotune_guard/none/0/announced", "forged|by another process\n")
    dist.barrier()
    if RANK == 1:
        time.sleep(3)  # rank 0 claims and tunes every key ahead of rank 1
    started = time.monotonic()
    for n in (1000, 2000, 3000, 4000, 5000, 6000):
        x, y = torch.rand(n), torch.rand(n)
        assert torch.allclose(demo.add(x, y), x + y)
    took = time.monotonic() - started
    import autotune_guard

    print(json.dumps({"rank": RANK, "took": took, "timer_calls": len(demo.TIMER_CALLS),
                      "choices": autotune_guard.choice_log()}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
