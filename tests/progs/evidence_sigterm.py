"""Chooses, says "ready", then waits for SIGTERM.  argv[1]: the handler the program itself set
before Triton was imported: "default" (none), "exit" (raises SystemExit(3)), "ignore" (SIG_IGN);
"note-late": a handler that only notes the signal, set after Triton was imported (before the
first choice)."""

import signal
import sys
import time

how = sys.argv[1]


def handler(signum, frame):
    print("program handler ran", flush=True)
    sys.exit(3)


if how == "exit":
    signal.signal(signal.SIGTERM, handler)
elif how == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

import torch  # noqa: E402

from kernels import demo  # noqa: E402

if how == "note-late":
    import triton  # noqa: F401  (the guard is installed by now)

    signal.signal(signal.SIGTERM, lambda signum, frame: print("program handler ran", flush=True))

x = torch.arange(100, dtype=torch.float32)
demo.add(x, x)
print("ready", flush=True)
for _ in range(600):
    time.sleep(0.1)
print("still running", flush=True)
