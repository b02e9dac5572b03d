"""Kernels for the tests of Triton's seams and of Autotuner subclasses (TRITON_INTERPRET=1).

* ``double_body``: out = 2 * x; the autotuners over it are built per test (``make``), so no other
  test has launched them.  Each Config's ``pre_hook`` notes ``(BLOCK, n, thread)`` in ``RAN``
  and, while ``HOLD`` holds an Event, waits for it (a launch kept in flight on purpose).
* ``CachedAutotuner``: modelled on fla's (``fla.ops.utils.cache``): with ``LIBRARY_CONFIG`` set
  it puts that config into Triton's ``cache`` for the call's key, then calls Triton's ``run``.
* ``OwnRunTuner``: modelled on FlagGems' ``LibTuner``: overrides ``run`` and never calls
  Triton's; it launches its first config itself.
"""

import random
import threading

import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner

RAN = []
HOLD = []  # [Event]: pre_hooks wait for it
TIMER_CALLS = []
LIBRARY_CONFIG = []  # [Config]: what CachedAutotuner puts into the cache


@triton.jit
def double_body(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def random_timer(kernel_call, quantiles):
    kernel_call()
    TIMER_CALLS.append(1)
    t = random.random()
    return [t, t * 0.9, t * 1.1]


def _note(block):
    def pre_hook(nargs):
        if HOLD:
            HOLD[0].wait(10)
        RAN.append((block, nargs["n"], threading.get_ident()))

    return pre_hook


def prune_small_blocks_for_large_n(configs, nargs, **kwargs):
    """The kernel's own pruning: BLOCK >= 64 only, for n >= 1000."""
    if nargs["n"] >= 1000:
        return [c for c in configs if c.kwargs["BLOCK"] >= 64]
    return list(configs)


def configs(blocks=(128, 16, 64, 32)):
    return [triton.Config({"BLOCK": b}, pre_hook=_note(b)) for b in blocks]


def make(fn=double_body, blocks=(128, 16, 64, 32), cls=None, **kwargs):
    """A fresh autotuner over ``fn`` (declared 128, 16, 64, 32 by default; min_cost: 16, or 64 for n >= 1000)."""
    kwargs.setdefault("prune_configs_by", {"early_config_prune": prune_small_blocks_for_large_n})
    kwargs.setdefault("do_bench", random_timer)
    if cls is None:
        return triton.autotune(configs=configs(blocks), key=["n"], **kwargs)(fn)
    return cls(fn, fn.arg_names, configs(blocks), ["n"], None, None, **kwargs)


def launch(kernel, x):
    import torch

    out = torch.empty_like(x)
    n = x.numel()
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


class CachedAutotuner(Autotuner):
    """fla's pattern: a config of the library's own choosing goes into ``cache`` before Triton's run."""

    def run(self, *args, **kwargs):
        if LIBRARY_CONFIG:
            nargs = dict(zip(self.arg_names, args))
            key = tuple([nargs[k] for k in self.keys] + [str(v.dtype) for v in nargs.values() if hasattr(v, "dtype")])
            self.cache[key] = LIBRARY_CONFIG[0]
        return super().run(*args, **kwargs)


class OwnRunTuner(Autotuner):
    """FlagGems' pattern: ``run`` of its own that never reaches Triton's."""

    def run(self, *args, **kwargs):
        config = self.configs[0]
        self.best_config = config
        return self.fn.run(*args, **kwargs, **config.all_kwargs())
