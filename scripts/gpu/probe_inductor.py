"""Probe (development aid): what torch.compile does with a user @triton.autotune kernel on this torch.

Prints the Inductor seams autotune_guard's adapter relies on, and what CachingAutotuner sees at its
autotuning step.  Run on a CUDA machine: python scripts/gpu/probe_inductor.py > $OUT/probe.txt
"""
import inspect
import json
import sys

import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_heuristics as th

print("torch", torch.__version__, "triton", triton.__version__)
for name in ("cached_autotune", "user_autotune", "check_autotune_cache", "lookup_autotune_config"):
    obj = getattr(th, name, None)
    print(f"\n===== {name}: {'absent' if obj is None else ''}")
    if obj is not None:
        print(inspect.getsource(obj))
CA = th.CachingAutotuner
for name in ("__init__", "run", "autotune_to_one_config", "benchmark_all_configs", "bench", "precompile",
             "coordinate_descent_tuning", "_make_launchers"):
    obj = CA.__dict__.get(name)
    print(f"\n===== CachingAutotuner.{name}: {'absent' if obj is None else ''}")
    if obj is not None:
        src = inspect.getsource(obj)
        print(src if len(src) < 9000 else src[:9000] + "\n...")
try:
    from torch._inductor.runtime import autotune_cache
    print("\n===== AutotuneCache.read_best")
    print(inspect.getsource(autotune_cache.AutotuneCache.read_best))
    print(inspect.getsource(autotune_cache.AutotuneCache.create))
except Exception as exc:
    print("autotune_cache", exc)
import torch._inductor.codegen.wrapper as wrapper
src = inspect.getsource(wrapper)
i = src.find("def define_user_defined_triton_kernel")
print("\n===== define_user_defined_triton_kernel\n", src[i:i + 7000])

seen = []
orig = CA.autotune_to_one_config


def spy(self, *args, **kwargs):
    info = {"fn_name": getattr(self.fn, "__name__", None), "fn_module": getattr(self.fn, "__module__", None),
            "inductor_meta": {k: repr(v)[:200] for k, v in self.inductor_meta.items()},
            "triton_meta_keys": sorted(self.triton_meta), "signature": repr(self.triton_meta.get("signature"))[:400],
            "configs": [repr(c) for c in self.configs], "launcher_configs": [repr(l.config) for l in self.launchers],
            "custom_kernel": self.custom_kernel, "heuristic_type": repr(self.heuristic_type),
            "args": [repr(type(a)) + (f" {tuple(a.shape)} {a.dtype}" if hasattr(a, "shape") else f" {a!r}") for a in args],
            "kwargs": sorted(kwargs), "filename": getattr(self, "filename", None), "size_hints": repr(getattr(self, "size_hints", None))}
    seen.append(info)
    return orig(self, *args, **kwargs)


CA.autotune_to_one_config = spy


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024) for w in (4, 8)], key=["n"])
@triton.jit
def row_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def f(x):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    row_sum[(x.shape[0],)](x, out, x.shape[1])
    return out * 2 + 1


x = torch.randn(64, 4096, device="cuda")
g = torch.compile(f, fullgraph=True)
y = g(x)
torch.cuda.synchronize()
x2 = torch.randn(512, device="cuda")
z = torch.compile(lambda t: (t.sum(dim=-1), t.softmax(-1)))(torch.randn(4096, 8192, device="cuda"))
print("\n===== spied autotune_to_one_config calls")
print(json.dumps(seen, indent=1))
