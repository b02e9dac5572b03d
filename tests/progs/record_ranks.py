"""A torchrun program for the record -> merge -> pin tests: every rank launches the demo kernels
(two keys of add_kernel, one of scale_kernel) and writes what it saw to RESULT_DIR/result.rank<N>.json.

Usage: record_ranks.py RESULT_DIR
"""

import json
import os
import sys

import torch
import torch.distributed as dist

from kernels import demo

import autotune_guard


def main():
    result_dir = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.arange(100, dtype=torch.float32)
    y = torch.arange(300, dtype=torch.float32)
    for _ in range(2):  # the second round is steady state: cached, no new choice, no timing
        assert torch.equal(demo.add(x, x), x + x)
        assert torch.equal(demo.add(y, y), y + y)
        assert torch.equal(demo.scale(x, 3.0), x * 3.0)
    dist.barrier()
    result = {"rank": rank, "timer_calls": len(demo.TIMER_CALLS), "log": autotune_guard.choice_log(),
              "policy": autotune_guard.active_policy().mode}
    with open(os.path.join(result_dir, f"result.rank{rank}.json"), "w") as out:
        json.dump(result, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
