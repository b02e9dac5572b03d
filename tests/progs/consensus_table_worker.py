"""One rank of a consensus-mode job that grows a table (run under torchrun, gloo, TRITON_INTERPRET=1).

usage: consensus_table_worker.py OUT_DIR ADD_SIZES [SCALE_SIZES]

ADD_SIZES and SCALE_SIZES are comma-separated sizes, each a tuning key of ``kernels.demo``'s
``add_kernel`` / ``scale_kernel`` (whose timers return random times, so ranks left to themselves
disagree). Every rank runs every size, in an order rotated by rank so that different ranks claim
different keys; then one add key of its own (size 7000 + rank), which no other rank ever runs.
Each rank writes OUT_DIR/rank<N>.json: its choice log, its timer calls, what it ran and the job's run id.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import kernels.demo as demo

RANK = int(os.environ["RANK"])


def sizes(text):
    return [int(n) for n in text.split(",") if n]


def main():
    out_dir, add_sizes = sys.argv[1], sizes(sys.argv[2])
    scale_sizes = sizes(sys.argv[3]) if len(sys.argv) > 3 else []
    dist.init_process_group("gloo")
    work = [("add", n) for n in add_sizes] + [("scale", n) for n in scale_sizes]
    shift = RANK % len(work) if work else 0
    work = work[shift:] + work[:shift] + [("add", 7000 + RANK)]
    for kernel, n in work + work:  # the second pass is the steady state
        x, y = torch.rand(n), torch.rand(n)
        if kernel == "add":
            assert torch.allclose(demo.add(x, y), x + y)
        else:
            assert torch.allclose(demo.scale(x, 3.0), x * 3.0)

    import autotune_guard

    result = {"rank": RANK, "choices": autotune_guard.choice_log(), "timer_calls": len(demo.TIMER_CALLS),
              "ran": work, "run_id": "torchelastic:" + os.environ["TORCHELASTIC_RUN_ID"]}
    with open(os.path.join(out_dir, f"rank{RANK}.json"), "w") as out:
        json.dump(result, out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
