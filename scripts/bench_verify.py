"""What a barrier-fired verification costs, on gloo ranks of this machine.

    python scripts/bench_verify.py [--ranks 4] [--iters 100] [--rounds 10] [--entries 500]

launches itself under torchrun (works from a source checkout: PYTHONPATH=. is enough) and prints
milliseconds per barrier call, the median over interleaved rounds and then over ranks:
  plain        torch's own barrier, unwrapped
  plain+1      torch's own barrier, then one all_reduce of one int64: "one small collective"
  wrapped-off  the wrapped barrier with AUTOTUNE_VERIFY_EVERY=0 (no cadence: the cheap test only)
  steady       the wrapped barrier with AUTOTUNE_VERIFY_EVERY=1 and nothing new to compare
  first-N      the same, when every rank made N new choices since the previous check
               (the choices are made before the timed call, as kernels make them)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def launch(args) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    # The environment arms autotune_guard at start-up, as it would for a user's program.
    env.update(AUTOTUNE_MODE="pinned", AUTOTUNE_VERIFY_EVERY="1", TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.ranks}",
           os.path.abspath(__file__), "--worker", f"--iters={args.iters}", f"--entries={args.entries}",
           f"--rounds={args.rounds}"]
    return subprocess.call(cmd, env=env)


def timed(fn, iters: int) -> float:
    """Milliseconds per call of ``fn`` over ``iters`` calls (``fn`` may return the seconds of its
    own timed part)."""
    start = time.perf_counter()
    own = [fn() for _ in range(iters)]
    if all(isinstance(t, float) for t in own):
        return sum(own) * 1e3 / iters
    return (time.perf_counter() - start) * 1e3 / iters


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    import triton  # noqa: F401  (install() applies the policy to Triton's autotuner)

    import autotune_guard
    from autotune_guard import runtime
    from autotune_guard.adapters.distributed import last_check
    from autotune_guard.core.model import Choice, ChoiceKey
    from autotune_guard.core.settings import StartupSettings

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    on = {"AUTOTUNE_MODE": "pinned", "AUTOTUNE_VERIFY_EVERY": 1}
    off = {"AUTOTUNE_MODE": "pinned", "AUTOTUNE_VERIFY_EVERY": 0}
    autotune_guard.install(off)  # wraps the barriers, also where the .pth is not installed
    wrapped = c10d.barrier
    plain = getattr(wrapped, "__wrapped__", None)
    if plain is None:
        raise SystemExit("dist.barrier is not wrapped")
    guard = runtime.current()
    counter = [0]
    moved = {}  # what the latest first-N check moved on this rank (bytes sent, received)
    flag = torch.zeros(1, dtype=torch.int64)

    def plain_plus_one():
        plain()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)

    def first_check():
        # N fresh choices on this rank (the same on every rank, so they agree), made outside the
        # timed part as a program makes them at its kernels' first launches; then the barrier.
        n = counter[0] = counter[0] + 1
        for i in range(args.entries):
            key = ChoiceKey("interpret", "bench.module.kernel_%d" % (i % 40), f"{n},{i},torch.float16")
            signature = f"BLOCK_M={64 << (i % 3)},BLOCK_N=64,num_warps=4,num_stages=3,num_ctas=1"
            guard.note(guard.epoch, key, Choice(signature, "pinned"))
        start = time.perf_counter()
        wrapped()
        elapsed = time.perf_counter() - start
        moved.update(sent=last_check.get("sent"), received=last_check.get("received"))
        return elapsed

    variants = {  # name -> (policy, barrier call, calls per loop)
        "plain": (off, plain, args.iters),
        "plain+1": (off, plain_plus_one, args.iters),
        "wrapped-off": (off, wrapped, args.iters),
        "steady": (on, wrapped, args.iters),
        f"first-{args.entries}": (on, first_check, max(3, args.iters // 20)),
    }
    results = {name: [] for name in variants}
    for round_ in range(args.rounds):
        # Interleaved rounds, in a rotating order, so that drifting load hits every variant alike.
        names = list(variants)
        names = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in names:
            policy, call, iters = variants[name]
            # The cadence is fixed at start-up for a program (every rank must count alike); the
            # benchmark switches it between variants, on every rank at the same point.
            guard.startup = StartupSettings(policy["AUTOTUNE_VERIFY_EVERY"], False)
            wrapped()  # a first check after install() takes what is new; steady state starts after it
            for _ in range(3):
                plain()
            results[name].append(timed(call, iters))
    mine = {name: statistics.median(values) for name, values in results.items()}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        names = list(mine)
        median = {name: statistics.median(r[name] for r in everyone) for name in names}
        base = median["plain"]
        print(f"{world} gloo ranks, {args.iters} barriers per loop, {args.rounds} rounds; ms per barrier "
              f"(median over rounds, then over ranks)")
        for name in names:
            extra = median[name] - base
            print(f"  {name:<12} {median[name]:8.3f} ms   x{median[name] / base:5.2f}   +{extra:7.3f} ms over plain")
        print(f"  a first-{args.entries} check on rank 0 sent {moved.get('sent')} and received {moved.get('received')} "
              "bytes (payloads)")
        print("RESULT " + json.dumps({"ranks": world, **median, f"first-{args.entries} bytes": moved}))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--entries", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        sys.exit(launch(args))


if __name__ == "__main__":
    main()
