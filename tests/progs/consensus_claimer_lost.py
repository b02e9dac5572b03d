"""A consensus job whose claimer never publishes: rank 1 claims a tuning and then dies or hangs
inside its timer.  The other ranks must fail with an error naming the kernel, the key and rank 1,
within AUTOTUNE_CONSENSUS_TIMEOUT, and must not run a config of their own.

usage: consensus_claimer_lost.py OUT_DIR HOW [CLAIMER]

HOW is where in the protocol the claimer stops:
* kill_after_claim: SIGKILL right after its claim, before its first heartbeat;
* kill: SIGKILL inside its timer, while tuning;
* kill_before_publish: SIGKILL after tuning, before publishing the winner;
* publish_fails: alive, but publishing the winner fails (its launch raises; nothing is published);
* hang: sleeps for an hour inside its timer, alive (its heartbeat goes on).

* kill*: rank 1 dies.  Run with ranks started by hand (env:// with rank 0 hosting the
  Store), because torchrun would tear the waiters down as soon as rank 1 dies.
* kill with CLAIMER=0: the claimer is also the rank that hosts the Store; the waiters lose the
  Store itself and must say so (not wait out the timeout against a Store that is gone).
* hang: rank 1 sleeps for an hour; under torchrun.  The waiters exit with status 3 after writing
  their result, which makes torchrun stop the hung rank.

Each waiter writes OUT_DIR/rank<N>.json: {"error": ..., "type": ..., "seconds": ..., "ran": bool}.
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
OUT_DIR, HOW = sys.argv[1], sys.argv[2]
CLAIMER = int(sys.argv[3]) if len(sys.argv) > 3 else 1
STORE = []


def let_the_waiters_go_then(stop):
    STORE[0].set("test/claimed", str(RANK))
    time.sleep(1.0)  # the waiters are waiting by now (not still reading "test/claimed")
    if stop == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("the Store refused the winner (on purpose)")


def claimer_timer(kernel_call, quantiles):
    # Only the claimer ever times.
    if HOW == "kill":
        let_the_waiters_go_then("kill")
    if HOW == "hang":
        STORE[0].set("test/claimed", str(RANK))
        time.sleep(3600)
    return [1.0, 1.0, 1.0]


def stop_at(point):
    """Make the claimer stop at ``point`` of the real protocol (autotune_guard.deciding.consensus)."""
    from autotune_guard.deciding import consensus

    if point == "kill_after_claim":
        consensus.state().beats.start = lambda store, key: let_the_waiters_go_then("kill")
    elif point in ("kill_before_publish", "publish_fails"):
        consensus.encode_winner = lambda *args: let_the_waiters_go_then("kill" if point == "kill_before_publish" else "fail")


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64, 128)], key=["n"], do_bench=claimer_timer)
@triton.jit
def victim_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def launch():
    n = 1000
    x = torch.rand(n)
    out = torch.zeros_like(x)
    victim_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return bool(torch.equal(out, x))


def main():
    dist.init_process_group("gloo")
    from torch.distributed.distributed_c10d import _get_default_store

    store = _get_default_store()
    STORE.append(store)
    if RANK == CLAIMER:
        stop_at(HOW)
        launch()  # claims (the others wait for "test/claimed"), then dies or hangs in the timer
        sys.exit("the claimer returned from a launch it should never have finished")
    store.wait(["test/claimed"])
    start = time.monotonic()
    result = {"error": None, "type": None, "ran": False}
    try:
        result["ran"] = launch()
    except Exception as exc:
        result.update(error=str(exc), type=type(exc).__name__)
    result["seconds"] = time.monotonic() - start
    result["detected_at"] = time.time()  # beside the claimer's end, as the test saw it
    with open(os.path.join(OUT_DIR, f"rank{RANK}.json"), "w") as out:
        json.dump(result, out)
    # Rank 0 may host the Store: keep it up until every waiter has its answer.
    try:
        store.add("test/done", 1)
        waiters = dist.get_world_size() - 1
        deadline = time.monotonic() + 30
        while int(store.add("test/done", 0)) < waiters and time.monotonic() < deadline:
            time.sleep(0.05)
    except Exception:
        pass  # the Store died with its host
    sys.stdout.flush()
    os._exit(3 if HOW == "hang" else 0)  # no teardown: a peer is dead or hung


if __name__ == "__main__":
    main()
