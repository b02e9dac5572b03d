"""One cold process of the FlagGems proof: FlagGems 5.0.2's mm, softmax and layer_norm on the GPU.

usage: flaggems_worker.py OUT.json

Counts every call of Triton's timer (``triton.testing.do_bench``, which the driver's benchmarker
is, wrapped before FlagGems builds a kernel), hashes each op's output, and writes them with the
guard's choice log and the kernels it did not govern.
"""

import hashlib
import json
import sys

import torch
import triton.testing

CALLS = {"n": 0}
_timer = triton.testing.do_bench


def counted(*args, **kwargs):
    CALLS["n"] += 1
    return _timer(*args, **kwargs)


triton.testing.do_bench = counted

import flag_gems  # noqa: E402
from flag_gems.ops.layernorm import layer_norm  # noqa: E402
from flag_gems.ops.mm import mm  # noqa: E402
from flag_gems.ops.softmax import softmax  # noqa: E402

import autotune_guard  # noqa: E402

gen = torch.Generator(device="cuda").manual_seed(0)
a = torch.randn(1000, 768, device="cuda", dtype=torch.float16, generator=gen)
b = torch.randn(768, 1536, device="cuda", dtype=torch.float16, generator=gen)
x = torch.randn(4096, 1000, device="cuda", dtype=torch.float16, generator=gen)
w = torch.randn(1000, device="cuda", dtype=torch.float16, generator=gen)
bias = torch.randn(1000, device="cuda", dtype=torch.float16, generator=gen)
ops = {"mm": lambda: mm(a, b), "softmax": lambda: softmax(x, -1), "layer_norm": lambda: layer_norm(x, (1000,), w, bias)[0]}
result = {"flag_gems": getattr(flag_gems, "__version__", "?"), "ops": {}}
for name, op in ops.items():
    before = CALLS["n"]
    out = op()
    torch.cuda.synchronize()
    result["ops"][name] = {"bench_calls": CALLS["n"] - before,
                           "hash": hashlib.sha256(out.float().cpu().numpy().tobytes()).hexdigest()[:16]}
result["choices"] = autotune_guard.choice_log()
result["ungoverned"] = autotune_guard.ungoverned()
with open(sys.argv[1], "w") as f:
    json.dump(result, f, indent=1)
