"""A program that synchronizes with collectives only and knows nothing of autotune_guard: each
step runs an autotuned kernel and an all_reduce; ``BARRIERS`` barriers at the end (default 0).
Usage: ``torchrun ... allreduce_only.py [STEPS] [BARRIERS]``."""

import sys

import torch
import torch.distributed as dist

from kernels import demo


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    barriers = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    dist.init_process_group("gloo")
    x = torch.arange(300, dtype=torch.float32)
    for _ in range(steps):
        total = demo.add(x, x)
        dist.all_reduce(total)
    for _ in range(barriers):
        dist.barrier()
    sys.stdout.write(f"DONE rank {dist.get_rank()}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
