"""Helion kernels for the Helion family's tests (``tests/test_helion_family.py``), run by Triton's
interpreter on the CPU: ``listed`` has a configs=[...] list (Helion's finite search), ``searched``
none (its full search), ``wall_clock`` a full search the CPU can run (``WallClockSearch``),
``collective`` one that searches across ranks, as Helion's own do for a kernel it counts as
distributed (``CollectiveSearch``). Run as a program, it calls the kernel named by argv[1] once and
prints what the guard chose, the config Helion set, how often Helion searched, and whether the
output is right."""

import json
import os
import sys

import helion
import helion.language as hl
import torch

from helion.autotuner.base_search import BaseAutotuner

CONFIGS = [helion.Config(block_sizes=[16]), helion.Config(block_sizes=[64]), helion.Config(block_sizes=[32])]
SEARCHES = []  # each search Helion ran in this process, by its class


class WallClockSearch(BaseAutotuner):
    """A full search the CPU can run, through Helion's own ``autotuner_fn`` hook: Helion's default
    config with block sizes 16 to 128, each timed by the wall clock over a few calls (Helion's own
    searches time with a GPU benchmark)."""

    def __init__(self, bound_kernel, args, **kwargs):
        self.bound, self.args = bound_kernel, args

    def autotune(self, *, skip_cache: bool = False):
        SEARCHES.append(type(self).__name__)
        candidates = self.candidates()
        return min(candidates, key=self.cost)

    def candidates(self) -> list:
        base = dict(self.bound.config_spec.default_config())
        return [helion.Config(**{**base, "block_sizes": [size]}) for size in (16, 32, 64, 128)]

    def cost(self, config) -> float:
        import time

        run = self.bound.compile_config(config)
        run(*self.args)
        start = time.perf_counter()
        for _ in range(3):
            run(*self.args)
        return time.perf_counter() - start


class CollectiveSearch(WallClockSearch):
    """A full search across ranks, as Helion's own are for a kernel it counts as distributed: every
    rank times, rank 0's timings decide on every rank (Helion's ``sync_object``), so a rank alone
    waits for the others inside the search."""

    def autotune(self, *, skip_cache: bool = False):
        from helion._dist_utils import sync_object

        SEARCHES.append(type(self).__name__)
        candidates = self.candidates()
        costs = sync_object([self.cost(config) for config in candidates],
                            process_group_name=self.bound.env.process_group_name)
        return candidates[costs.index(min(costs))]


def as_torch_2_11():
    """Helion as it runs under torch 2.11 on a GPU, here on the CPU: torch 2.11 has no
    ``is_symm_mem_tensor``, so Helion counts every kernel in a process with a process group as
    distributed and searches it across the ranks; the interpreter's CPU gets an SM count for the
    persistent programs Helion then generates."""
    import helion.runtime
    import torch.distributed._symmetric_memory as symm_mem

    del symm_mem.is_symm_mem_tensor
    num_sm = helion.runtime.get_num_sm
    helion.runtime.get_num_sm = lambda device, **kw: 4 if torch.device(device).type == "cpu" else num_sm(device, **kw)


@helion.kernel(configs=CONFIGS)
def listed(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + y[tile]
    return out


@helion.kernel()
def searched(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * y[tile]
    return out


@helion.kernel(autotuner_fn=CollectiveSearch)
def collective(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] / (y[tile] * y[tile] + 1)
    return out


@helion.kernel(autotuner_fn=WallClockSearch)
def wall_clock(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] - y[tile]
    return out


def main(name: str) -> None:
    searches = SEARCHES
    search = helion.autotuner.FiniteSearch.autotune
    full = helion.autotuner.LFBOTreeSearch.autotune

    def counted(original):
        def autotune(self, *args, **kwargs):
            searches.append(type(self).__name__)
            return original(self, *args, **kwargs)
        return autotune

    helion.autotuner.FiniteSearch.autotune = counted(search)
    helion.autotuner.LFBOTreeSearch.autotune = counted(full)
    kernel = {"listed": listed, "searched": searched, "wall_clock": wall_clock, "collective": collective}[name]
    device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    x, y = torch.randn(1000, device=device), torch.randn(1000, device=device)
    out = kernel(x, y)
    expected = {"listed": x + y, "searched": x * y, "wall_clock": x - y, "collective": x / (y * y + 1)}[name]
    import autotune_guard

    bound = kernel.bind((x, y))
    line = json.dumps({"right": bool(torch.allclose(out, expected)), "log": autotune_guard.choice_log(),
                       "config": dict(bound._config), "searches": searches,
                       "collective": bound.env.process_group_name is not None})
    results = os.environ.get("HELION_KERNELS_RESULTS")  # a folder: one file a rank (torchrun mixes their stdout)
    if results:
        with open(os.path.join(results, f"rank{os.environ.get('RANK', '0')}.json"), "w") as out_file:
            out_file.write(line)
    print(line)


if __name__ == "__main__":
    if os.environ.get("HELION_KERNELS_AS_TORCH_2_11") == "1":
        as_torch_2_11()
    if "RANK" in os.environ:  # a torchrun job (the GPU tier): the guard's consensus needs the group
        import torch.distributed as dist

        dist.init_process_group("gloo")  # the ranks may share one GPU, which NCCL refuses
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    main(sys.argv[1])
