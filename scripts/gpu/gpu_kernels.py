"""Kernels for the GPU benchmarks (scripts/gpu/bench_gpu.py) and the GPU test tier
(tests/test_gpu.py): ordinary ``@triton.autotune`` kernels that know nothing of autotune_guard.

* ``make_rowsum(timer)``: a row sum over 16k columns, BLOCK 256..4096 x warps 4/8 (10 candidates).
  Each candidate adds the floats in a different order (a BLOCK-wide accumulator, then a tree), so
  candidates give different output bits: which one runs decides the result.
* ``make_add(timer)``: a tiny elementwise add with 4 candidates (the launch-overhead benchmark).
* ``make_matmul(timer)``: an fp16 matmul with fp32 accumulation over 10 tilings (throughput).

Each ``make_*`` returns a new autotuner over one ``@triton.jit`` function; ``timer`` is the
autotuner's ``do_bench`` (None: Triton's own).  ``DEVICE`` is ``cpu`` under TRITON_INTERPRET=1
(a smoke run on a machine without a GPU), else ``cuda``.
"""

import os

import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
DEVICE = "cpu" if INTERPRET else "cuda"

ROWSUM_CONFIGS = [(block, warps) for block in (256, 512, 1024, 2048, 4096) for warps in (4, 8)]
ADD_CONFIGS = [256, 512, 1024, 2048]
# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages): the usual Hopper fp16 tilings.
MATMUL_CONFIGS = [
    (128, 256, 64, 8, 8, 3), (256, 128, 64, 8, 8, 3), (128, 128, 64, 8, 8, 4), (128, 128, 32, 8, 4, 4),
    (64, 256, 32, 8, 4, 4), (128, 64, 32, 8, 4, 4), (64, 128, 32, 8, 4, 4), (128, 32, 32, 8, 4, 4),
    (64, 32, 32, 8, 2, 5), (32, 64, 32, 8, 2, 5),
]


@triton.jit
def rowsum_body(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def add_body(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def matmul_body(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # Grouped order of output tiles: GROUP_M row-tiles share their B columns while in L2.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (cm[:, None] < M) & (cn[None, :] < N)
    tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn, acc.to(tl.float16), mask=mask)


def make_rowsum(timer=None):
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ROWSUM_CONFIGS]
    return triton.autotune(configs=configs, key=["n_cols"], do_bench=timer)(rowsum_body)


def make_add(timer=None):
    configs = [triton.Config({"BLOCK": b}, num_warps=4) for b in ADD_CONFIGS]
    return triton.autotune(configs=configs, key=["n"], do_bench=timer)(add_body)


def make_matmul(timer=None):
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": g}, num_warps=w, num_stages=s)
               for m, n, k, g, w, s in MATMUL_CONFIGS]
    return triton.autotune(configs=configs, key=["M", "N", "K"], do_bench=timer)(matmul_body)


def rowsum(kernel, x):
    import torch

    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0))
    return out


def add(kernel, x, y, out):
    n = x.numel()
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    return out


def matmul(kernel, a, b, c):
    M, K = a.shape
    N = b.shape[1]
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c
