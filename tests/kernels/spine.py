"""Kernels for the spine tests (activation, pinned selection), run under TRITON_INTERPRET=1.

* ``copy_kernel``: no timer of its own (under the interpreter only a pinned launch can run it),
  candidates declared out of size order so ``first`` and ``min_cost`` pick differently.  Triton
  3.3 resolves its default timer when the autotuner is built, so on 3.3 this module imports only
  once autotune_guard is installed (an AUTOTUNE_* variable, or ``install()`` before the import).
* ``make_hooked()``: a new autotuner over ``hooked_body`` each call (tests that need one no other
  test has launched).  Its own ``early_config_prune`` keeps only BLOCK >= 64 for n >= 1000, so a
  pinned choice that ignored the kernel's pruning would show; every Config has a ``pre_hook``
  that notes (BLOCK, n, thread) in ``HOOK_CALLS`` and raises while ``FAIL`` is non-empty.
* ``single_kernel``: one config (never "multi-config", never timed).
"""

import threading
import time

import triton
import triton.language as tl

TIMER_CALLS = []
PRUNE_CALLS = []
HOOK_CALLS = []
FAIL = []  # non-empty: every pre_hook raises (a launch that fails inside Triton's run)
PRUNE_SLEEP_S = [0.0]  # widen the window in which another thread could interleave


def counting_timer(kernel_call, quantiles):
    kernel_call()
    TIMER_CALLS.append(1)
    return [1.0, 1.0, 1.0]


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 16, 32)], key=["n"])
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def hooked_body(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def _note(block):
    def pre_hook(nargs):
        if FAIL:
            raise RuntimeError("pre_hook refused the launch (spine.FAIL is set)")
        HOOK_CALLS.append((block, nargs["n"], threading.get_ident()))

    return pre_hook


def prune(configs, nargs, **kwargs):
    n = nargs["n"]
    PRUNE_CALLS.append(n)
    if PRUNE_SLEEP_S[0]:
        time.sleep(PRUNE_SLEEP_S[0])
    if n >= 1000:
        return [c for c in configs if c.kwargs["BLOCK"] >= 64]
    return list(configs)


def make_hooked():
    """A fresh autotuner: declared 128, 16, 64, 32 (first: 128; min_cost: 16, or 64 for n >= 1000)."""
    configs = [triton.Config({"BLOCK": b}, pre_hook=_note(b)) for b in (128, 16, 64, 32)]
    return triton.autotune(configs=configs, key=["n"], prune_configs_by={"early_config_prune": prune},
                           do_bench=counting_timer)(hooked_body)


hooked_kernel = make_hooked()


@triton.autotune(configs=[triton.Config({"BLOCK": 32})], key=["n"], do_bench=counting_timer)
@triton.jit
def single_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def launch(kernel, x, n=None):
    """Run one of these kernels over ``x``; returns the output tensor."""
    import torch

    out = torch.empty_like(x)
    n = x.numel() if n is None else n
    kernel[lambda meta: (triton.cdiv(max(n, 1), meta["BLOCK"]),)](x, out, n)
    return out
