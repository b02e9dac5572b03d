"""A consensus job under ``torchrun --max-restarts 1``: in attempt 0 the claiming rank (rank 1) is
SIGKILLed while it times; torchrun stops the job and restarts it.  Attempt 1 must start clean (the
dead claim is still in the agent's Store), tune, agree and finish.

usage: consensus_restart.py OUT_DIR   (each rank of the attempt that finishes writes OUT_DIR/rank<N>.json)
"""

import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import triton
import triton.language as tl

RANK = int(os.environ["RANK"])
ATTEMPT = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
TIMER_CALLS = []
STORE = []


def timer(kernel_call, quantiles):
    TIMER_CALLS.append(1)
    STORE[0].set(f"test/claimed/{ATTEMPT}", str(RANK))
    if ATTEMPT == 0:
        time.sleep(1.0)  # the other rank is waiting by now
        os.kill(os.getpid(), signal.SIGKILL)
    return [float(len(TIMER_CALLS))] * 3  # the first candidate wins


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64, 128)], key=["n"], do_bench=timer)
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def clean_start():
    """torch's own default-group keys are not scoped to the attempt either: a rank could read its
    peer's address from attempt 0 and fail to connect (gloo: "Connection refused").  Before either
    rank initializes, rank 0 deletes those (only those: the guard's own keys stay, and must be
    told apart by the guard itself)."""
    from datetime import timedelta

    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timedelta(seconds=60))
    if RANK == 0:
        for key in store.list_keys():
            if "default_pg" in key and "autotune_guard/" not in key:
                store.delete_key(key)
        store.set(f"test/clean/{ATTEMPT}", "1")
    else:
        store.wait([f"test/clean/{ATTEMPT}"])


def main():
    if ATTEMPT > 0:
        clean_start()
    dist.init_process_group("gloo")
    from torch.distributed.distributed_c10d import _get_default_store

    STORE.append(_get_default_store())
    if RANK != 1:  # rank 1 claims: the others launch once it is timing
        STORE[0].wait([f"test/claimed/{ATTEMPT}"])
    n = 1000
    x = torch.rand(n)
    out = torch.zeros_like(x)
    start = time.monotonic()
    copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    assert torch.equal(out, x)
    import autotune_guard

    with open(os.path.join(sys.argv[1], f"rank{RANK}.json"), "w") as f:
        json.dump({"attempt": ATTEMPT, "choices": autotune_guard.choice_log(), "timer_calls": len(TIMER_CALLS),
                   "seconds": time.monotonic() - start}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
