"""How consensus and verification load the job as the rank count grows, on this machine only.

    python scripts/bench_scale.py [--waiters 64,128,256,512,1024] [--tune-s 2] [--verify-ranks 2,4,8,16,32,64]
                                  [--entries 500] [--repeat 5] [--procs 16] [--time-limit 540] [--json FILE]
                                  [--schemes-ranks 2,4,8,16,32,64] [--fanin-waiters 64,128,256,512,1024] [--batch-keys 16]
                                  [--store-ranks 64,256,1024 (default: off)] [--store-keys 16] [--store-filler 500] [--first-launch-reps 20]

(``--schemes-ranks`` and ``--fanin-waiters``: verification's full mesh against its tree, and
consensus with and without node-level fan-in, and with and without batches (``--batch-keys``);
scripts/scale_parts.py says what they measure.)  ``--store-ranks``: table-store (Redis) requests per node and
key against the same job on a table directory, and the latency a pinned first launch adds
(scripts/store_parts.py says how; a real redis-server is started and stopped by it; off unless
``--store-ranks`` is given, so the other parts run as before without Redis).

Every rank is a thread in one of --procs worker processes (forked from a server that has imported
torch), and they all talk to ONE real TCPStore hosted by this process, on loopback.  A worker hosts
N/--procs ranks as threads; each rank opens its own Store connections, as ranks do.

Consensus: N waiters and one claimer (a thread of this process) decide one key, the claimer's
tuning taking --tune-s seconds.  Side by side for each N: ``deciding.consensus.decide`` (event-driven) and
the polling waiter this project used before (check every 2 ms growing to 50 ms).  Printed per N:
Store requests per waiter (median, max: the max is the one waiter that watches the claimer's
heartbeat), requests/s of all ranks over the decision, and each waiter's latency after the
claimer sent the winner (p50, p99).

Verification: N gloo ranks (loopback device) run the check's collectives
(``adapters.distributed.exchange``) as ranks do at a barrier: steady state (nothing new), E new choices the
same on every rank, and E new choices on rank 0 alone (those buckets are gathered).  Printed per N:
bytes each rank sends and receives per check (payloads) and the check's time (the slowest rank's
median); beside them what the all_gather_object of every rank's entries used before would move.
Then both extrapolated to 16384 ranks (bytes: exact, from the protocol; time: a least-squares line
in N, as gloo's ring all_reduce takes 2(N-1) steps; on a small machine the ranks share its cores,
so the times are an upper bound for the CPU part, not a network figure).

Bounded: at most 1024 waiters, 64 gloo ranks and 32 worker processes; every wait has a deadline;
rows that no longer fit in --time-limit seconds are skipped (and said so), and a watchdog ends the
run, workers included, 30 s after it.  Loopback only.
"""

import argparse
import collections
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
import traceback
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# c10d looks up the name of every Store connection's peer (a PTR query for 127.0.0.1 in its IPv6
# form, which /etc/hosts does not answer); where the resolver drops one now and then, a connection
# waits out its timeout (5 s by default).  Shorter for this script's processes only:
os.environ.setdefault("RES_OPTIONS", "timeout:1 attempts:1")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # not a warning per failed lookup

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from autotune_guard.core import consensus  # noqa: E402
from autotune_guard.deciding import consensus as engine  # noqa: E402
from autotune_guard.adapters.distributed import exchange  # noqa: E402
from autotune_guard.core.agreement import BUCKETS, pair_hash  # noqa: E402
from autotune_guard.adapters.distributed.tree import Tree  # noqa: E402
from autotune_guard.core.model import ChoiceKey  # noqa: E402

import scale_parts  # noqa: E402
import store_parts  # noqa: E402

HOST = "127.0.0.1"
SIGNATURES = [f"BLOCK={b},num_warps={w},num_stages=3,num_ctas=1" for b in (32, 64, 128, 256) for w in (4, 8)]
MAX_WAITERS, MAX_RANKS, MAX_PROCS = 1024, 64, 32
DECISION_S = 120  # the most one decision (connections, tuning, waking) may take
CASES = ("steady (nothing new)", "new, same on all", "new, rank 0 alone")


class BenchError(RuntimeError):
    """A part of the benchmark could not finish; its remaining rows are skipped."""


class Counting:
    """A Store that counts the requests each thread makes (``clone`` opens a connection and is not
    a request) and notes when a result was sent (before the request: latencies include its trip)."""

    def __init__(self, store, counts, published):
        self.store, self.counts, self.published = store, counts, published

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def call(*args):
            if name == "clone":
                return Counting(method(*args), self.counts, self.published)
            self.counts[threading.current_thread().name] += 1
            if name in ("set", "compare_set") and str(args[0]).endswith("/result"):
                self.published.setdefault(args[0], time.monotonic())
            return method(*args)

        return call


def connect(port, timeout):
    """A Store client of its own, as each rank has."""
    return dist.TCPStore(HOST, port, 1, False, timedelta(seconds=max(1.0, timeout)), wait_for_workers=False)


def left(deadline):
    return max(0.0, deadline - time.monotonic())


def poll_waiter(store, name, timeout):
    """The waiter as this project had it before: claim, then poll check+get, 2 ms growing to 50 ms."""
    key = f"autotune_guard/poll/{name}"
    if store.compare_set(key + "/claim", "", "waiter") == b"waiter":
        raise BenchError("the claimer must claim first")
    deadline, interval = time.monotonic() + timeout, 0.002
    while time.monotonic() < deadline:
        if store.check([key + "/result"]):
            return store.get(key + "/result")
        time.sleep(interval)
        interval = min(interval * 1.5, 0.05)
    raise TimeoutError(key)


def never_tune():
    raise BenchError("a waiter claimed the decision: the claimer must claim first")


# --- worker processes: each hosts some ranks as threads -----------------------------------------

def worker(conn, stop_at):
    """Serves tasks from the parent until told to stop, the parent is gone, or ``stop_at``."""
    torch.set_num_threads(1)
    threading.stack_size(512 * 1024)
    tasks = {"waiters": waiters_task, "verify": verify_task,
             "schemes": lambda conn, **kw: scale_parts.schemes_task(conn, connect=connect, left=left, **kw)}
    while conn.poll(left(stop_at)):
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        kind, kwargs = message
        try:
            reply = tasks[kind](conn, **kwargs)
        except Exception:
            reply = {"error": traceback.format_exc()}
        conn.send(reply)


def waiters_task(conn, port, variant, name, ranks, timeout):
    """Waiters ``ranks`` of one decision: each opens its connections, then all wait for "go" (sent
    once the claimer has claimed) and decide.  Returns each waiter's requests and finish time."""
    deadline = time.monotonic() + timeout
    counts, done, errors, keep = collections.Counter(), {}, {}, []
    opened = threading.Barrier(len(ranks) + 1)
    go, aborted = threading.Event(), []

    def waiter(rank):
        try:
            store = Counting(connect(port, left(deadline)), counts, {})
            keep.append(store)
            if variant == "event":  # the rank's waiting connection, opened before the clock starts
                engine.state().clones.put(store, store.clone())
        except Exception as exc:
            errors[rank] = f"connecting: {exc!r}"
            opened.abort()
            return
        try:
            opened.wait(left(deadline))
        except threading.BrokenBarrierError:
            return
        if not go.wait(left(deadline)) or aborted:
            return
        try:
            if variant == "event":
                engine.decide(store, "bench", name, rank, SIGNATURES, never_tune, left(deadline))
            else:
                poll_waiter(store, name, left(deadline))
            done[rank] = time.monotonic()
        except Exception as exc:
            errors[rank] = repr(exc)

    threads = [threading.Thread(target=waiter, args=(r,), name=f"w{r}", daemon=True) for r in ranks]
    start = time.monotonic()
    for t in threads:
        t.start()
    try:
        opened.wait(left(deadline))
    except threading.BrokenBarrierError:
        aborted.append(True)
        go.set()
        raise BenchError(f"connecting: {sorted(errors.items())[:3]}") from None
    conn.send({"ready_s": time.monotonic() - start})
    message = conn.recv() if conn.poll(left(deadline)) else None
    if message != "go":
        aborted.append(True)
    go.set()
    for t in threads:
        t.join(left(deadline))
    result = {"counts": {r: counts[f"w{r}"] for r in ranks}, "done": done, "errors": errors,
              "late": sum(t.is_alive() for t in threads)}
    keep.clear()
    return result


def verify_task(conn, port, size, ranks, entries, repeat, tag, timeout):
    """Gloo ranks ``ranks`` of a group of ``size``: each times the three kinds of check."""
    deadline = time.monotonic() + timeout
    pairs = [(ChoiceKey("sm90", f"bench.module.kernel_{i % 40}", f"{i},4096,torch.float16"),
              f"BLOCK_M={64 << (i % 3)},BLOCK_N=64,num_warps=4,num_stages=3,num_ctas=1") for i in range(entries)]
    hashed_all = {pair: pair_hash(*pair) for pair in pairs}
    new = {CASES[0]: lambda r: {}, CASES[1]: lambda r: hashed_all, CASES[2]: lambda r: hashed_all if r == 0 else {}}
    results, errors = {}, {}

    def rank_main(rank):
        try:
            tree = Tree(dist, dist.PrefixStore(f"bench/{tag}/", connect(port, left(deadline))), rank, size,
                        max(1.0, left(deadline)))
            together = torch.zeros(1, dtype=torch.int64)
            mine = {}
            for case in CASES:
                tree.all_reduce_max(together, [0, 0])  # each kind of check starts together, untimed
                times = []
                for _ in range(repeat):
                    start = time.perf_counter()
                    differ, arrived, moved = exchange.exchange(tree, list(range(size)), [0] * BUCKETS, new[case](rank))
                    if differ:  # the first rank's verdict, as a check sends it: the distinct pairs
                        pairs_seen = sorted((k, sig) for k, v in arrived.items() for sig in v) if rank == 0 else []
                        verdict = {"pairs": exchange.encode_pairs(pairs_seen)} if rank == 0 else None
                        tree.broadcast_down(verdict, moved)
                    times.append(time.perf_counter() - start)
                mine[case] = {"ms": 1e3 * statistics.median(times), "sent": moved[0], "received": moved[1]}
            tree.all_reduce_max(together, [0, 0])
            results[rank] = mine
        except Exception as exc:
            errors[rank] = repr(exc)

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(left(deadline))
    if errors or len(results) < len(ranks):
        return {"error": f"ranks {sorted(set(ranks) - set(results))} did not finish: {sorted(errors.items())[:3]}"}
    return {"ranks": results}


class Pool:
    """``procs`` worker processes, forked from a server that imported torch (a fork of this process
    would copy the TCPStore server's threads)."""

    def __init__(self, procs, stop_at):
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["__main__"])
        self.conns, self.processes = [], []
        for i in range(procs):
            ours, theirs = context.Pipe()
            process = context.Process(target=worker, args=(theirs, stop_at), name=f"bench-worker-{i}", daemon=True)
            process.start()
            theirs.close()
            self.conns.append(ours)
            self.processes.append(process)

    def ask(self, conn, deadline, what):
        if not conn.poll(left(deadline)):
            raise BenchError(f"{what}: no answer by its deadline")
        reply = conn.recv()
        if isinstance(reply, dict) and "error" in reply:
            raise BenchError(f"{what}: {reply['error']}")
        return reply

    def close(self):
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for process in self.processes:
            process.join(5)
        self.kill()

    def kill(self):
        for process in self.processes:
            if process.is_alive():
                process.kill()


def spread(items, procs):
    """``items`` dealt round-robin over at most ``procs`` workers."""
    count = min(procs, len(items))
    return [items[i::count] for i in range(count)]


# --- consensus ----------------------------------------------------------------------------------

def one_decision(pool, server_port, variant, waiters, tune_s, name, deadline, keep):
    counts, published, done = collections.Counter(), {}, {}
    claimer_store = Counting(connect(server_port, left(deadline)), counts, published)
    keep.append(claimer_store)  # the heartbeat thread caches a clone by id(): ids must not be reused
    claimed, failed = threading.Event(), []

    def tune():
        claimed.set()
        time.sleep(tune_s)
        return SIGNATURES[3]

    def claimer():
        try:
            if variant == "event":
                engine.decide(claimer_store, "bench", name, 0, SIGNATURES, tune, left(deadline))
            else:
                key = f"autotune_guard/poll/{name}"
                claimer_store.compare_set(key + "/claim", "", "claimer")
                tune()
                claimer_store.set(key + "/result", consensus.encode_winner(0, SIGNATURES[3], SIGNATURES))
        except Exception as exc:
            failed.append(exc)
            claimed.set()

    parts = spread(list(range(1, waiters + 1)), len(pool.conns))
    conns = pool.conns[:len(parts)]
    for conn, ranks in zip(conns, parts):
        conn.send(("waiters", {"port": server_port, "variant": variant, "name": name, "ranks": ranks,
                               "timeout": left(deadline)}))
    ready_s = max(pool.ask(conn, deadline, f"{waiters} {variant} waiters connecting")["ready_s"] for conn in conns)
    thread = threading.Thread(target=claimer, name="claimer", daemon=True)
    start = time.monotonic()
    thread.start()
    claimed.wait(left(deadline))
    for conn in conns:
        conn.send("go" if claimed.is_set() and not failed else "stop")
    thread.join(left(deadline))
    replies = [pool.ask(conn, deadline, f"{waiters} {variant} waiters") for conn in conns]
    if failed or thread.is_alive():
        raise BenchError(f"{waiters} {variant}: the claimer failed: {failed or 'still running at the deadline'}")
    for reply in replies:
        if reply["errors"] or reply["late"]:
            raise BenchError(f"{waiters} {variant}: {len(reply['errors'])} waiters failed "
                             f"({sorted(reply['errors'].items())[:2]}), {reply['late']} still waiting")
        done.update(reply["done"])
        counts.update({f"w{r}": c for r, c in reply["counts"].items()})
    end = max(done.values())
    counts.pop("MainThread", None)
    publish = min(published.values())
    per_waiter = sorted(counts[f"w{i}"] for i in range(1, waiters + 1))
    latency = sorted(t - publish for t in done.values())
    total = sum(counts.values())
    return {"requests_p50": statistics.median(per_waiter), "requests_max": per_waiter[-1],
            "requests_per_s": total / (end - start), "latency_p50_ms": 1e3 * statistics.median(latency),
            "latency_p99_ms": 1e3 * latency[min(len(latency) - 1, int(0.99 * len(latency)))],
            "connect_s": ready_s, "procs": len(parts)}


def bench_consensus(args, pool, server, stop_at):
    rows, keep = [], []
    print(f"consensus: one key, claimer tunes for {args.tune_s:g} s, N waiters as threads of up to {args.procs} "
          "processes, one TCPStore on loopback")
    print(f"  {'N':>5} {'waiting':<8} {'req/waiter p50':>14} {'max':>5} {'req/s':>8} {'latency p50':>12} {'p99':>9}"
          f"   {'procs':>5} {'connect':>8}")
    for n in args.waiters:
        for variant in ("poll", "event"):  # interleaved per N
            if left(stop_at) < args.tune_s + 30:
                print(f"  {n:>5} {variant:<8} skipped: past the time bound (--time-limit)", flush=True)
                continue
            deadline = min(stop_at, time.monotonic() + DECISION_S + args.tune_s)
            try:
                r = one_decision(pool, server.port, variant, n, args.tune_s, f"consensus/{variant}-{n}-{time.time_ns()}",
                                 deadline, keep)
            except BenchError as exc:
                print(f"  {n:>5} {variant:<8} failed, the consensus part stops here: {exc}", flush=True)
                return rows, False
            rows.append({"n": n, "waiting": variant, **r})
            print(f"  {n:>5} {variant:<8} {r['requests_p50']:>14.0f} {r['requests_max']:>5} {r['requests_per_s']:>8.0f} "
                  f"{r['latency_p50_ms']:>9.1f} ms {r['latency_p99_ms']:>6.1f} ms   {r['procs']:>5} "
                  f"{r['connect_s']:>6.1f} s", flush=True)
    polls = [r for r in rows if r["waiting"] == "poll"]
    if polls:  # a waiter's own polling rate: where this machine kept up with all of them
        big, rate = 16384, max(r["requests_p50"] for r in polls) / args.tune_s
        print(f"  at {big} ranks: polling ~{rate * big:,.0f} requests/s while a key is tuned "
              f"(per waiter {rate:.0f}/s, whatever N); event-driven "
              f"{4 * big:,} requests per key in all (4 per waiter) plus one beat read per waiting "
              "node per eighth of AUTOTUNE_CONSENSUS_DEAD_AFTER where the claimer is on another machine")
    return rows, True


# --- verification -------------------------------------------------------------------------------

def bench_verify(args, pool, server, stop_at):
    pairs = [(ChoiceKey("sm90", f"bench.module.kernel_{i % 40}", f"{i},4096,torch.float16"),
              f"BLOCK_M={64 << (i % 3)},BLOCK_N=64,num_warps=4,num_stages=3,num_ctas=1") for i in range(args.entries)]
    old_bytes = len(json.dumps(pairs).encode())  # what each rank's new entries weigh as a payload
    rows, ok = [], True
    print(f"\nverification: N gloo ranks (loopback) as threads of up to {args.procs} processes, "
          f"{args.entries} new entries per rank where new")
    print(f"  {'N':>4} {'check':<22} {'sent B':>8} {'received B':>11} {'ms':>8}   before: sent/received B")
    for n in args.verify_ranks:
        if left(stop_at) < 30:
            print(f"  {n:>4} skipped: past the time bound (--time-limit)", flush=True)
            continue
        deadline = min(stop_at, time.monotonic() + DECISION_S)
        parts = spread(list(range(n)), len(pool.conns))
        conns, tag = pool.conns[:len(parts)], f"{n}-{time.time_ns()}"
        for conn, ranks in zip(conns, parts):
            conn.send(("verify", {"port": server.port, "size": n, "ranks": ranks, "entries": args.entries,
                                  "repeat": args.repeat, "tag": tag, "timeout": left(deadline)}))
        by_rank = {}
        try:
            for conn in conns:
                by_rank.update(pool.ask(conn, deadline, f"verification, {n} ranks")["ranks"])
        except BenchError as exc:
            print(f"  {n:>4} failed, the verification part stops here: {exc}", flush=True)
            ok = False
            break
        print(f"  {n:>4} ranks as {len(parts)} processes x {max(len(p) for p in parts)} threads", flush=True)
        for case in CASES:
            ms = max(by_rank[r][case]["ms"] for r in range(n))
            sent = max(by_rank[r][case]["sent"] for r in range(n))
            received = max(by_rank[r][case]["received"] for r in range(1, n))  # rank 0: below
            before = ("8 / 8" if case == CASES[0] else
                      f"{old_bytes} / {old_bytes * n}" if case == CASES[1] else f"{old_bytes} / {old_bytes + 2 * n}")
            rows.append({"n": n, "check": case, "sent": sent, "received": received, "ms": ms,
                         "procs": len(parts), "first_rank_received": by_rank[0][case]["received"]})
            print(f"  {n:>4} {case:<22} {sent:>8} {received:>11} {ms:>8.2f}   {before}", flush=True)
    if len({r["n"] for r in rows}) < 2:
        return rows, ok
    big = 16384
    print(f"  extrapolated to {big} ranks (time: least squares t = a + b*N over the measured N):")
    for case in CASES:
        points = [(r["n"], r["ms"]) for r in rows if r["check"] == case]
        mean_n = statistics.mean(p[0] for p in points)
        mean_t = statistics.mean(p[1] for p in points)
        slope = sum((x - mean_n) * (y - mean_t) for x, y in points) / max(1e-9, sum((x - mean_n) ** 2 for x, _ in points))
        at_big = mean_t + slope * (big - mean_n)
        last = [r for r in rows if r["check"] == case][-1]
        received = last["received"]
        if case == CASES[2]:  # the first rank alone receives 8 bytes per member more
            received = f"{received:,} (first rank: + 8 x {big})"
        print(f"    {case:<22} sent {last['sent']} B, received {received} B; ~{at_big:,.0f} ms "
              f"(slope {slope:.3f} ms per rank)")
    print(f"    before: a check with new entries received every rank's entries: {old_bytes} x {big} = "
          f"{old_bytes * big / 2**20:,.0f} MiB per rank")
    return rows, ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    parser.add_argument("--waiters", type=ints, default=[64, 128, 256, 512, 1024])
    parser.add_argument("--tune-s", type=float, default=2.0)
    parser.add_argument("--verify-ranks", type=ints, default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--entries", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--procs", type=int, default=16, help="worker processes hosting the ranks (default 16)")
    parser.add_argument("--time-limit", type=float, default=540, help="seconds; later rows are skipped (default 540)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--schemes-ranks", type=ints, default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--fanin-waiters", type=ints, default=[64, 128, 256, 512, 1024])
    parser.add_argument("--batch-keys", type=int, default=16, help="keys of the batch rows (0: none; default 16)")
    parser.add_argument("--store-ranks", type=ints, default=[],
                        help="simulated ranks of the table-store rows, e.g. 64,256,1024 (default none: the part "
                             "needs redis-server and the redis client)")
    parser.add_argument("--store-keys", type=int, default=16, help="keys the store rows' job reads or adds (default 16)")
    parser.add_argument("--store-filler", type=int, default=500,
                        help="entries of other kernels in the store rows' table (default 500)")
    parser.add_argument("--first-launch-reps", type=int, default=20,
                        help="repetitions of the pinned first-launch figures (0: none; default 20)")
    args = parser.parse_args()
    if max(args.waiters, default=0) > MAX_WAITERS or max(args.verify_ranks, default=0) > MAX_RANKS:
        parser.error(f"bounded: at most {MAX_WAITERS} waiters and {MAX_RANKS} gloo ranks")
    if max(args.store_ranks, default=0) > MAX_WAITERS or not 1 <= args.store_keys <= 10000 \
            or not 0 <= args.store_filler <= 100000 or not 0 <= args.first_launch_reps <= 200:
        parser.error(f"bounded: at most {MAX_WAITERS} store ranks, 10000 store keys, 100000 filler entries, "
                     "200 first-launch repetitions")
    if not 1 <= args.procs <= MAX_PROCS or min(args.waiters + args.verify_ranks, default=1) < 1:
        parser.error(f"--procs from 1 to {MAX_PROCS}; counts of at least 1")
    torch.set_num_threads(1)
    started = time.monotonic()
    stop_at = started + args.time_limit
    server = dist.TCPStore(HOST, 0, 1, True, timedelta(seconds=60), wait_for_workers=False)
    pool = Pool(args.procs, stop_at + 30)

    def hard_stop():
        print(f"time bound: {args.time_limit + 30:g} s passed; stopping the workers and the run", flush=True)
        pool.kill()
        os._exit(3)

    watchdog = threading.Timer(args.time_limit + 30, hard_stop)
    watchdog.daemon = True
    watchdog.start()
    results, ok = {"consensus": [], "verify": [], "schemes": [], "fanin": [], "batch": [], "store": {}}, True
    try:
        if args.schemes_ranks:
            results["schemes"], ok = scale_parts.bench_schemes(args, pool, server, stop_at, spread, left, BenchError)
        if args.fanin_waiters:
            results["fanin"], fanin_ok = scale_parts.bench_fanin(args, server, stop_at, connect, left)
            ok = ok and fanin_ok
        if args.fanin_waiters and args.batch_keys:
            results["batch"], _ = scale_parts.bench_batch(args, server, stop_at, connect, left)
        if args.waiters:
            results["consensus"], ok = bench_consensus(args, pool, server, stop_at)
            if not ok:  # its workers may still be busy with the failed decision: start afresh
                pool.kill()
                pool = Pool(args.procs, stop_at + 30)
        if args.verify_ranks:
            results["verify"], verified = bench_verify(args, pool, server, stop_at)
            ok = ok and verified
        if args.store_ranks:
            results["store"], stored = store_parts.bench_store(args, stop_at, left)
            ok = ok and stored
    finally:
        watchdog.cancel()
        pool.close()
    print(f"\ntotal {time.monotonic() - started:.0f} s")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
