"""The public verification API on 2 ranks, under AUTOTUNE_CHAOS=1 (every rank runs a different
candidate).  Prints one ``RESULT {json}`` line per rank."""

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed import barrier as early_barrier  # an alias taken at import

import autotune_guard
import torch.distributed.distributed_c10d as c10d
from kernels import demo


def say(line):
    # One write with its newline: the ranks share torchrun's stdout, and print() may write the
    # text and the newline separately, so that two ranks' lines interleave.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    results = {
        # No process group yet: nothing to compare, and no check runs.
        "no_group_verify": autotune_guard.verify_choices(),
        "no_group_maybe": autotune_guard.maybe_verify_choices(0),
    }
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.arange(64, dtype=torch.float32)
    if rank == 0:
        demo.add(x, x)
    results["only_rank0_ran_it"] = autotune_guard.verify_choices()
    if rank == 1:  # the same kernel and key, reached one check later, with another config
        demo.add(x, x)
    results["rank1_later"] = autotune_guard.verify_choices()
    results["nothing_new"] = autotune_guard.verify_choices()
    results["maybe_not_due"] = autotune_guard.maybe_verify_choices(1)
    results["maybe_due"] = autotune_guard.maybe_verify_choices(3)
    results["wrapped"] = [getattr(f, "_self_wrapper", None) is not None
                          for f in (dist.barrier, c10d.barrier, early_barrier, dist.monitored_barrier)]
    results["rank"] = rank
    say("RESULT " + json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
