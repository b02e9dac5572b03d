"""Autotuners that are not Triton's, as libraries write them (run under TRITON_INTERPRET=1).

* ``GptqAutotuner``: a ``triton.KernelInterface`` of its own, modelled on GPTQ-triton's
  ``custom_autotune.Autotuner`` (copied into AutoGPTQ and many model repositories): it times each
  config with ``triton.testing.do_bench`` (or the ``timer`` given) and keeps the fastest per key.
* ``ForkedAutotuner``: a fork of Triton's ``Autotuner`` class body (as triton-dejavu's is), also
  built on ``KernelInterface`` and not a subclass of Triton's class.
* ``tune_by_hand``: no class at all, a loop over candidates around ``triton.testing.do_bench``.
"""

import builtins

import triton
import triton.language as tl

from kernels.demo import random_timer

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=1) for b in (16, 32, 64)]


class GptqAutotuner(triton.KernelInterface):
    def __init__(self, fn, arg_names, configs, key, timer=None):
        self.fn, self.arg_names, self.configs = fn, arg_names, configs
        self.key_idx = [arg_names.index(k) for k in key]
        self.cache = {}
        self.timer = timer

    def _bench(self, *args, config, **meta):
        def kernel_call():
            self.fn.run(*args, num_warps=config.num_warps, num_stages=config.num_stages, **meta, **config.kwargs)

        timer = self.timer or triton.testing.do_bench
        return timer(kernel_call, quantiles=(0.5, 0.2, 0.8))

    def run(self, *args, **kwargs):
        if len(self.configs) > 1:
            key = tuple(args[i] for i in self.key_idx)
            if key not in self.cache:
                timings = {config: self._bench(*args, config=config, **kwargs)[0] for config in self.configs}
                self.cache[key] = builtins.min(timings, key=timings.get)
            config = self.cache[key]
        else:
            config = self.configs[0]
        return self.fn.run(*args, num_warps=config.num_warps, num_stages=config.num_stages, **kwargs, **config.kwargs)


class ForkedAutotuner(triton.KernelInterface):
    """Triton's Autotuner, forked: the same fields, its own run (timing with the timer given)."""

    def __init__(self, fn, arg_names, configs, key, do_bench):
        self.fn, self.arg_names, self.configs, self.keys = fn, arg_names, configs, key
        self.cache, self.do_bench = {}, do_bench

    def run(self, *args, **kwargs):
        named = dict(zip(self.arg_names, args))
        key = tuple(named[k] for k in self.keys)
        if key not in self.cache:
            def call(config):
                return lambda: self.fn.run(*args, **kwargs, **config.all_kwargs())

            timings = {config: self.do_bench(call(config), quantiles=(0.5, 0.2, 0.8))[0] for config in self.configs}
            self.cache[key] = builtins.min(timings, key=timings.get)
        return self.fn.run(*args, **kwargs, **self.cache[key].all_kwargs())


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@triton.jit
def triple_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3, mask=mask)


def gptq(timer=None):
    return GptqAutotuner(double_kernel, double_kernel.arg_names, CONFIGS, ["n"], timer=timer)


def forked():
    return ForkedAutotuner(triple_kernel, triple_kernel.arg_names, CONFIGS, ["n"], do_bench=random_timer)


def launch(tuner, n=100, device="cpu"):
    import torch

    x = torch.arange(n, dtype=torch.float32, device=device)
    out = torch.empty_like(x)
    tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


def tune_by_hand(n=100, device="cpu"):
    """Time each candidate of ``double_kernel`` with Triton's timer and launch the fastest."""
    import torch

    x = torch.arange(n, dtype=torch.float32, device=device)
    out = torch.empty_like(x)
    candidates = list(CONFIGS)
    times = []
    for config in candidates:
        grid = (triton.cdiv(n, config.kwargs["BLOCK"]),)
        times.append(triton.testing.do_bench(lambda: double_kernel[grid](x, out, n, **config.kwargs)))
    return candidates[times.index(min(times))]
