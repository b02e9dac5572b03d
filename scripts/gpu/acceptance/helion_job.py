"""Helion kernels in a torchrun job: the acceptance run's ``helion`` phase (issue 46).

Two kernels, each called once per rank: an elementwise GELU with a ``configs=[...]`` list (Helion's
finite search) and a matmul with none (Helion's full search; ``HELION_AUTOTUNER`` and
``HELION_AUTOTUNE_EFFORT`` choose which and how long, the phase sets PatternSearch at quick effort).
Every rank prints one line, ``HELION {json}``: the searches Helion ran here (by class), the first
call's seconds, the hash of both outputs and the configs Helion ran.

    torchrun --nproc-per-node 4 scripts/gpu/acceptance/helion_job.py          # on a CUDA GPU
    HELION_JOB_CPU=1 TRITON_INTERPRET=1 torchrun ... helion_job.py            # the plumbing, on the CPU

``HELION_JOB_CPU=1``: small shapes on the CPU, and both kernels left to a wall-clock search
through Helion's ``autotuner_fn`` hook (Helion's own searches time on a GPU).
"""

import hashlib
import json
import os
import time

import helion
import helion.language as hl
import torch
import torch.distributed as dist
from helion.autotuner.base_search import BaseAutotuner

CPU = os.environ.get("HELION_JOB_CPU") == "1"
SEARCHES = []  # each search Helion ran in this process, by its class


class WallClockSearch(BaseAutotuner):
    """The CPU's stand-in for Helion's full search: Helion's default config with 2 block-size
    choices, each timed by the wall clock."""

    def __init__(self, bound_kernel, args, **kwargs):
        self.bound, self.args = bound_kernel, args

    def autotune(self, *, skip_cache: bool = False):
        base = dict(self.bound.config_spec.default_config())
        sizes = base["block_sizes"]
        candidates = [helion.Config(**{**base, "block_sizes": [s] * len(sizes)}) for s in (16, 32)]

        def cost(config):
            run = self.bound.compile_config(config)
            start = time.perf_counter()
            run(*self.args)
            return time.perf_counter() - start

        return min(candidates, key=cost)


def counted(cls):
    original = cls.autotune

    def autotune(self, *args, **kwargs):
        SEARCHES.append(type(self).__name__)
        return original(self, *args, **kwargs)

    cls.autotune = autotune


for searcher in (helion.autotuner.FiniteSearch, helion.autotuner.PatternSearch, WallClockSearch):
    counted(searcher)

GELU_CONFIGS = [helion.Config(block_sizes=[b], num_warps=w) for b in (512, 1024, 2048) for w in (4, 8)]
full_search = {"autotuner_fn": WallClockSearch} if CPU else {}


@helion.kernel(**(full_search or {"configs": GELU_CONFIGS}))
def gelu(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        values = x[tile].to(torch.float32)
        out[tile] = (values * torch.sigmoid(1.702 * values)).to(x.dtype)
    return out


@helion.kernel(**full_search)
def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    _k, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(x.dtype)
    return out


def main() -> None:
    if "RANK" in os.environ:
        # gloo: the ranks may share one GPU (NCCL refuses two ranks on one device)
        dist.init_process_group("gloo")
        if not CPU:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    device = "cpu" if CPU else "cuda"
    size, dtype = (64, torch.float32) if CPU else (4096, torch.float16)
    torch.manual_seed(0)
    x = torch.randn(size, size, device=device, dtype=dtype)
    y = torch.randn(size, size, device=device, dtype=dtype)
    start = time.perf_counter()
    flat = x.reshape(-1)
    outputs = [gelu(flat), matmul(x, y)]
    if not CPU:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    digest = hashlib.sha256(b"".join(o.float().cpu().numpy().tobytes() for o in outputs)).hexdigest()[:16]
    bound = {name: kernel.bind(args) for name, kernel, args in (("gelu", gelu, (flat,)), ("matmul", matmul, (x, y)))}
    configs = {name: str(b._config) for name, b in bound.items()}
    # a kernel Helion counts as distributed is searched by every rank together (torch 2.11: all of them)
    collective = sorted(name for name, b in bound.items() if b.env.process_group_name is not None)
    print("HELION " + json.dumps({"rank": int(os.environ.get("RANK", "0")), "searches": SEARCHES,
                                  "first_s": round(seconds, 3), "hash": digest, "configs": configs,
                                  "collective": collective}), flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
