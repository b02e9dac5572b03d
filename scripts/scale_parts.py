"""bench_scale.py's parts for issue 22: verification's full mesh against its tree, and consensus's
Store requests per key with and without node-level fan-in.  Imported by bench_scale.py, which
runs them (``--schemes-ranks``, ``--fanin-waiters``); not run on its own.

Verification, per N: N gloo ranks (threads of the worker processes, loopback) run, per scheme,
the first check (the connections made, then one int reduced) and the steady check (one int
again, the median of --repeat).  "mesh" is what the guard did before: one ProcessGroupGloo over
the group (N-1 connections per rank) and one all_reduce; "tree" is ``adapters.distributed.tree``.
Connections per rank: the mesh's N-1; the tree's edges of the busiest rank.

Consensus, per N waiters in nodes of 8: one key, one claimer (tuning --tune-s), every waiter a
thread with its own TCPStore client; with fan-in each node shares a real FileStore
(``adapters.distributed.node.FannedStore``).  Counted: requests on the job's TCPStore per node.
Batches (``--batch-keys K``): the claimer decides K keys before the waiters reach the first (it is
ahead, as rank 0 of an SPMD job often is), then every waiter decides the same K keys in order, with
fan-in; "one by one" is the same run with batches off (``deciding.batch.AHEAD_S = 0``).
"""

import collections
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from autotune_guard.adapters.distributed.node import FannedStore
from autotune_guard.adapters.distributed.tree import Tree, depth
from autotune_guard.deciding import batch as consensus_batch, consensus

NODE = 8


def schemes_task(conn, port, size, ranks, repeat, tag, timeout, scheme, connect, left):
    """Ranks ``ranks`` of a group of ``size``: first and steady check of one scheme."""
    deadline = time.monotonic() + timeout
    results, errors = {}, {}

    def rank_main(rank):
        try:
            store = dist.PrefixStore(f"bench/{tag}/", connect(port, left(deadline)))
            one = torch.tensor([rank], dtype=torch.int64)
            start = time.perf_counter()
            if scheme == "mesh":
                options = dist.ProcessGroupGloo._Options()
                options._devices = [dist.ProcessGroupGloo.create_device(interface="lo")]
                options._timeout = timedelta(seconds=max(1.0, left(deadline)))
                group = dist.ProcessGroupGloo(store, rank, size, options)
                check = lambda: group.allreduce([one]).wait()  # noqa: E731 (SUM or MAX: one int either way)
            else:
                tree = Tree(dist, store, rank, size, max(1.0, left(deadline)))
                check = lambda: tree.all_reduce_max(one, [0, 0])  # noqa: E731
            check()
            first = time.perf_counter() - start
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                check()
                times.append(time.perf_counter() - start)
            results[rank] = {"first_ms": 1e3 * first, "steady_ms": 1e3 * statistics.median(times),
                             "connections": size - 1 if scheme == "mesh" else len(tree.edges)}
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


def bench_schemes(args, pool, server, stop_at, spread, left, BenchError):
    rows = []
    print(f"\nverification schemes: N gloo ranks (loopback) as threads of up to {args.procs} processes on "
          f"{os.cpu_count()} cores; first check (connect + one int) and steady check (one int), slowest rank")
    print(f"  {'N':>4} {'scheme':<6} {'first ms':>9} {'steady ms':>10} {'conn/rank':>10} {'depth':>6}")
    for n in args.schemes_ranks:
        for scheme in ("mesh", "tree"):
            if left(stop_at) < 30:
                print(f"  {n:>4} {scheme:<6} skipped: past the time bound (--time-limit)", flush=True)
                continue
            deadline = min(stop_at, time.monotonic() + 120)
            parts = spread(list(range(n)), len(pool.conns))
            conns, tag = pool.conns[:len(parts)], f"{scheme}-{n}-{time.time_ns()}"
            for conn, ranks in zip(conns, parts):
                conn.send(("schemes", {"port": server.port, "size": n, "ranks": ranks, "repeat": args.repeat,
                                       "tag": tag, "timeout": left(deadline), "scheme": scheme}))
            by_rank = {}
            try:
                for conn in conns:
                    by_rank.update(pool.ask(conn, deadline, f"{scheme}, {n} ranks")["ranks"])
            except BenchError as exc:
                print(f"  {n:>4} {scheme:<6} failed, this part stops here: {exc}", flush=True)
                return rows, False
            row = {"n": n, "scheme": scheme, "first_ms": max(r["first_ms"] for r in by_rank.values()),
                   "steady_ms": max(r["steady_ms"] for r in by_rank.values()),
                   "connections": max(r["connections"] for r in by_rank.values())}
            rows.append(row)
            print(f"  {n:>4} {scheme:<6} {row['first_ms']:>9.1f} {row['steady_ms']:>10.2f} {row['connections']:>10} "
                  f"{depth(n) if scheme == 'tree' else '-':>6}", flush=True)
    extrapolate(rows)
    return rows, True


def _fit(points):
    """Least squares y = a + b x."""
    mx, my = statistics.mean(p[0] for p in points), statistics.mean(p[1] for p in points)
    b = sum((x - mx) * (y - my) for x, y in points) / max(1e-12, sum((x - mx) ** 2 for x, _ in points))
    return my - b * mx, b


def extrapolate(rows):
    """The model: the mesh's steady check grows with N (gloo's ring: 2(N-1) steps), its first check
    with the N-1 connections each rank makes; the tree's steady check with its 2*ceil(log2 N) hops,
    its first check with its depth (edges are made level by level). Fitted to the measured rows."""
    if len({r["n"] for r in rows}) < 3:
        return
    print("  EXTRAPOLATION (a least-squares model of the rows above, not a measurement): mesh steady and first "
          "= a + b*N; tree steady and first = a + b*2*ceil(log2 N); same per-hop cost as measured here "
          "(ranks share this machine's cores, so per-hop figures are an upper bound for loopback); nodes of 8 "
          "change neither (a hop inside a node is not cheaper here)")
    for scheme, x_of in (("mesh", lambda n: n), ("tree", lambda n: 2 * depth(n))):
        mine = [r for r in rows if r["scheme"] == scheme]
        if len(mine) < 3:
            continue
        for what in ("steady_ms", "first_ms"):
            a, b = _fit([(x_of(r["n"]), r[what]) for r in mine])
            at = {big: a + b * x_of(big) for big in (1024, 16384)}
            print(f"    {scheme:<5} {what[:-3]:<7} per unit {b:8.3f} ms: 1,024 ranks ~{at[1024]:9.1f} ms, "
                  f"16,384 ranks ~{at[16384]:10.1f} ms; connections per rank "
                  f"{'1,023 / 16,383' if scheme == 'mesh' else f'{depth(1024) + 1} / {depth(16384) + 1} at most'}")


# --- consensus fan-in ---------------------------------------------------------------------------

class CountingStore:
    """Counts every request on the job's Store by the waiter thread making it (not ``clone``)."""

    def __init__(self, store, counts):
        self.store, self.counts = store, counts

    def __getattr__(self, name):
        method = getattr(self.store, name)
        if name == "clone":
            return lambda: CountingStore(method(), self.counts)

        def call(*args):
            self.counts[threading.current_thread().name] += 1
            return method(*args)
        return call


def one_fanin(port, waiters, fanned, tune_s, timeout, connect):
    """One key, ``waiters`` waiters in nodes of NODE (+ the claimer, rank 0, on node 0): the job's
    Store requests by waiter and by node."""
    name = f"fanin-{fanned}-{waiters}-{time.time_ns()}"
    counts, errors, folder = collections.Counter(), [], tempfile.mkdtemp(prefix="bench-fanin-")
    claimed = threading.Event()

    def tune():
        claimed.set()
        time.sleep(tune_s)
        return consensus_sigs[1]

    consensus_sigs = ["BLOCK=32", "BLOCK=64", "BLOCK=128"]
    nodes = {}

    def store_for(rank):
        job = CountingStore(connect(port, timeout), counts)
        if not fanned:
            return job
        node = rank // NODE
        path = os.path.join(folder, f"node{node}")
        return FannedStore(job, dist.FileStore(path, -1), path)

    def rank_main(rank):
        try:
            store = nodes[rank]
            if rank:
                claimed.wait(timeout)
            consensus.decide(store, "bench", name, rank, consensus_sigs, tune if rank == 0 else _never, timeout)
        except Exception as exc:
            errors.append(repr(exc))

    for rank in range(waiters + 1):
        nodes[rank] = store_for(rank)
    threads = [threading.Thread(target=rank_main, args=(r,), name=f"r{r}", daemon=True) for r in range(waiters + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if errors or any(t.is_alive() for t in threads):
        raise RuntimeError(f"fan-in {waiters}: {errors[:2]}")
    per_node = collections.Counter()
    for rank in range(1, waiters + 1):
        per_node[rank // NODE] += counts[f"r{rank}"]
    return {"waiters": waiters, "fanned": fanned, "job_requests": sum(counts[f"r{r}"] for r in range(1, waiters + 1)),
            "nodes": len(per_node), "per_node_max": max(per_node.values()),
            "per_node_p50": statistics.median(per_node.values()), "claimer": counts["r0"]}


def one_batch(port, waiters, keys, batched, timeout, connect):
    """``keys`` keys the claimer decided already, then decided by ``waiters`` waiters in nodes of
    NODE with fan-in, in order: the job's Store requests per node and key."""
    tag = f"batch-{batched}-{waiters}-{time.time_ns()}"
    names = [f"{tag}-{k}" for k in range(keys)]
    sigs, counts, errors = ["BLOCK=32", "BLOCK=64", "BLOCK=128"], collections.Counter(), []
    folder = tempfile.mkdtemp(prefix="bench-batch-")
    claimer = CountingStore(connect(port, timeout), counts)
    for name in names:
        consensus.decide(claimer, "bench", name, 0, sigs, lambda: sigs[1], timeout)
    stores = {rank: FannedStore(CountingStore(connect(port, timeout), counts),
                                dist.FileStore(os.path.join(folder, f"node{rank // NODE}"), -1), folder)
              for rank in range(1, waiters + 1)}
    saved = consensus_batch.AHEAD_S
    if not batched:
        consensus_batch.AHEAD_S = 0  # never ahead: every key asked for one by one, as before batches

    def rank_main(rank):
        try:
            for name in names:
                consensus.decide(stores[rank], "bench", name, rank, sigs, _never, timeout)
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=rank_main, args=(r,), name=f"r{r}", daemon=True) for r in stores]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
    finally:
        consensus_batch.AHEAD_S = saved
    if errors or any(t.is_alive() for t in threads):
        raise RuntimeError(f"batch {waiters}: {errors[:2]}")
    per_node = collections.Counter()
    for rank in stores:
        per_node[rank // NODE] += counts[f"r{rank}"]
    per_key = [n / keys for n in per_node.values()]
    return {"waiters": waiters, "keys": keys, "batched": batched, "per_node_key_p50": statistics.median(per_key),
            "per_node_key_max": max(per_key), "nodes": len(per_node)}


def bench_batch(args, server, stop_at, connect, left):
    rows = []
    print(f"\nconsensus batches: {args.batch_keys} keys the claimer decided already, then N waiters in nodes of "
          f"{NODE} (fan-in) decide them in order; job's Store requests per node and key")
    print(f"  {'N':>5} {'scheme':<12} {'per node and key p50':>21} {'max':>6} {'nodes':>6}")
    for n in args.fanin_waiters:
        for batched in (False, True):
            if left(stop_at) < 30:
                print(f"  {n:>5} skipped: past the time bound (--time-limit)", flush=True)
                continue
            r = one_batch(server.port, n, args.batch_keys, batched, min(120, left(stop_at)), connect)
            rows.append(r)
            print(f"  {n:>5} {'batches' if batched else 'one by one':<12} {r['per_node_key_p50']:>21.2f} "
                  f"{r['per_node_key_max']:>6.2f} {r['nodes']:>6}", flush=True)
    return rows, True


def _never():
    raise RuntimeError("a waiter claimed: the claimer must claim first")


def bench_fanin(args, server, stop_at, connect, left):
    rows = []
    print(f"\nconsensus fan-in: one key, the claimer tunes {args.tune_s:g} s, N waiters in nodes of {NODE} "
          "(threads, own TCPStore client each; a FileStore per node); requests on the job's Store by waiters")
    print(f"  {'N':>5} {'scheme':<10} {'requests':>9} {'per node p50':>13} {'max':>5} {'nodes':>6}")
    for n in args.fanin_waiters:
        for fanned in (False, True):
            if left(stop_at) < args.tune_s + 30:
                print(f"  {n:>5} skipped: past the time bound (--time-limit)", flush=True)
                continue
            r = one_fanin(server.port, n, fanned, args.tune_s, min(120, left(stop_at)), connect)
            rows.append(r)
            print(f"  {n:>5} {'node fan-in' if fanned else 'today':<10} {r['job_requests']:>9} {r['per_node_p50']:>13.0f} "
                  f"{r['per_node_max']:>5} {r['nodes']:>6}", flush=True)
    return rows, True
