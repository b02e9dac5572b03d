"""One key of a real @triton.autotune kernel with 8 candidates, each costing SPLIT_CANDIDATE_S
seconds to time as a GPU's compile and timing would (the timer runs the candidate for real under
Triton's interpreter, then sleeps), for the split-tuning tier (tests/test_split_tuning.py). It
knows nothing of autotune_guard.

The timer returns a fixed timing per candidate (TIMINGS), so that every rank and every way of
tuning sees the same numbers and must pick the same winner. Ranks meet after a barrier, then
reach the key together; rank SPLIT_LATE_RANK arrives SPLIT_LATE_S seconds later; rank
SPLIT_KILL_RANK SIGKILLs itself SPLIT_KILL_AFTER_S seconds into its first candidate.

usage: split_job.py OUT_DIR   (ranks by torchrun, or by hand with SPLIT_NO_BARRIER=1: nothing
collective after the key, as a rank of the job may be dead by then)

Each rank writes OUT_DIR/rank<N>.json: the candidates it timed, the config its launch ran (Triton's
``best_config``), the hash of the result, when it reached the key and when it had the result
(``time.time()``: the ranks share one clock), and the error that ended it, if any.
"""

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

CANDIDATE_S = float(os.environ.get("SPLIT_CANDIDATE_S", "1"))
KILL_RANK = int(os.environ.get("SPLIT_KILL_RANK", "-1"))
KILL_AFTER_S = float(os.environ.get("SPLIT_KILL_AFTER_S", "0.3"))
BLOCKS, WARPS = (32, 64, 128, 256), (1, 2)
# milliseconds by (BLOCK, num_warps): the winner (128, 2) is neither the first nor the last declared
TIMINGS = {(32, 1): 0.71, (32, 2): 0.66, (64, 1): 0.52, (64, 2): 0.49, (128, 1): 0.44, (128, 2): 0.41,
           (256, 1): 0.47, (256, 2): 0.58}
TIMED = []


def _config_of(kernel_call):
    """The config Triton's ``_bench`` is timing (its kernel_call closes over it)."""
    cells = dict(zip(kernel_call.__code__.co_freevars, (c.cell_contents for c in kernel_call.__closure__)))
    return cells["config"]


def gpu_like_timer(kernel_call, quantiles):
    config = _config_of(kernel_call)
    if not TIMED and int(os.environ.get("RANK", "-1")) == KILL_RANK:
        threading.Timer(KILL_AFTER_S, os.kill, (os.getpid(), signal.SIGKILL)).start()
    TIMED.append(f"{config.kwargs['BLOCK']}/{config.num_warps}")
    start = time.perf_counter()
    kernel_call()
    time.sleep(max(0.0, CANDIDATE_S - (time.perf_counter() - start)))
    ms = TIMINGS[(config.kwargs["BLOCK"], config.num_warps)]
    return [ms, ms * 0.9, ms * 1.1]


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in BLOCKS for w in WARPS], key=["n_cols"],
                 do_bench=gpu_like_timer)
@triton.jit
def split_sum_kernel(x_ptr, out_ptr, n_cols, N_POW2: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, N_POW2 // BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    tile = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(tl.sum(tile, axis=0), axis=0))


def main():
    out_dir = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    if rank == int(os.environ.get("SPLIT_LATE_RANK", "-1")):
        time.sleep(float(os.environ.get("SPLIT_LATE_S", "5")))
    x = torch.randn(4, 700, generator=torch.Generator().manual_seed(7))
    out = torch.empty(4, dtype=torch.float32)
    reached, error, launched = time.time(), None, None
    try:
        split_sum_kernel[(4,)](x, out, 700, N_POW2=1024)
        best = split_sum_kernel.best_config
        launched = f"{best.kwargs['BLOCK']}/{best.num_warps}"
    except Exception as exc:  # the guard's refusal: written down, then the rank ends as a failed one would
        error = f"{type(exc).__name__}: {exc}"
    done = time.time()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as file:
        json.dump({"rank": rank, "timed": TIMED, "launched": launched, "reached": reached, "done": done,
                   "hash": hashlib.sha256(out.numpy().tobytes()).hexdigest()[:16], "error": error}, file)
    if os.environ.get("SPLIT_NO_BARRIER"):
        os._exit(3 if error else 0)
    dist.barrier()
    dist.destroy_process_group()
    if error:
        sys.exit(3)


if __name__ == "__main__":
    main()
