"""Two ranks started by ``torch.multiprocessing.spawn`` (no RANK variable): each initializes a
gloo group, chooses, starts a spawned worker that chooses too (a data-loader worker, say: no RANK,
no group), destroys the group and exits.  Usage: evidence_spawn_ranks.py INIT_FILE"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernels import demo


def worker(size):
    x = torch.arange(size, dtype=torch.float32)
    demo.add(x, x)


def rank_main(rank, init_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=2)
    x = torch.arange(100 + rank, dtype=torch.float32)
    demo.add(x, x)
    helper = mp.get_context("spawn").Process(target=worker, args=(500 + rank,))
    helper.start()
    helper.join()
    assert helper.exitcode == 0
    dist.barrier()
    dist.destroy_process_group()  # before exit: the rank must still be the group's


if __name__ == "__main__":
    assert "RANK" not in os.environ
    mp.spawn(rank_main, args=(sys.argv[1],), nprocs=2)
