"""Chooses, then ends as argv[1] says: "exception" (an uncaught RuntimeError), "thread-exception"
(a thread dies of one, then a normal exit), "wait" (says "ready" - a file argv[2] under torchrun,
else a line - and sleeps until a signal ends it), "fsize" (its files cannot be written at exit:
the file-size limit is 0, as on a full filesystem), "chdir" (moves to argv[2] after the first
choice, chooses again, exits)."""

import os
import sys
import threading
import time

import torch

from kernels import demo

how = sys.argv[1]
rank = int(os.environ.get("RANK", "0"))
x = torch.arange(100 + rank, dtype=torch.float32)
demo.add(x, x)
if how == "exception":
    raise RuntimeError("the program fails on purpose")
if how == "thread-exception":
    worker = threading.Thread(target=lambda: 1 / 0)
    worker.start()
    worker.join()
elif how == "wait":
    time.sleep(0.5)  # the background writer's copy first
    if len(sys.argv) > 2:
        with open(os.path.join(sys.argv[2], f"ready{rank}"), "w") as out:
            out.write(str(os.getpid()))
    else:
        print("ready", flush=True)
    time.sleep(300)
elif how == "fsize":
    import resource
    import signal

    time.sleep(0.5)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    demo.scale(x, 2.0)  # a choice the files cannot take any more
elif how == "chdir":
    os.chdir(sys.argv[2])  # Hydra's hydra.job.chdir does this
    demo.scale(x, 2.0)
    time.sleep(0.5)
