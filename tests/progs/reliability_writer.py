"""Chooses argv[1] keys, one every argv[2] seconds, so that its evidence files are rewritten
again and again (a new temporary file and a rename each time); prints its log as JSON."""

import json
import sys
import time

import torch

from kernels import demo

import autotune_guard

for i in range(int(sys.argv[1])):
    x = torch.arange(100 + i, dtype=torch.float32)
    demo.add(x, x)
    time.sleep(float(sys.argv[2]))
print(json.dumps(autotune_guard.choice_log()), flush=True)
