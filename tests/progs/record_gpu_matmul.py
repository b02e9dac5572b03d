"""A GPU program for the record -> merge -> pin loop on real timings (not run by the CPU test
suite): an fp16 matmul autotuned over 8 tilings, like programs that know nothing of
autotune_guard.  It prints one JSON line: the config each shape ran and its time per call.

Usage: python record_gpu_matmul.py [SIZE ...]      (default 4096 and 2048; square M=N=K)
"""

import json
import sys

import torch
import triton
import triton.language as tl

TILINGS = [(128, 256, 64, 8, 3), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
           (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 2, 5), (32, 64, 32, 2, 5)]


@triton.autotune(
    configs=[triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
             for m, n, k, w, s in TILINGS],
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc += tl.dot(tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] + k < K), other=0.0),
                      tl.load(b, mask=(rk[:, None] + k < K) & (rn[None, :] < N), other=0.0))
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))  # noqa: E731
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c


def main():
    sizes = [int(s) for s in sys.argv[1:]] or [4096, 2048]
    result = {}
    for size in sizes:
        torch.manual_seed(0)
        a = torch.randn(size, size, device="cuda", dtype=torch.float16)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16)
        c = matmul(a, b)  # the first call of a shape tunes (or pins)
        torch.testing.assert_close(c, (a @ b), atol=0.5, rtol=2e-2)
        ms = triton.testing.do_bench(lambda: matmul(a, b), warmup=100, rep=500)
        cfg = matmul_kernel.best_config  # the config of the last launch, tuned or pinned
        result[size] = {"config": f"{cfg.kwargs} num_warps={cfg.num_warps} num_stages={cfg.num_stages}", "ms": round(ms, 4),
                        "tflops": round(2 * size ** 3 / ms / 1e9, 1)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
