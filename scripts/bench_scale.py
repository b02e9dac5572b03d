"""How consensus and verification load the job as the rank count grows, on this machine only.

    python scripts/bench_scale.py [--waiters 64,128,256,512,1024] [--tune-s 2] [--verify-ranks 2,4,8,16,32,64]
                                  [--entries 500] [--repeat 5]

Consensus: N waiter threads and one claimer thread decide one key against one real TCPStore on
loopback (each thread a rank; waiting threads hold their own Store connections, as ranks do), with
the claimer's tuning taking --tune-s seconds.  Side by side: ``consensus.decide`` (event-driven)
and the polling waiter this project used before (check every 2 ms growing to 50 ms).  Printed per
N: Store requests per waiter (median, max: the max is the one waiter that watches the claimer's
heartbeat), requests/s over the decision, and each waiter's latency after the winner was
published (p50, p99).

Verification: N threads, each one rank of a real gloo group on loopback, run the check's
collectives (``distributed.exchange``) as ranks do at a barrier: steady state (nothing new), E new
choices the same on every rank, and E new choices on rank 0 alone (those buckets are gathered).
Printed per N: bytes each rank sends and receives per check (payloads) and the check's time (the
slowest rank's median); beside them what the all_gather_object of every rank's entries used
before would move.  Then both extrapolated to 16384 ranks (bytes: exact, from the protocol; time:
a least-squares line in N, as gloo's ring all_reduce takes 2(N-1) steps; on this 2-core VM the
threads share 2 cores, so the times are an upper bound for the CPU part, not a network figure).

Bounded: at most 1024 + 1 threads and 64 gloo ranks, every wait has a deadline, loopback only.
"""

import argparse
import collections
import json
import os
import statistics
import sys
import threading
import time
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from autotune_guard import consensus, distributed  # noqa: E402

SIGNATURES = [f"BLOCK={b},num_warps={w},num_stages=3,num_ctas=1" for b in (32, 64, 128, 256) for w in (4, 8)]


class Counting:
    """A Store that counts the requests each thread makes (``clone`` opens a connection and is not
    a request) and notes when the result of a decision was published."""

    def __init__(self, store, counts, published):
        self.store, self.counts, self.published = store, counts, published

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def call(*args):
            if name == "clone":
                return Counting(method(*args), self.counts, self.published)
            self.counts[threading.current_thread().name] += 1
            result = method(*args)
            if name in ("set", "compare_set") and str(args[0]).endswith("/result"):
                self.published.setdefault(args[0], time.monotonic())
            return result

        return call


def poll_waiter(store, name, timeout):
    """The waiter as this project had it before: claim, then poll check+get, 2 ms growing to 50 ms."""
    key = f"autotune_guard/poll/{name}"
    if store.compare_set(key + "/claim", "", "waiter") == b"waiter":
        raise SystemExit("the claimer thread must claim first")
    deadline, interval = time.monotonic() + timeout, 0.002
    while time.monotonic() < deadline:
        if store.check([key + "/result"]):
            return store.get(key + "/result")
        time.sleep(interval)
        interval = min(interval * 1.5, 0.05)
    raise TimeoutError(key)


def one_decision(server_port, variant, waiters, tune_s, name):
    counts, published, done = collections.Counter(), {}, {}
    clients = []

    first = dist.TCPStore("127.0.0.1", server_port, 1, False, timedelta(seconds=60))

    def client():  # a connection of its own (clone: new TCPStore clients connect far more slowly)
        raw = first.clone()
        clients.append(raw)
        return Counting(raw, counts, published)

    claimer_store = client()
    claimed = threading.Event()

    def tune():
        claimed.set()
        time.sleep(tune_s)
        return SIGNATURES[3]

    def claimer():
        if variant == "event":
            consensus.decide(claimer_store, "bench", name, 0, SIGNATURES, tune, 120)
        else:
            key = f"autotune_guard/poll/{name}"
            claimer_store.compare_set(key + "/claim", "", "claimer")
            tune()
            claimer_store.set(key + "/result", consensus.encode_winner(0, SIGNATURES[3], SIGNATURES))

    stores = [client() for _ in range(waiters)]  # connections made before the clock starts

    # A rank opens its waiting connection (a clone of its Store) once, at its first wait.  Here they
    # are opened before the clock starts, one after another: many clients of one process
    # connecting at once make torch's TCPStore client back off for seconds (an artifact of
    # threads as ranks), which would be measured instead of the protocol.
    waiting = [client() for _ in range(waiters)] if variant == "event" else []
    ready = threading.Barrier(waiters + 1)

    def waiter(i):
        if variant == "event":
            consensus._clones.__dict__.setdefault("by_store", {})[id(stores[i])] = waiting[i]
        ready.wait(120)
        claimed.wait(30)
        if variant == "event":
            consensus.decide(stores[i], "bench", name, i + 1, SIGNATURES, tune, 120)
        else:
            poll_waiter(stores[i], name, 120)
        done[i] = time.monotonic()

    threads = [threading.Thread(target=claimer, name="claimer")]
    threads += [threading.Thread(target=waiter, args=(i,), name=f"w{i}") for i in range(waiters)]
    for t in threads[1:]:
        t.start()
    ready.wait(120)
    start = time.monotonic()
    threads[0].start()
    for t in threads:
        t.join(180)
    end = max(done.values())
    counts.pop("MainThread", None)
    publish = min(published.values())
    per_waiter = sorted(counts[f"w{i}"] for i in range(waiters))
    latency = sorted(done[i] - publish for i in range(waiters))
    total = sum(counts.values())
    clients.clear()
    return {"requests_p50": statistics.median(per_waiter), "requests_max": per_waiter[-1],
            "requests_per_s": total / (end - start), "latency_p50_ms": 1e3 * statistics.median(latency),
            "latency_p99_ms": 1e3 * latency[min(len(latency) - 1, int(0.99 * len(latency)))]}


def bench_consensus(args):
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=60), wait_for_workers=False)
    threading.stack_size(512 * 1024)
    rows = []
    print(f"consensus: one key, claimer tunes for {args.tune_s:g} s, N waiter threads, one TCPStore on loopback")
    print(f"  {'N':>5} {'waiting':<8} {'req/waiter p50':>14} {'max':>5} {'req/s':>8} {'latency p50':>12} {'p99':>9}")
    for n in args.waiters:
        for variant in ("poll", "event"):  # interleaved per N
            r = one_decision(server.port, variant, n, args.tune_s, f"consensus/{variant}-{n}-{time.time_ns()}")
            rows.append({"n": n, "waiting": variant, **r})
            print(f"  {n:>5} {variant:<8} {r['requests_p50']:>14.0f} {r['requests_max']:>5} {r['requests_per_s']:>8.0f} "
                  f"{r['latency_p50_ms']:>9.1f} ms {r['latency_p99_ms']:>6.1f} ms", flush=True)
    big = 16384
    poll = [r for r in rows if r["waiting"] == "poll"][-1]
    print(f"  at {big} ranks: polling ~{poll['requests_p50'] / args.tune_s * big:,.0f} requests/s while a key is tuned "
          f"(per waiter {poll['requests_p50'] / args.tune_s:.0f}/s, whatever N); event-driven "
          f"{4 * big:,} requests per key in all (4 per waiter) plus ~{2 / consensus.BEAT_S:.0f}/s from the one watcher")
    return rows


def bench_verify(args):
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=120), wait_for_workers=False)
    entries = [(f"sm90|bench.module.kernel_{i % 40}|{i},4096,torch.float16",
                f"BLOCK_M={64 << (i % 3)},BLOCK_N=64,num_warps=4,num_stages=3,num_ctas=1") for i in range(args.entries)]
    hashed_all = {pair: distributed._pair_hash(*pair) for pair in entries}
    old_bytes = len(json.dumps(entries).encode())  # what each rank's new entries weigh as a payload
    rows = []
    print(f"\nverification: N gloo ranks (threads) on loopback, {args.entries} new entries per rank where new")
    print(f"  {'N':>4} {'check':<22} {'sent B':>8} {'received B':>11} {'ms':>8}   before: sent/received B")
    for n in args.verify_ranks:
        groups = [None] * n
        clients = [store.clone() for _ in range(n)]  # one connection per rank, as processes have

        def make(rank):
            prefix = dist.PrefixStore(f"bench/{n}/", clients[rank])
            groups[rank] = dist.ProcessGroupGloo(prefix, rank, n, timedelta(seconds=120))

        threads = [threading.Thread(target=make, args=(r,)) for r in range(n)]
        [t.start() for t in threads]
        [t.join(300) for t in threads]
        cases = {"steady (nothing new)": lambda r: {},
                 "new, same on all": lambda r: hashed_all,
                 "new, rank 0 alone": lambda r: hashed_all if r == 0 else {}}
        for case, mine in cases.items():
            times, moved = [[] for _ in range(n)], [None] * n

            def run(rank):
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    differ, gathered, moved[rank] = distributed.exchange(groups[rank], n, [0] * distributed.BUCKETS,
                                                                         mine(rank))
                    if differ:  # the first rank's verdict, as _check sends it: the distinct pairs
                        verdict = {"pairs": sorted({tuple(p) for g in gathered for p in g})} if rank == 0 else None
                        distributed._broadcast_verdict(groups[rank], verdict, moved[rank])
                    times[rank].append(time.perf_counter() - start)

            threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
            [t.start() for t in threads]
            [t.join(300) for t in threads]
            ms = 1e3 * max(statistics.median(t) for t in times)
            sent, received = max(m[0] for m in moved), max(m[1] for m in moved[1:])  # rank 0: below
            before = ("8 / 8" if case.startswith("steady") else
                      f"{old_bytes} / {old_bytes * n}" if case.startswith("new, same") else f"{old_bytes} / {old_bytes + 2 * n}")
            rows.append({"n": n, "check": case, "sent": sent, "received": received, "ms": ms})
            print(f"  {n:>4} {case:<22} {sent:>8} {received:>11} {ms:>8.2f}   {before}", flush=True)
        del groups
    big = 16384
    print(f"  extrapolated to {big} ranks (time: least squares t = a + b*N over the measured N):")
    for case in ("steady (nothing new)", "new, same on all", "new, rank 0 alone"):
        points = [(r["n"], r["ms"]) for r in rows if r["check"] == case]
        mean_n = statistics.mean(p[0] for p in points)
        mean_t = statistics.mean(p[1] for p in points)
        slope = sum((x - mean_n) * (y - mean_t) for x, y in points) / max(1e-9, sum((x - mean_n) ** 2 for x, _ in points))
        at_big = mean_t + slope * (big - mean_n)
        last = [r for r in rows if r["check"] == case][-1]
        received = last["received"]
        if case.endswith("alone"):  # the first rank alone receives 8 bytes per member more
            received = f"{received:,} (first rank: + 8 x {big})"
        print(f"    {case:<22} sent {last['sent']} B, received {received} B; ~{at_big:,.0f} ms "
              f"(slope {slope:.3f} ms per rank)")
    print(f"    before: a check with new entries received every rank's entries: {old_bytes} x {big} = "
          f"{old_bytes * big / 2**20:,.0f} MiB per rank")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    parser.add_argument("--waiters", type=ints, default=[64, 128, 256, 512, 1024])
    parser.add_argument("--tune-s", type=float, default=2.0)
    parser.add_argument("--verify-ranks", type=ints, default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--entries", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if max(args.waiters, default=0) > 1024 or max(args.verify_ranks, default=0) > 64:
        parser.error("bounded: at most 1024 waiters and 64 gloo ranks")
    torch.set_num_threads(1)
    results = {"consensus": bench_consensus(args) if args.waiters else [],
               "verify": bench_verify(args) if args.verify_ranks else []}
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
