"""A user program for the torch.compile GPU tier: the same autotuned row sum called eagerly and
under torch.compile (default, fullgraph, dynamic), optionally Inductor's own kernels, optionally as
a torchrun rank.  Prints one JSON line: output hashes per variant, how many times Inductor's
benchmarker and Triton's timer ran, how many compiled kernels carry the guard's per-key launch
wrapper, the choice log.

    python compiled_rowsum.py eager,compiled,fullgraph,dynamic [--generated] [--dist]
"""
import gc
import hashlib
import json
import sys
import time

import torch
import triton.runtime.autotuner as triton_autotuner
from torch._inductor.runtime import triton_heuristics

import autotune_guard
from kernels.compiled import rowsum

counts = {"inductor_bench": 0, "triton_bench": 0}


def counting(cls, name, counter):
    original = getattr(cls, name)

    def counted(self, *args, **kwargs):
        counts[counter] += 1
        return original(self, *args, **kwargs)

    setattr(cls, name, counted)


counting(triton_heuristics.CachingAutotuner, "bench", "inductor_bench")
counting(triton_autotuner.Autotuner, "_bench", "triton_bench")

variants = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] else []
rank = 0
if "--dist" in sys.argv:
    torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank()

gen = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(256, 16384, device="cuda", generator=gen)
x_small = torch.randn(256, 8192, device="cuda", generator=gen)


def digest(t):
    return hashlib.sha256(t.detach().cpu().numpy().tobytes()).hexdigest()[:16]


def launch_wrappers():
    """How many of Inductor's kernels carry the guard's per-key launch wrapper (an instance ``run``)."""
    count = 0
    for o in gc.get_objects():
        try:  # gc also holds weak proxies whose referent is gone: isinstance() raises on those
            count += isinstance(o, triton_heuristics.CachingAutotuner) and "run" in o.__dict__
        except ReferenceError:
            pass
    return count


hashes, first_s, wrappers = {}, {}, {}
for variant in variants:
    if variant == "eager":
        fn = rowsum
    elif variant == "compiled":
        fn = torch.compile(lambda t: rowsum(t))
    elif variant == "fullgraph":
        fn = torch.compile(lambda t: rowsum(t), fullgraph=True)
    elif variant == "dynamic":
        fn = torch.compile(lambda t: rowsum(t), dynamic=True)
    start = time.perf_counter()
    out = fn(x)
    torch.cuda.synchronize()
    first_s[variant] = round(time.perf_counter() - start, 3)
    ref = x.double().sum(dim=1)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5, variant
    hashes[variant] = digest(out)
    wrappers[variant] = launch_wrappers() - sum(wrappers.values())
    if variant == "dynamic":  # a second key value, served by the same compiled kernel
        hashes["dynamic_small"] = digest(fn(x_small))
        if "eager" in variants:
            hashes["eager_small"] = digest(rowsum(x_small))

if "--generated" in sys.argv:
    # Inductor's own kernels: a large pointwise kernel (two configs to time unless deterministic
    # algorithms are on) and a reduction.
    y = torch.randn(8192, 6000, device="cuda", generator=gen)
    hashes["pointwise"] = digest(torch.compile(lambda t: t * 2.0 + 1.0)(y))
    hashes["reduction"] = digest(torch.compile(lambda t: (t * t).sum(dim=-1))(y))

if "--dist" in sys.argv:
    torch.distributed.barrier()
result = json.dumps({"rank": rank, "hashes": hashes, "first_s": first_s, "launch_wrappers": wrappers, **counts,
                     "log": autotune_guard.choice_log(), "digest": autotune_guard.choice_digest()})
print(result)
if "--dist" in sys.argv:  # ranks print at once: each also leaves its line in a file of its own
    with open(f"result.rank{rank}.json", "w") as f:
        f.write(result)
if "--dist" in sys.argv:
    torch.distributed.destroy_process_group()
