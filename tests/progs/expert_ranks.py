"""A training-style program whose ranks meet different keys, as expert-parallel ranks do: every
rank runs the shared sizes, and each rank one size of its own, first on odd steps only for odd
ranks (ranks reach keys late and in other orders). It knows nothing of autotune_guard.

usage: expert_ranks.py OUT_DIR [STEPS]: each rank writes OUT_DIR/rank<N>.json with what it ran,
its timer calls and its result hash over the shared sizes.
"""

import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from kernels import demo

SHARED = (300, 700)


def main():
    out_dir, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    own = 1000 + 100 * rank  # this rank's expert size: no other rank meets it
    results = {}
    for step in range(steps):
        sizes = (own, *SHARED) if rank % 2 == 0 else (*reversed(SHARED), own)
        if rank % 2 and step == 0:
            sizes = tuple(reversed(SHARED))  # odd ranks meet their own key a step later
            time.sleep(0.5)
        for n in sizes:
            x = torch.arange(n, dtype=torch.float32)
            y = demo.scale(demo.add(x, x), 0.5)
            assert torch.equal(y, x)
            if n in SHARED:
                results[n] = y.numpy().tobytes()
        dist.barrier()
    digest = hashlib.sha256(b"".join(results[n] for n in SHARED))
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"own": own, "timer_calls": len(demo.TIMER_CALLS), "hash": digest.hexdigest()[:12]}, f)
    sys.stdout.write(f"DONE rank {rank}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
