"""Many choices, then a pause: prints "ready" with the choice log's size once every choice is a
flush old, then sleeps until the test kills it (SIGKILL: no exit handler runs) or, with
``exit`` as its argument, exits normally."""

import sys
import time

import torch

from kernels import demo

import autotune_guard

keys = int(sys.argv[1])
for n in range(1, keys + 1):
    demo.scale(torch.ones(n), 2.0)  # one key per size
time.sleep(1.0)  # "shortly": the writer flushes within a fraction of a second of a choice
print(len(autotune_guard.choice_log()), flush=True)
print("ready", flush=True)
if sys.argv[2:] != ["exit"]:
    time.sleep(120)
    sys.exit("not killed")
