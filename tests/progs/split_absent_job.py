"""SPLIT_KEYS keys of split_job.py's kernel (8 candidates, SPLIT_CANDIDATE_S seconds each), one after
another; rank SPLIT_ABSENT_RANK never reaches them (a rank that runs other work), as a pipeline stage
would. For the split tuning's join window (tests/test_hostile_risks.py). It knows nothing of
autotune_guard.

usage: split_absent_job.py OUT_DIR   (torchrun ranks). Each rank writes OUT_DIR/rank<N>.json: when it
reached the first key and had the last result (``time.time()``), the configs its launches ran."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

from split_job import split_sum_kernel


def main():
    out_dir = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    reached, launched = time.time(), []
    if rank != int(os.environ.get("SPLIT_ABSENT_RANK", "-1")):
        for n in range(700, 700 + int(os.environ.get("SPLIT_KEYS", "4"))):
            x = torch.randn(4, n, generator=torch.Generator().manual_seed(7))
            split_sum_kernel[(4,)](x, torch.empty(4, dtype=torch.float32), n, N_POW2=1024)
            best = split_sum_kernel.best_config
            launched.append(f"{best.kwargs['BLOCK']}/{best.num_warps}")
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as file:
        json.dump({"rank": rank, "reached": reached, "done": time.time(), "launched": launched, "error": None}, file)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
