"""A training-style program that knows nothing of autotune_guard: each step runs two autotuned
kernels and ends with ``dist.barrier()``.  Usage: ``torchrun ... verify_train.py [STEPS]``."""

import sys

import torch
import torch.distributed as dist

from kernels import demo


def say(line):
    # One write with its newline: the ranks share torchrun's stdout, and print() may write the
    # text and the newline separately, so that two ranks' lines interleave.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    dist.init_process_group("gloo")
    x = torch.arange(300, dtype=torch.float32)
    for _ in range(steps):
        y = demo.scale(demo.add(x, x), 0.5)
        assert torch.equal(y, x)
        dist.barrier()
    say(f"DONE rank {dist.get_rank()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
