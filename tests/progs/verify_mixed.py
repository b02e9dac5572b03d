"""A program that knows nothing of autotune_guard, whose ranks differ in when (or whether) they
import Triton, under torchrun with AUTOTUNE_VERIFY_EVERY set.  After every barrier the program runs
collectives of its own (an int64 ``all_reduce`` and an ``all_gather``) and checks their values: a
guard check paired with them would change them, or hang.

usage: verify_mixed.py SCENARIO STEPS
* no_triton: rank 1 never imports Triton (a pipeline stage without Triton kernels);
* late: rank 1 imports Triton and runs the kernels from step 2 on;
* install_one: rank 0 alone calls ``autotune_guard.install`` at step 2, with a cadence of 1
  (which must not change the start-up cadence, nor restart its barrier count).
"""

import sys

import torch
import torch.distributed as dist


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    scenario, steps = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    demo = None
    x = torch.arange(300, dtype=torch.float32)
    for step in range(steps):
        if demo is None and (rank != 1 or (scenario == "late" and step >= 2) or scenario == "install_one"):
            from kernels import demo as imported

            demo = imported
        if scenario == "install_one" and rank == 0 and step == 2:
            import autotune_guard

            autotune_guard.install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_VERIFY_EVERY": 1})
        if demo is not None:
            assert torch.equal(demo.scale(demo.add(x, x), 0.5), x)
        dist.barrier()
        total = torch.tensor([1000 * (rank + 1)], dtype=torch.int64)
        dist.all_reduce(total)
        gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(gathered, torch.tensor([rank, step], dtype=torch.int64))
        expected = 1000 * world * (world + 1) // 2
        if int(total.item()) != expected or [g.tolist() for g in gathered] != [[r, step] for r in range(world)]:
            say(f"WRONG rank {rank} step {step}: all_reduce {int(total.item())}, all_gather {[g.tolist() for g in gathered]}")
            sys.exit(1)
    say(f"DONE rank {rank} triton {'triton' in sys.modules}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
