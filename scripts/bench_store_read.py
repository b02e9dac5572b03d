"""What a big table store costs the first launch that reads it (issue 44): a real ``redis-server``
(started here on a free loopback port, stopped after) holding ``--entries`` entries for arch
``interpret`` (``--kernels`` kernels, the rest of the entries spread over them, plus the one entry
the launch needs), and a cold process per repetition: ``AUTOTUNE_MODE=pinned`` with the store in
``AUTOTUNE_TABLE_PATH``, one launch of ``tests/kernels/demo.py``'s add kernel under
TRITON_INTERPRET=1. The same launch with an empty store (another key prefix of the same server)
is the baseline.

Figures (medians over ``--reps``): the first launch's wall time and the process's peak resident
memory, each against the empty store ("added"); and the longest single command the server ran for
the read (its SLOWLOG, every command logged): how long the store was held from every other client.

usage: python scripts/bench_store_read.py [--entries 140000] [--kernels 140] [--reps 3] [--json]"""

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


def _fill(client, entries: int, kernels: int) -> None:
    """``entries`` entries of ``kernels`` kernels (as a grown table holds them), and the launch's own."""
    value = {"entry": {"kwargs": {"BLOCK": 64}, "num_warps": 2, "num_stages": 3},
             "added": {"run_id": "torchelastic:fill", "rank": 0, "host": "node-0", "time": "2026-12-06T00:00:00",
                       "triton": "3.9.0"}}
    key = "autotune_guard:{interpret}:entries"
    pipe, batch = client.pipeline(transaction=False), {}
    for n in range(entries - 1):
        batch[json.dumps([f"pkg.models.layer{n % kernels}.kernel", f"{n},torch.bfloat16,torch.bfloat16"])] = \
            json.dumps(dict(value, entry=dict(value["entry"], kwargs={"BLOCK": 16 << (n % 4)})))
        if len(batch) == 5000:
            pipe.hset(key, mapping=batch)
            pipe.execute()
            batch = {}
    batch[json.dumps([ADD, KEY])] = json.dumps(value)
    pipe.hset(key, mapping=batch)
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


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=140_000)
    parser.add_argument("--kernels", type=int, default=140)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    directory = tempfile.mkdtemp(prefix="bench-store-read-")
    proc, client, port = _server(directory)
    try:
        _fill(client, args.entries, args.kernels)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        runs = {"store": [], "empty": []}
        held = []
        for _ in range(args.reps):
            for name, prefix in (("empty", "?prefix=empty:"), ("store", "")):
                client.slowlog_reset()
                result = _launch(f"redis://127.0.0.1:{port}/0{prefix}")
                if name == "store":
                    held.append(_longest_command_ms(client))
                    assert result["log"][f"interpret|{ADD}|{KEY}"].startswith("BLOCK=64"), result["log"]
                runs[name].append(result)
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(directory, ignore_errors=True)
    med = lambda name, field: statistics.median(r[field] for r in runs[name])  # noqa: E731
    figures = {"entries": args.entries, "kernels": args.kernels, "reps": args.reps,
               "first_launch_s": med("store", "first_launch_s"), "first_launch_empty_s": med("empty", "first_launch_s"),
               "added_s": med("store", "first_launch_s") - med("empty", "first_launch_s"),
               "peak_mb": med("store", "peak_mb"), "added_mb": med("store", "peak_mb") - med("empty", "peak_mb"),
               "longest_command_ms": statistics.median(held)}
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        print(f"{args.entries} entries ({args.kernels} kernels), median of {args.reps}: the first launch took "
              f"{figures['first_launch_s']:.2f} s (+{figures['added_s']:.2f} s over an empty store), peak memory "
              f"{figures['peak_mb']:.0f} MB (+{figures['added_mb']:.0f} MB); the longest command held the store "
              f"{figures['longest_command_ms']:.0f} ms")
    return figures


if __name__ == "__main__":
    main()
