"""A process that chooses, then starts children: ``import triton`` children that choose nothing,
and children of each multiprocessing start method (and a plain subprocess) that choose a key of
their own.  Prints one JSON line: its pid and choice log, and each child's pid and log.

Usage: evidence_children.py   (settings from the environment)
"""

import json
import multiprocessing as mp
import os
import subprocess
import sys

import torch

from kernels import demo

import autotune_guard


def child(size, queue):
    x = torch.arange(size, dtype=torch.float32)
    assert torch.equal(demo.add(x, x), x + x)
    queue.put({"pid": os.getpid(), "log": autotune_guard.choice_log()})


def main():
    x = torch.arange(100, dtype=torch.float32)
    demo.add(x, x)
    demo.scale(x, 2.0)
    # Children that import Triton and choose nothing: they must write nothing.
    for _ in range(2):
        subprocess.run([sys.executable, "-c", "import triton"], check=True)
    result = {"pid": os.getpid(), "children": {}}
    for i, method in enumerate(sys.argv[1].split(",") if len(sys.argv) > 1 else ("fork", "spawn", "forkserver")):
        ctx = mp.get_context(method)
        queue = ctx.Queue()
        proc = ctx.Process(target=child, args=(200 + 100 * i, queue))
        proc.start()
        result["children"][method] = queue.get(timeout=120)
        proc.join(timeout=120)
        assert proc.exitcode == 0, (method, proc.exitcode)
    plain = subprocess.run([sys.executable, "-c", "import json, os, torch\nfrom kernels import demo\nimport autotune_guard\n"
                            "x = torch.arange(900, dtype=torch.float32)\ndemo.add(x, x)\n"
                            "print(json.dumps({'pid': os.getpid(), 'log': autotune_guard.choice_log()}))"],
                           check=True, capture_output=True, text=True)
    result["children"]["subprocess"] = json.loads(plain.stdout.strip().splitlines()[-1])
    result["log"] = autotune_guard.choice_log()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
