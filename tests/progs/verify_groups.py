"""Pipeline-style coverage on 4 ranks, knowing nothing of autotune_guard: pairs {0,1} and {2,3}
with barriers of their own, uneven kernels (rank 3 runs none), every spelling of the barrier.

Barrier sequence on every rank (pair = its own pair group, world = default group):
  pair 1, world 1, pair 2, world 2, [rank 1 runs a new key], world 3 (monitored), world 4
so with AUTOTUNE_VERIFY_EVERY=2 counted per group there is one pair check and two world checks.
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from kernels import demo


def say(line):
    # One write with its newline: the ranks share torchrun's stdout, and print() may write the
    # text and the newline separately, so that two ranks' lines interleave.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    assert dist.get_world_size() == 4
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    pair = pairs[rank // 2]
    x = torch.arange(256, dtype=torch.float32)
    # Ranks 0 and 2 share a kernel and key but never a pair; rank 1 runs another kernel.
    if rank in (0, 2):
        demo.add(x, x)
    elif rank == 1:
        demo.scale(x, 2.0)
    dist.barrier(group=pair)
    dist.barrier()
    dist.barrier(pair)  # the group given positionally
    c10d.barrier()
    if rank == 1:  # a key only rank 1 ever runs, reached late
        demo.add(x[:100], x[:100])
    dist.monitored_barrier()
    torch.distributed.barrier()
    say(f"DONE rank {rank}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
