"""A consensus job of one process whose table store is killed while it runs (tests/test_redis_store.py).

usage: store_killed_job.py   (AUTOTUNE_MODE=consensus, AUTOTUNE_TABLE_PATH=redis://...)

Tunes add 1000 and sees it in the store, prints "ready" and waits for a line on stdin (the test
kills the server meanwhile), then tunes add 2000 and scale 500. Prints its choice log as JSON.
"""

import json
import sys

import torch

import kernels.demo as demo
import autotune_guard
from autotune_guard.evidence import store_growth


def run(kernel, n):
    x = torch.rand(n)
    if kernel == "add":
        assert torch.allclose(demo.add(x, x), x + x)
    else:
        assert torch.allclose(demo.scale(x, 3.0), x * 3.0)


run("add", 1000)
store_growth.flush()  # in the store now, not 0.2 s from now
first = dict(autotune_guard.choice_log())
print("ready", flush=True)
sys.stdin.readline()
run("add", 2000)
run("scale", 500)
run("add", 1000)  # chosen before the store went down: the same config, no timing
print(json.dumps({"first": first, "log": autotune_guard.choice_log(), "timer_calls": len(demo.TIMER_CALLS)}))
