"""bench_scale.py's part for issue 36: table-store (Redis) requests per node and key at N simulated
ranks against the same job on a table directory, and the latency a pinned first launch adds.
Imported by bench_scale.py (``--store-ranks``, ``--store-keys``, ``--store-filler``,
``--first-launch-reps``); the first-launch child is this file run as a script by it.

A real ``redis-server`` (Debian's) is started on a free loopback port in a temporary directory,
and stopped after.  Both jobs read one table for arch ``sm90``: K keys of one kernel, plus
--store-filler entries of other kernels (a table holds more than one job needs).

Requests, per N ranks in nodes of 8: each rank is one task of a pool of 32 threads and does what
one process of a job does with the table, through the package's own functions and with state of
its own (a fresh ``adapters.redis_tables.Stores``, so a client and connection of its own):

* pinned: the install's ping (``redis_tables.configure``), then the first launch's read
  (``core.tables.load_tables``: once per process and arch, as ``Guard.table_entry`` calls it)
  and the K keys looked up in what it read;
* consensus, growing the table: the same read (every key a miss), then rank 0, having tuned the K
  keys for the job, adds them: one ``Stores.add_kernel`` per key (each key's tuning takes longer
  than the writer's 0.2 s wake-up, so each flush holds one key: the upper bound).

The same two jobs through the node's snapshot (``core.store_snapshot``, as under torchrun): each
rank's ``Stores`` is given the job and its node's directory (``Stores.snapshot_node``: one
directory per node of 8, one job id per job), so the first rank of a node to read takes the lock,
reads the store and writes the snapshot, and the node's other ranks read the file (counted:
snapshot reads). Threads stand for processes here: ``flock`` locks an open file, so separate opens
in threads exclude each other as processes do.

The same two jobs on a table directory: the read is ``load_tables`` over the directory (counted:
``read_document`` calls on the table file, i.e. opens and whole-file reads), the growth
``evidence.table_growth._grow`` per key (lock, re-read, rename).  Requests to the store are
counted by rank (a wrapper around ``redis_tables.Store.call``), and checked against the server's
own ``INFO commandstats`` deltas (which also count the client's connection handshake).

First launch: a child process (TRITON_INTERPRET=1, the kernel's launch stubbed as
bench_launch.py does) installs pinned with the table in the store, in a file, or none
(``AUTOTUNE_ON_MISS=min_cost``), rotating, --first-launch-reps times each, and times the first
launch of the decided key after each install (a new policy: its tables are read anew), and a
second launch.  Figures: medians; "added" is against no table.  Through a snapshot (the
process's TORCHELASTIC_RUN_ID set): "reads the store" is a run id new at each install (this process
takes the lock, reads the store, writes the snapshot), "reads the file" one whose snapshot was
written before (another process of the node read the store).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

NODE = 8
ARCH = "sm90"
KERNEL = "bench.module.store_kernel"
THREADS = 32
SNAPSHOT_READS_STORE = ", snapshot: reads the store"  # the first-launch variants through a snapshot
SNAPSHOT_READS_FILE = ", snapshot: reads the file"


class RedisServer:
    """Debian's redis-server on 127.0.0.1, in a temporary directory of its own."""

    def __init__(self):
        self.directory = tempfile.mkdtemp(prefix="bench-redis-")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(self.port),
                                      "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                      "--dir", self.directory, "--maxclients", "4096"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        for _ in range(200):
            try:
                self.client.ping()
                return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def url(self, prefix):
        return f"redis://127.0.0.1:{self.port}/0?prefix={prefix}"

    def commands(self):
        """(calls per command, bytes sent by the server so far)."""
        stats = self.client.info("commandstats")
        calls = {name.removeprefix("cmdstat_"): value["calls"] for name, value in stats.items()}
        return calls, self.client.info("stats")["total_net_output_bytes"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)


def config(i):
    return {"kwargs": {"BLOCK": 64 << (i % 3)}, "num_warps": 4, "num_stages": 3}


def table_document(keys, filler):
    kernels = {KERNEL: {f"{1024 * (k + 1)},torch.float16": config(k) for k in range(keys)}}
    for i in range(filler):
        kernels.setdefault(f"bench.other.kernel_{i % 50}", {})[f"{i},torch.float16"] = config(i)
    return {"format": "autotune_guard.table/1", "arch": ARCH, "source": {"by": "bench_scale"}, "kernels": kernels}


class Counts:
    """Requests by simulated rank: the thread running a rank says which it is."""

    def __init__(self):
        self.lock, self.by_rank, self.local = threading.Lock(), collections.Counter(), threading.local()

    def add(self, what):
        rank = getattr(self.local, "rank", None)
        if rank is not None:
            with self.lock:
                self.by_rank[rank, what] += 1


SCRIPT_CALLS = ("hget", "hscan", "hsetnx", "hset")  # run by the server inside EVAL, not requests


def patch_counting(counts):
    """Count each request a Store makes (ping, read, add) and each open of a table file (read,
    growth's lock, re-read and write), by rank; restored by the function returned."""
    from autotune_guard.adapters import redis_tables
    from autotune_guard.core import tables
    from autotune_guard.evidence import table_growth

    from autotune_guard.core import store_snapshot

    saved = [(redis_tables.Store, "call", redis_tables.Store.call), (tables, "read_document", tables.read_document),
             (store_snapshot, "_load", store_snapshot._load),
             (table_growth, "read_document", table_growth.read_document), (table_growth, "_locked", table_growth._locked),
             (table_growth.jsonfile, "atomic_write_json", table_growth.jsonfile.atomic_write_json)]
    store_call, read_document, locked, write = (redis_tables.Store.call, tables.read_document, table_growth._locked,
                                                table_growth.jsonfile.atomic_write_json)

    def call(self, what, *args):
        if what == "eval":
            counts.add("store read" if args[0] == redis_tables.client._READ else "store add")
        else:
            counts.add(f"store {what}")
        return store_call(self, what, *args)

    def counted(name, function):
        def wrapped(*args, **kwargs):
            counts.add(name)
            return function(*args, **kwargs)
        return wrapped

    def load(path, expected):
        found = snapshot_load(path, expected)
        if found is not None:
            counts.add("snapshot read")
        return found

    snapshot_load = store_snapshot._load
    redis_tables.Store.call = call
    store_snapshot._load = load
    tables.read_document = counted("file read", read_document)
    table_growth.read_document = counted("file re-read", read_document)
    table_growth._locked = counted("file lock", locked)
    table_growth.jsonfile.atomic_write_json = counted("file write", write)
    return lambda: [setattr(owner, name, value) for owner, name, value in saved]


def one_job(where, job, n, keys, server, prefix, directory, counts):
    """One job of ``n`` ranks against the store (``where`` "store"), through the node's snapshot of
    it ("snapshot") or on the directory: its row
    (reads and all requests per node and key, p50 and max; reads per rank, max; the server's
    commandstats and bytes sent over the job; seconds)."""
    from autotune_guard.adapters import redis_tables
    from autotune_guard.core.tables import load_tables, table_entry
    from autotune_guard.core.store_snapshot import SUBDIRECTORY, Node
    from autotune_guard.evidence import table_growth

    url = server.url(prefix)
    path = [directory] if where == "directory" else [url]
    nodes = tempfile.mkdtemp(prefix="bench-nodes-")  # each node's own <tmp>/autotune_guard-<uid>
    job_id = f"bench-{where}-{job}-{n}-{prefix}/0"
    versions = {"triton": None, "torch": None}
    wanted = [f"{1024 * (k + 1)},torch.float16" for k in range(keys)]
    errors = []

    def rank_main(rank):
        counts.local.rank = rank
        stores = redis_tables.Stores() if where != "directory" else None
        if where == "snapshot":
            stores.snapshot_node = Node(job_id, os.path.join(nodes, f"node{rank // NODE}", SUBDIRECTORY))
        try:
            if stores is not None:
                stores.store(url).ping()  # the install's check (redis_tables.configure)
            tables, warnings = load_tables(path, ARCH, versions, stores)
            found = [table_entry(tables, KERNEL, key) for key in wanted]
            if job == "pinned" and (warnings or None in found):
                raise RuntimeError(f"rank {rank}: {warnings[:2]} {found.count(None)} keys missing")
            if job == "consensus" and rank == 0:  # the claimer adds the K winners it tuned for the job
                for k, key in enumerate(wanted):
                    desc = {"kwargs": {"BLOCK": 64 << (k % 3)}, "num_warps": 4, "num_stages": 3, "num_ctas": 1}
                    if where != "directory":
                        answer = stores.add_kernel(url, ARCH, KERNEL, None,
                                                   {key: (desc, {"run_id": "bench", "rank": 0})})
                        if answer is None or answer[0] != "ok":
                            raise RuntimeError(f"add: {answer}")
                    elif not table_growth._grow(directory, ARCH, {KERNEL: {key: desc}}):
                        raise RuntimeError("the table lock was not had")
        except Exception as exc:
            errors.append(f"rank {rank}: {exc!r}")
        finally:
            counts.local.rank = None
            if stores is not None:
                for store in stores.stores.values():
                    store.client.close()

    before = server.commands()
    start = time.monotonic()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(rank_main, range(n)))
    seconds = time.monotonic() - start
    after = server.commands()
    shutil.rmtree(nodes, ignore_errors=True)
    if errors:
        raise RuntimeError(f"{where} {job} {n}: {errors[:2]}")
    delta = {name: calls - before[0].get(name, 0) for name, calls in after[0].items() if calls != before[0].get(name, 0)}
    per_node, read_node = collections.Counter(), collections.Counter()
    reads, file_reads = collections.Counter(), collections.Counter()
    kinds = collections.Counter()
    for (rank, what), count in counts.by_rank.items():
        per_node[rank // NODE] += count
        if what in ("store read", "file read"):
            read_node[rank // NODE] += count
        kinds[what] += count
        if what in ("store read", "file read"):
            reads[rank] += count
        if what == "snapshot read":
            file_reads[rank // NODE] += count
    counts.by_rank.clear()
    per_key = sorted(c / keys for c in per_node.values())
    read_key = sorted(c / keys for c in read_node.values())
    return {"where": where, "job": job, "n": n, "keys": keys, "nodes": n // NODE,
            "reads_per_node_key_p50": statistics.median(read_key), "reads_per_node_key_max": read_key[-1],
            "per_node_key_p50": statistics.median(per_key), "per_node_key_max": per_key[-1],
            "per_node_p50": statistics.median(per_node.values()), "reads_per_rank_max": max(reads.values()),
            "reads_per_node_max": max(read_node.values()),
            "snapshot_reads_per_node_p50": statistics.median([file_reads[node] for node in per_node]),
            "requests": dict(kinds), "server_commands": delta, "server_bytes_out": after[1] - before[1],
            "seconds": seconds}


def bench_store(args, stop_at, left):
    """The requests part: rows for each N, job and where; then the first-launch part."""
    try:
        import redis  # noqa: F401
    except ImportError:
        print("\ntable store: skipped: the redis client is not installed (pip install redis)")
        return {"requests": [], "first_launch": []}, True
    if not shutil.which("redis-server"):
        print("\ntable store: skipped: no redis-server (apt-get install redis-server)")
        return {"requests": [], "first_launch": []}, True
    server = RedisServer()
    counts = Counts()
    restore = patch_counting(counts)
    rows, ok = [], True
    try:
        print(f"\ntable store vs table directory: a real redis-server on 127.0.0.1:{server.port}; N ranks in nodes "
              f"of {NODE} (each a task of {THREADS} threads, with a store client of its own), a table of "
              f"{args.store_keys} keys of one kernel + {args.store_filler} other entries; requests by the ranks")
        print(f"  {'':>5} {'':<10} {'':<10} {'reads per node and key':>23} {'requests per node and key':>26} "
              f"{'reads':>6} {'server':>7} {'KiB':>7}")
        print(f"  {'N':>5} {'job':<10} {'table in':<10} {'p50':>11} {'max':>11} {'p50':>12} {'max':>13} "
              f"{'/rank':>6} {'round':>7} {'sent':>7} {'s':>5}")
        for n in args.store_ranks:
            for job in ("pinned", "consensus"):
                pair = {}
                for where in ("store", "snapshot", "directory"):
                    if left(stop_at) < 20:
                        print(f"  {n:>5} {job:<10} {where:<10} skipped: past the time bound (--time-limit)", flush=True)
                        continue
                    prefix = f"bench{n}{job}{time.time_ns()}:"
                    directory = tempfile.mkdtemp(prefix="bench-tables-")
                    document = table_document(args.store_keys, args.store_filler)
                    if job == "consensus":  # the job grows the table: its K keys are not there yet
                        del document["kernels"][KERNEL]
                    from autotune_guard.adapters import redis_tables
                    from autotune_guard.core import jsonfile

                    jsonfile.atomic_write_json(os.path.join(directory, f"{ARCH}.json"), document)
                    setup = redis_tables.Store(server.url(prefix))
                    setup.put_table(document, {"run_id": "bench-setup"})
                    setup.client.close()
                    try:
                        r = one_job(where, job, n, args.store_keys, server, prefix, directory, counts)
                    except Exception as exc:
                        print(f"  {n:>5} {job:<10} {where:<10} failed, this part stops here: {exc}", flush=True)
                        return {"requests": rows, "first_launch": []}, False
                    finally:
                        shutil.rmtree(directory, ignore_errors=True)
                    rows.append(r)
                    pair[where] = r
                    trips = sum(v for k, v in r["server_commands"].items() if k not in SCRIPT_CALLS + ("info",))
                    r["server_round_trips"] = trips if where != "directory" else None
                    print(f"  {n:>5} {job:<10} {where:<10} {r['reads_per_node_key_p50']:>11.3f} "
                          f"{r['reads_per_node_key_max']:>11.3f} {r['per_node_key_p50']:>12.3f} {r['per_node_key_max']:>13.3f} "
                          f"{r['reads_per_rank_max']:>6} {trips if where != 'directory' else '-':>7} "
                          f"{r['server_bytes_out'] / 1024 if where != 'directory' else 0:>7.0f} {r['seconds']:>5.1f}",
                          flush=True)
                print_pairs(pair)
        print_summary(rows, args.store_keys)
        first = first_launch(args, server, left(stop_at)) if args.first_launch_reps else []
    finally:
        restore()
        server.stop()
    return {"requests": rows, "first_launch": first}, ok


def print_pairs(pair):
    """Each way of reading against the table directory, and what its requests were."""
    d = pair.get("directory")
    for where, label in (("store", "store/dir"), ("snapshot", "snap/dir")):
        s = pair.get(where)
        if s is None or d is None:
            continue
        ratio = lambda what: s[what] / d[what] if d[what] else float("nan")  # noqa: E731
        print(f"  {'':>5} {'':<10} {label:<10} {ratio('reads_per_node_key_p50'):>11.2f} "
              f"{ratio('reads_per_node_key_max'):>11.2f} {ratio('per_node_key_p50'):>12.2f} "
              f"{ratio('per_node_key_max'):>13.2f}", flush=True)
    for where, s in pair.items():
        if where != "directory":
            print(f"  {'':>5} {'':<10} {'':<10} {where}: "
                  f"{', '.join(f'{k} {v}' for k, v in sorted(s['requests'].items()))}; server (INFO "
                  f"commandstats): {', '.join(f'{k} {v}' for k, v in sorted(s['server_commands'].items()) if k != 'info')}",
                  flush=True)
    if d is not None:
        print(f"  {'':>5} {'':<10} {'':<10} directory: {', '.join(f'{k} {v}' for k, v in sorted(d['requests'].items()))}",
              flush=True)


def print_summary(rows, keys):
    store = [r for r in rows if r["where"] == "store"]
    snapshot = [r for r in rows if r["where"] == "snapshot"]
    if store:
        print(f"  store, each rank reading it: at most {max(r['reads_per_rank_max'] for r in store)} read per rank, "
              f"{max(r['reads_per_node_max'] for r in store)} per node: per node and key {NODE}/K = "
              f"{NODE / keys:.2f} at K={keys}")
    if snapshot:
        print(f"  store through the node's snapshot (core.store_snapshot): at most "
              f"{max(r['reads_per_node_max'] for r in snapshot)} store read per node (per node and key 1/K = "
              f"{1 / keys:.3f} at K={keys}), the node's other ranks reading the file "
              f"(p50 {statistics.median(r['snapshot_reads_per_node_p50'] for r in snapshot):.0f} file reads per node); "
              "requests add the install's ping per rank and, in consensus, the claimer's adds (one per key at most)")


def first_launch(args, server, time_left):
    """The child process's figures, printed: tables of one entry, and of --store-filler more."""
    if time_left < 60:
        print("\nfirst launch: skipped: past the time bound (--time-limit)")
        return []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "TORCHELASTIC_", "XDG_RUNTIME"))}
    env["TRITON_INTERPRET"] = "1"
    env["TMPDIR"] = tempfile.mkdtemp(prefix="bench-first-tmp-")  # the child's snapshots, removed after
    sizes = sorted({0, args.store_filler})
    command = [sys.executable, os.path.abspath(__file__), "--first-launch-child", str(server.port),
               str(args.first_launch_reps), ",".join(map(str, sizes))]
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=max(30, time_left - 20))
    finally:
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)
    if proc.returncode:
        print(f"\nfirst launch: failed: {proc.stderr[-2000:]}")
        return []
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    base = statistics.median(figures["none"]["first_ms"])
    print(f"\nfirst launch of a decided key, pinned (one process, TRITON_INTERPRET=1, the launch stubbed; "
          f"{args.first_launch_reps} repetitions, each installs anew, variants rotating; the table: the key's entry "
          "+ E entries of other kernels; medians)")
    print(f"  {'table in':<38} {'install ms':>10} {'first launch ms':>16} {'added vs none':>14} {'second launch ms':>17} "
          f"{'store reads 1st/2nd':>20}")
    rows = []
    for name in ["none"] + [f"{where} E={size}{way}" for size in sizes for where, way in
                            (("file", ""), ("store", ""), ("store", SNAPSHOT_READS_STORE), ("store", SNAPSHOT_READS_FILE))]:
        f = figures[name]
        first_ms = statistics.median(f["first_ms"])
        row = {"table": name, "install_ms": statistics.median(f["install_ms"]), "first_ms": first_ms,
               "added_ms": first_ms - base, "second_ms": statistics.median(f["second_ms"]),
               "store_reads_first": f.get("store_reads_first"), "store_reads_second": f.get("store_reads_second")}
        rows.append(row)
        reads = (f"{row['store_reads_first']:.0f} / {row['store_reads_second']:.0f}" if name.startswith("store") else "-")
        print(f"  {name:<38} {row['install_ms']:>10.2f} {first_ms:>16.2f} {row['added_ms']:>+14.2f} "
              f"{row['second_ms']:>17.3f} {reads:>20}")
    return rows


def child(port, reps, sizes):
    """Runs in a fresh process: the first-launch measurement; prints its figures as JSON."""
    import logging

    import torch
    import triton
    import triton.language as tl

    import autotune_guard
    from autotune_guard.adapters import redis_tables
    from autotune_guard.core import jsonfile

    def stub_timer(kernel_call, quantiles):
        kernel_call()
        return [1.0, 1.0, 1.0]

    @triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (128, 256, 512, 1024) for w in (4, 8)],
                     key=["n"], do_bench=stub_timer)
    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    add_kernel.fn.run = lambda *args, **kwargs: None  # the launch, stubbed
    n = 4096
    x, y, out = torch.ones(n), torch.ones(n), torch.empty(n)
    key = f"{n},torch.float32,torch.float32,torch.float32"
    chosen = {"kwargs": {"BLOCK": 512}, "num_warps": 8, "num_stages": 3}
    settings = {"none": {"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "min_cost"}}
    directories = []
    for size in sizes:
        document = table_document(0, size)
        document["arch"] = "interpret"
        document["kernels"]["add_kernel"] = {key: chosen}
        directories.append(tempfile.mkdtemp(prefix="bench-first-"))
        jsonfile.atomic_write_json(os.path.join(directories[-1], "interpret.json"), document)
        url = f"redis://127.0.0.1:{port}/0?prefix=benchfirst{size}-{os.getpid()}:"
        setup = redis_tables.Store(url)
        setup.put_table(document, {"run_id": "bench-setup"})
        settings[f"file E={size}"] = {"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": directories[-1]}
        settings[f"store E={size}"] = {"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": url}
        settings[f"store E={size}{SNAPSHOT_READS_STORE}"] = settings[f"store E={size}"]
        settings[f"store E={size}{SNAPSHOT_READS_FILE}"] = settings[f"store E={size}"]
    names = list(settings)
    figures = {name: {"install_ms": [], "first_ms": [], "second_ms": []} for name in names}
    reads = {name: {"first": [], "second": []} for name in names}
    logging.getLogger("autotune_guard").setLevel(logging.ERROR)  # the fallback's warning, once per install

    def evals():
        return setup.client.info("commandstats").get("cmdstat_eval", {}).get("calls", 0)

    for rep in range(reps + 1):  # the first round warms imports up and is not kept
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            os.environ.pop("TORCHELASTIC_RUN_ID", None)
            if name.endswith(SNAPSHOT_READS_STORE):  # a job of its own: this process reads the store, writes
                os.environ["TORCHELASTIC_RUN_ID"] = f"bench-first-{rep}-{time.time_ns()}"
            elif name.endswith(SNAPSHOT_READS_FILE):  # one job: its snapshot was written at the first round
                os.environ["TORCHELASTIC_RUN_ID"] = f"bench-first-{name}"
            t0 = time.perf_counter()
            autotune_guard.install(settings[name])
            t1 = time.perf_counter()
            before = evals()
            t2 = time.perf_counter()
            add_kernel[(1,)](x, y, out, n)
            t3 = time.perf_counter()
            after_first = evals()
            t4 = time.perf_counter()
            add_kernel[(1,)](x, y, out, n)
            t5 = time.perf_counter()
            after_second = evals()
            log = autotune_guard.choice_log()
            picked = next(iter(log.values()))
            if name != "none" and not picked.startswith("BLOCK=512,num_warps=8"):
                raise SystemExit(f"{name}: the table's entry was not pinned: {log}")
            if rep == 0:
                continue
            figures[name]["install_ms"].append(1e3 * (t1 - t0))
            figures[name]["first_ms"].append(1e3 * (t3 - t2))
            figures[name]["second_ms"].append(1e3 * (t5 - t4))
            reads[name]["first"].append(after_first - before)
            reads[name]["second"].append(after_second - after_first)
    for name in names:
        if name.startswith("store"):
            figures[name]["store_reads_first"] = statistics.mean(reads[name]["first"])
            figures[name]["store_reads_second"] = statistics.mean(reads[name]["second"])
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps(figures))


if __name__ == "__main__" and sys.argv[1:2] == ["--first-launch-child"]:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child(int(sys.argv[2]), int(sys.argv[3]), [int(x) for x in sys.argv[4].split(",")])
