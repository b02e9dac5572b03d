"""A 2-rank job for the verifier's later checks (issue 58, item 4). Usage: ``torchrun ...
evidence_words_verify.py TABLES_1``: rank 1 pins from the table directory TABLES_1 (installed
here), rank 0 from AUTOTUNE_TABLE_PATH. The tables differ on add_kernel only: step 1's add makes
barrier 1's check report a disagreement; step 2's scale is chosen alike, so barrier 2 checks a key
that agrees while barrier 1's disagreement stands."""

import sys

import torch
import torch.distributed as dist

import autotune_guard
from kernels import demo


def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        autotune_guard.install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": sys.argv[1]})
    x = torch.arange(300, dtype=torch.float32)
    assert torch.equal(demo.add(x, x), x + x)
    dist.barrier()
    assert torch.equal(demo.scale(x, 2.0), x * 2)
    dist.barrier()
    sys.stdout.write(f"DONE rank {dist.get_rank()}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
