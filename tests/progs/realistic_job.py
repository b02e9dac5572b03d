"""A job with a real job's timing, for the realistic tier (tests/test_realistic.py): it knows
nothing of autotune_guard.

Each candidate costs what compiling and timing it costs on a GPU: the timer runs the real kernel
(Triton's interpreter) once, then sleeps REAL_CANDIDATE_S seconds. Ranks start at different
times (the n-th after REAL_FIRST_RANK, default 0, after n * REAL_STAGGER_S), meet the keys in different orders (odd ranks backwards),
and rank REAL_SLOW_RANK works REAL_SLOW_S seconds before each key. Optional, on the rank that
times: REAL_GIL_BLOCK_S holds the GIL inside a C call that long before its first candidate
(``ctypes.PyDLL``: compiling in C++ does the same); REAL_KILL_AFTER_S SIGKILLs itself that long
into its first tuning.

usage: realistic_job.py OUT_DIR   (env: REAL_KEYS, REAL_CANDIDATE_S, REAL_STAGGER_S, REAL_SLOW_RANK,
REAL_SLOW_S, REAL_GIL_BLOCK_S, REAL_KILL_AFTER_S)

Each rank writes OUT_DIR/rank<N>.json: how many candidates it timed, the hash of its results, the
seconds to its first result and in all, and the error that ended it, if any.
"""

import ctypes
import hashlib
import json
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
import triton
import triton.language as tl

KEYS = int(os.environ.get("REAL_KEYS", "4"))
CANDIDATE_S = float(os.environ.get("REAL_CANDIDATE_S", "1"))
GIL_BLOCK_S = float(os.environ.get("REAL_GIL_BLOCK_S", "0"))
KILL_AFTER_S = float(os.environ.get("REAL_KILL_AFTER_S", "0"))
TIMED = {"calls": 0, "first": None}


def gpu_like_timer(kernel_call, quantiles):
    """Compile and run the candidate for real, then take as long as a GPU's compile and timing."""
    now = time.monotonic()
    if TIMED["first"] is None:
        TIMED["first"] = now
        if KILL_AFTER_S:
            threading.Timer(KILL_AFTER_S, os.kill, (os.getpid(), signal.SIGKILL)).start()
        if GIL_BLOCK_S:  # PyDLL keeps the GIL through the call: no Python thread of this process runs
            ctypes.PyDLL(None).sleep(int(GIL_BLOCK_S))
    TIMED["calls"] += 1
    start = time.perf_counter()
    kernel_call()
    time.sleep(max(0.0, CANDIDATE_S - (time.perf_counter() - start)))
    spent = (time.perf_counter() - start) * 1e3
    return [spent, spent, spent]


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 128, 256, 512)], key=["n_cols"],
                 do_bench=gpu_like_timer)
@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, N_POW2: tl.constexpr, BLOCK: tl.constexpr):
    # BLOCK sets the order in which the floats are added: each candidate gives other low bits
    row = tl.program_id(0)
    offs = tl.arange(0, N_POW2 // BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    tile = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(tl.sum(tile, axis=0), axis=0))


def row_sum(x):
    out = torch.empty(x.shape[0], dtype=torch.float32)
    row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], N_POW2=triton.next_power_of_2(x.shape[1]))
    return out


def main():
    out_dir = sys.argv[1]
    started = time.monotonic()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    place = (rank - int(os.environ.get("REAL_FIRST_RANK", "0"))) % dist.get_world_size()
    time.sleep(place * float(os.environ.get("REAL_STAGGER_S", "0")))
    widths = [600 + 100 * k for k in range(KEYS)]
    order = widths if rank % 2 == 0 else widths[::-1]
    results, first, error = {}, None, None
    try:
        for width in order:
            if rank == int(os.environ.get("REAL_SLOW_RANK", "-1")):
                time.sleep(float(os.environ.get("REAL_SLOW_S", "0")))
            x = torch.randn(4, width, generator=torch.Generator().manual_seed(width))
            results[width] = row_sum(x).numpy().tobytes()
            first = first if first is not None else time.monotonic() - started
        dist.barrier()
    except Exception as exc:  # the guard's refusal: written down, then the rank ends as a failed one would
        error = f"{type(exc).__name__}: {exc}"
    digest = hashlib.sha256(b"".join(results[w] for w in sorted(results))).hexdigest()[:16]
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as out:
        json.dump({"timed": TIMED["calls"], "hash": digest, "first_s": first, "wall_s": time.monotonic() - started,
                   "tuning_from": TIMED["first"] and TIMED["first"] - started, "error": error}, out)
    if error:
        os._exit(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
