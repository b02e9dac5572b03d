"""A recording process that is killed: it chooses, waits a moment, says "ready" with its choice
log, then sleeps until the test kills it with SIGKILL (so no atexit handler ever runs)."""

import json
import sys
import time

import torch

from kernels import demo

import autotune_guard

x = torch.arange(100, dtype=torch.float32)
demo.add(x, x)
demo.scale(x, 2.0)
demo.add(torch.arange(300, dtype=torch.float32), torch.arange(300, dtype=torch.float32))
time.sleep(1.0)  # "shortly": the files are rewritten within a fraction of a second of a choice
print(json.dumps(autotune_guard.choice_log()))
print("ready", flush=True)
time.sleep(120)
sys.exit("not killed")
