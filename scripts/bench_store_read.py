"""What a big table store costs the first launch that reads it (issue 44): a real ``redis-server``
(started here on a free loopback port, stopped after) holding ``--entries`` entries for arch
``interpret`` (``--kernels`` kernels, the rest of the entries spread over them, plus the one entry
the launch needs), once in each layout under its own key prefix: ``kernel`` (a hash per kernel, as
this version writes; a job reads the kernels it meets) and ``older`` (one hash for the arch, as
versions before wrote; read whole, as every store was before). A cold process per repetition and
layout: ``AUTOTUNE_MODE=pinned`` with the store in ``AUTOTUNE_TABLE_PATH``, one launch of
``tests/kernels/demo.py``'s add kernel under TRITON_INTERPRET=1. The same launch with an empty
store (another key prefix of the same server) is the baseline; the three alternate.

Figures (medians over ``--reps``): the first launch's wall time and the process's peak resident
memory, each against the empty store ("added"); and the longest single command the server ran for
the read (its SLOWLOG, every command logged): how long the store was held from every other client.

``--many N``: the other end, a job of many kernels against a small store: N kernels of 4 entries,
read in this process as a job reads them, one kernel at a time (``Stores.read_server``: one
script each), and through a node's snapshot (the first rank of a node reads the store and writes a
file per kernel; a later rank of the node reads the files), against one read of the same table
whole (``Store.read_older`` over the one-hash layout, what a job did before). Medians over --reps.

usage: python scripts/bench_store_read.py [--entries 140000] [--kernels 140] [--reps 3] [--many N] [--json]"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, "tests")
ADD = "kernels.demo.add_kernel"
KEY = "1000,torch.float32,torch.float32,torch.float32"

CHILD = """
import json, resource, time, torch, kernels.demo as demo, autotune_guard
x = torch.rand(1000)
start = time.perf_counter()
demo.add(x, x)
took = time.perf_counter() - start
print(json.dumps({"first_launch_s": took, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "log": autotune_guard.choice_log()}))
"""


def _server(directory):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", directory], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(200):
        try:
            client.ping()
            return proc, client, port
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"redis-server on port {port} did not start")


def _fill(client, entries: int, kernels: int, prefix: str, layout: str) -> None:
    """``entries`` entries of ``kernels`` kernels (as a grown table holds them), and the launch's own,
    under ``prefix`` in ``layout``: ``kernel`` (a hash per kernel, as this version writes) or ``older``
    (one hash for the arch, as versions before issue 44's per-kernel reads wrote)."""
    value = {"entry": {"kwargs": {"BLOCK": 64}, "num_warps": 2, "num_stages": 3},
             "added": {"run_id": "torchelastic:fill", "rank": 0, "host": "node-0", "time": "2026-12-06T00:00:00",
                       "triton": "3.9.0"}}
    pipe, batch = client.pipeline(transaction=False), 0
    names = [(f"pkg.models.layer{n % kernels}.kernel", f"{n},torch.bfloat16,torch.bfloat16") for n in range(entries - 1)]
    for n, (kernel, key) in enumerate([*names, (ADD, KEY)]):
        text = json.dumps(value if kernel == ADD else dict(value, entry=dict(value["entry"], kwargs={"BLOCK": 16 << (n % 4)})))
        if layout == "older":
            pipe.hset(f"{prefix}{{interpret}}:entries", json.dumps([kernel, key]), text)
        else:
            pipe.hset(f"{prefix}{{interpret}}:kernel:{kernel}", key, text)
            pipe.sadd(f"{prefix}{{interpret}}:kernels", kernel)
        batch += 1
        if batch == 5000:
            pipe.execute()
            batch = 0
    pipe.execute()


def _launch(url: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "_AUTOTUNE_GUARD_", "TORCHELASTIC"))}
    env.update(TRITON_INTERPRET="1", PYTHONPATH=TESTS, AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=url)
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"the launch failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _longest_command_ms(client) -> float:
    slow = client.slowlog_get(10_000)
    return max((entry["duration"] for entry in slow), default=0) / 1000


def many_kernels(port: int, client, kernels: int, reps: int) -> dict:
    """Seconds to read ``kernels`` kernels one by one (directly, through a node's snapshot as its first
    reader and as a later one) and the same table whole; medians over ``reps``."""
    from autotune_guard.adapters.redis_tables import Store, Stores
    from autotune_guard.core.store_snapshot import SUBDIRECTORY, Node

    for layout in ("kernel", "older"):
        _fill(client, kernels * 4 + 1, kernels, f"many{layout}:", layout)
    url, older_url = (f"redis://127.0.0.1:{port}/0?prefix=many{layout}:" for layout in ("kernel", "older"))
    names = [f"pkg.models.layer{k}.kernel" for k in range(kernels)]
    nodes = tempfile.mkdtemp(prefix="bench-store-nodes-")
    times: dict = {"per kernel": [], "snapshot, first reader": [], "snapshot, later reader": [], "whole": []}
    try:
        for rep in range(reps):
            stores = Stores()
            stores.store(url).ping()
            start = time.perf_counter()
            assert all(stores.read_server(url, "interpret", name)[0]["kernels"] for name in names)
            times["per kernel"].append(time.perf_counter() - start)
            node = Node(f"bench-many-{rep}", os.path.join(nodes, str(rep), SUBDIRECTORY))
            for reader in ("snapshot, first reader", "snapshot, later reader"):
                stores = Stores()
                stores.snapshot_node = node
                stores.store(url).ping()
                start = time.perf_counter()
                assert all(stores.read(url, "interpret", name)[0]["kernels"] for name in names)
                times[reader].append(time.perf_counter() - start)
            store = Store(older_url)
            store.ping()
            start = time.perf_counter()
            assert len(store.read_older("interpret", [])["kernels"]) == kernels + 1
            times["whole"].append(time.perf_counter() - start)
    finally:
        shutil.rmtree(nodes, ignore_errors=True)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=140_000)
    parser.add_argument("--kernels", type=int, default=140)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--many", type=int, default=0, metavar="N")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.many:
        return _many_main(args)
    directory = tempfile.mkdtemp(prefix="bench-store-read-")
    proc, client, port = _server(directory)
    layouts = ("kernel", "older")
    try:
        for layout in layouts:
            _fill(client, args.entries, args.kernels, f"{layout}:", layout)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        runs = {name: [] for name in ("empty", *layouts)}
        held = {layout: [] for layout in layouts}
        for _ in range(args.reps):
            for name in runs:
                client.slowlog_reset()
                result = _launch(f"redis://127.0.0.1:{port}/0?prefix={name}:")
                if name != "empty":
                    held[name].append(_longest_command_ms(client))
                    assert result["log"][f"interpret|{ADD}|{KEY}"].startswith("BLOCK=64"), result["log"]
                runs[name].append(result)
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(directory, ignore_errors=True)
    med = lambda name, field: statistics.median(r[field] for r in runs[name])  # noqa: E731
    figures = {"entries": args.entries, "kernels": args.kernels, "reps": args.reps,
               "first_launch_empty_s": med("empty", "first_launch_s")}
    for layout in layouts:
        figures[layout] = {"first_launch_s": med(layout, "first_launch_s"),
                           "added_s": med(layout, "first_launch_s") - med("empty", "first_launch_s"),
                           "peak_mb": med(layout, "peak_mb"), "added_mb": med(layout, "peak_mb") - med("empty", "peak_mb"),
                           "longest_command_ms": statistics.median(held[layout])}
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        print(f"{args.entries} entries ({args.kernels} kernels), median of {args.reps}; an empty store's first launch "
              f"{figures['first_launch_empty_s']:.2f} s")
        for layout in layouts:
            f = figures[layout]
            print(f"  {layout + ' layout':<14} first launch {f['first_launch_s']:.2f} s (+{f['added_s']:.2f} s), peak "
                  f"memory {f['peak_mb']:.0f} MB (+{f['added_mb']:.0f} MB); the longest command held the store "
                  f"{f['longest_command_ms']:.1f} ms")
    return figures


def _many_main(args) -> dict:
    directory = tempfile.mkdtemp(prefix="bench-store-read-")
    proc, client, port = _server(directory)
    try:
        figures = many_kernels(port, client, args.many, args.reps)
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(directory, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        print(f"{args.many} kernels of 4 entries, median of {args.reps}:")
        for name, seconds in figures.items():
            print(f"  {name:<24} {seconds * 1000:8.1f} ms  ({seconds * 1e6 / args.many:.0f} us a kernel)")
    return figures


if __name__ == "__main__":
    main()
