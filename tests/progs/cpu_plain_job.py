"""An ordinary program with two plain ``@triton.autotune`` kernels: no ``do_bench`` of their own,
nothing of autotune_guard. Each process prints one JSON line: its rank, the hash of its results
and how many candidate timings Triton's ``Autotuner._bench`` made in it (counted by wrapping it
here, as a probe; the kernels are untouched). Usage: ``torchrun ... cpu_plain_job.py``, or plain
``python cpu_plain_job.py`` for one process without torch.distributed."""

import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner

BENCH_CALLS = []
_bench = Autotuner._bench


def _counted_bench(self, *args, **kwargs):
    BENCH_CALLS.append(1)
    return _bench(self, *args, **kwargs)


Autotuner._bench = _counted_bench


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64, 128)], key=["n"])
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 256) for w in (1, 2)], key=["n"])
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    return out


def scale(x, factor):
    out = torch.empty_like(x)
    n = x.numel()
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, factor)
    return out


def main():
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    x = torch.arange(500, dtype=torch.float32)
    digest = hashlib.sha256()
    for n in (100, 500):
        digest.update(add(scale(x[:n], 0.5), x[:n]).numpy().tobytes())
        if distributed:
            dist.barrier()
    line = {"rank": dist.get_rank() if distributed else 0, "hash": digest.hexdigest()[:16],
            "bench_calls": len(BENCH_CALLS)}
    sys.stdout.write(json.dumps(line) + "\n")  # one write: the ranks share torchrun's stdout
    sys.stdout.flush()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
