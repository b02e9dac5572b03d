"""A GPTQ-style ``custom_autotune`` and a small matmul it tunes, for TRITON_INTERPRET=1.

``CustomizedTritonAutoTuner`` follows AutoGPTQ's ``auto_gptq/nn_modules/triton_utils/custom_autotune.py``
(https://github.com/AutoGPTQ/AutoGPTQ, MIT licence, Copyright (c) 2023 潘其威(William); itself based
on https://github.com/fpgaminer/GPTQ-triton, and copied on into GPTQModel and many model
repositories), rewritten here for the tests with its behaviour kept: a ``triton.KernelInterface``
of its own, not Triton's ``Autotuner``; ``key_idx`` (key arguments by position), the key rounded by
``nearest_power_of_two``; a ``cache`` dict by key; ``prune_configs`` (``early_config_prune``, then
``perf_model``/``top_k``); ``_bench`` timing one config through ``triton.testing.do_bench`` with
``rep=40``; ``configs_timings``, ``best_config`` and ``bench_time`` kept as it keeps them.
``matmul248_kernel_config_pruner`` is its pruner (blocks shrunk to the problem, duplicates dropped):
it yields new Config objects, so the candidates the tuner times are not the declared ones.

One difference, the timer: on the CPU ``triton.testing.do_bench`` has no driver. ``timer`` calls it
(so the guard's sentinel on Triton's timer sees the call, as on a GPU) and, when it fails for lack of
a driver, times the call itself with ``time.perf_counter`` (real, noisy timings: two processes left
to themselves may pick different winners). ``TIMER_CALLS`` counts the timer's calls in this process.
"""

import builtins
import math
import time

import triton
import triton.language as tl

TIMER_CALLS = []


def timer(kernel_call, quantiles, rep):
    TIMER_CALLS.append(1)
    try:
        return triton.testing.do_bench(kernel_call, quantiles=quantiles, rep=rep)
    except RuntimeError:  # no GPU driver under the interpreter: time it here
        times = []
        for _ in range(3):
            start = time.perf_counter()
            kernel_call()
            times.append((time.perf_counter() - start) * 1e3)
        times.sort()
        return (times[1], times[0], times[2])


class CustomizedTritonAutoTuner(triton.KernelInterface):
    def __init__(self, fn, arg_names, configs, key, reset_to_zero, prune_configs_by=None, nearest_power_of_two=False):
        self.configs = configs or [triton.Config({}, num_warps=4, num_stages=2)]
        self.key_idx = [arg_names.index(k) for k in key]
        self.nearest_power_of_two = nearest_power_of_two
        self.cache = {}
        self.hook = lambda args: 0  # zeroes the reset_to_zero arguments before each relaunch
        if reset_to_zero is not None:
            self.reset_idx = [arg_names.index(k) for k in reset_to_zero]

            def _hook(args):
                for i in self.reset_idx:
                    args[i].zero_()

            self.hook = _hook
        self.arg_names = arg_names
        prune_configs_by = prune_configs_by or {}
        self.perf_model = prune_configs_by.get("perf_model")
        self.configs_top_k = prune_configs_by.get("top_k")
        self.early_config_prune = prune_configs_by.get("early_config_prune")
        self.fn = fn

    def _bench(self, *args, config, **meta):
        conflicts = meta.keys() & config.kwargs.keys()
        if conflicts:
            raise ValueError(f"Conflicting meta-parameters: {', '.join(conflicts)}."
                             " Make sure that you don't re-define auto-tuned symbols.")
        current = dict(meta, **config.kwargs)

        def kernel_call():
            if config.pre_hook:
                config.pre_hook(self.nargs)
            self.hook(args)
            self.fn.run(*args, num_warps=config.num_warps, num_stages=config.num_stages, **current)

        try:
            return timer(kernel_call, quantiles=(0.5, 0.2, 0.8), rep=40)
        except triton.OutOfResources:
            return (float("inf"), float("inf"), float("inf"))

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        if len(self.configs) > 1:
            key = tuple(args[i] for i in self.key_idx)
            if self.nearest_power_of_two:  # fewer keys to tune: each rounded to the nearest power of two
                key = tuple([2 ** int(math.log2(x) + 0.5) for x in key])
            if key not in self.cache:
                pruned_configs = self.prune_configs(kwargs)
                bench_start = time.time()
                timings = {config: self._bench(*args, config=config, **kwargs) for config in pruned_configs}
                self.bench_time = time.time() - bench_start
                self.cache[key] = builtins.min(timings, key=timings.get)
                self.hook(args)
                self.configs_timings = timings
            config = self.cache[key]
        else:
            config = self.configs[0]
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook(self.nargs)
        return self.fn.run(*args, num_warps=config.num_warps, num_stages=config.num_stages, **kwargs, **config.kwargs)

    def prune_configs(self, kwargs):
        pruned_configs = self.configs
        if self.early_config_prune:
            pruned_configs = self.early_config_prune(self.configs, self.nargs)
        if self.perf_model:
            top_k = self.configs_top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = int(len(self.configs) * top_k)
            if len(pruned_configs) > top_k:
                est_timing = {config: self.perf_model(**self.nargs, **kwargs, **config.kwargs,
                                                      num_stages=config.num_stages, num_warps=config.num_warps)
                              for config in pruned_configs}
                pruned_configs = sorted(est_timing.keys(), key=lambda x: est_timing[x])[:top_k]
        return pruned_configs

    def warmup(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        for config in self.prune_configs(kwargs):
            self.fn.warmup(*args, num_warps=config.num_warps, num_stages=config.num_stages, **kwargs, **config.kwargs)
        self.nargs = None


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, nearest_power_of_two=False):
    def decorator(fn):
        return CustomizedTritonAutoTuner(fn, fn.arg_names, configs, key, reset_to_zero, prune_configs_by,
                                         nearest_power_of_two)

    return decorator


def matmul248_kernel_config_pruner(configs, nargs):
    """Shrink each BLOCK_SIZE_* to its dimension (a power of two, at least 16); drop the duplicates."""
    m = max(2 ** int(math.ceil(math.log2(nargs["M"]))), 16)
    n = max(2 ** int(math.ceil(math.log2(nargs["N"]))), 16)
    k = max(2 ** int(math.ceil(math.log2(nargs["K"]))), 16)
    used = set()
    for config in configs:
        block_m = min(m, config.kwargs["BLOCK_SIZE_M"])
        block_n = min(n, config.kwargs["BLOCK_SIZE_N"])
        block_k = min(k, config.kwargs["BLOCK_SIZE_K"])
        group_m = config.kwargs["GROUP_SIZE_M"]
        seen = (block_m, block_n, block_k, group_m, config.num_stages, config.num_warps)
        if seen in used:
            continue
        used.add(seen)
        yield triton.Config({"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": block_n, "BLOCK_SIZE_K": block_k,
                             "GROUP_SIZE_M": group_m}, num_stages=config.num_stages, num_warps=config.num_warps)


def _config(m, n, k, group, stages, warps):
    return triton.Config({"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": group},
                         num_stages=stages, num_warps=warps)


# Five declared candidates; for 32x32x32 the pruner shrinks the 64-row one onto the 32-row one: four are timed.
CONFIGS = [_config(16, 16, 16, 1, 2, 1), _config(32, 16, 16, 2, 2, 1), _config(16, 32, 32, 1, 2, 2),
           _config(32, 32, 16, 1, 3, 2), _config(64, 32, 16, 1, 3, 2)]
PRUNE = {"early_config_prune": matmul248_kernel_config_pruner, "perf_model": None, "top_k": None}


@autotune(configs=CONFIGS, key=["M", "N", "K"], nearest_power_of_two=True, prune_configs_by=PRUNE)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K: tl.constexpr, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    # the grouped program order of GPTQ's matmul248 kernel, over plain float32 (no dequantisation)
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    # K is a constexpr here: Triton 3.3's interpreter cannot loop to a runtime scalar (with NumPy 2)
    for start in range(0, K, BLOCK_SIZE_K):
        ks = start + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        accumulator += tl.dot(a, b)
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, accumulator, mask=c_mask)


def matmul(a, b, tuner=matmul_kernel):
    """``a @ b`` through the tuned kernel (float32, on the CPU under the interpreter)."""
    import torch

    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)  # noqa: E731
    tuner[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c


def new_tuner(configs=CONFIGS):
    """Another tuner over ``matmul_kernel``'s function, with a cache of its own."""
    return CustomizedTritonAutoTuner(matmul_kernel.fn, matmul_kernel.arg_names, configs, ["M", "N", "K"], None, PRUNE,
                                     True)


def another_version():
    """The same kernel with one candidate more: what a table recorded against ``matmul_kernel`` was not."""
    return new_tuner(CONFIGS + [_config(16, 16, 32, 1, 2, 1)])
