"""Record-mode details in one cold process (started with AUTOTUNE_RECORD_PATH=DIR/first):

* which timings belong to which key when a policy is installed after keys were tuned;
* a winner Triton took from its disk cache (3.4+) is recorded without timings.

Prints one JSON line.  Usage: record_details.py DIR
"""

import json
import os
import sys

import torch
import triton

from kernels import demo

import autotune_guard
from autotune_guard import evidence as writer

tmp = sys.argv[1]
result = {}
x = torch.arange(100, dtype=torch.float32)
y = torch.arange(300, dtype=torch.float32)

demo.add(x, x)  # key 100 tuned under the first policy
autotune_guard.install({"AUTOTUNE_RECORD_PATH": os.path.join(tmp, "second")})
demo.add(y, y)  # key 300 tuned under the second; key 100 is seen by it for the first time
writer.write_files()
with open(writer.rank_file(os.path.join(tmp, "second"), 0)) as src:
    result["second"] = json.load(src)["kernels"]["kernels.demo.add_kernel"]

# A disk-cache hit, as Triton 3.4+ makes it: the winner and configs_timings come from JSON, as
# Configs rebuilt from their fields, with no timing in this process.
if hasattr(demo.add_kernel, "check_disk_cache"):
    autotune_guard.install({"AUTOTUNE_RECORD_PATH": os.path.join(tmp, "cached")})
    at = demo.add_kernel

    def disk_hit(tuning_key, configs, bench_fn):
        timings = {triton.Config(**c.__dict__): [float(i + 1)] * 3 for i, c in enumerate(configs)}
        at.cache[tuning_key] = min(timings, key=timings.get)
        at.configs_timings = timings
        return True

    at.cache_results = True
    at.check_disk_cache = disk_hit
    calls = len(demo.TIMER_CALLS)
    z = torch.arange(500, dtype=torch.float32)
    demo.add(z, z)
    result["cached_timer_calls"] = len(demo.TIMER_CALLS) - calls
    writer.write_files()
    with open(writer.rank_file(os.path.join(tmp, "cached"), 0)) as src:
        result["cached"] = json.load(src)["kernels"]["kernels.demo.add_kernel"]

print(json.dumps(result))
