"""Issue 57 on a Redis table store: the store keeps what a table directory keeps. A real
``redis-server`` (``test_redis_store``'s fixture), a real Triton kernel under TRITON_INTERPRET=1
with a timer of known costs (``kernels/winners.py``, as ``test_pooling``), two real writer processes
racing on one kernel, and the report's commands.

Before: the store kept entries, who added them and provenance, no measurements: AUTOTUNE_POOL_RUNS=3
on a store did nothing (run 2 timed nothing), store-import/store-export of a pooled table dropped
its measurements and verdicts, and an entry under a bare kernel name decided for every module's
kernel of that name without a word."""

import json
import subprocess
import sys
import time

import pytest

from kernels import winners
from support import TESTS
from test_redis_store import redis_server  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow  # every test here starts a redis-server

ORDER = list(winners.COSTS)
KERNEL = "kernels.winners.tagged_kernel"


def _cold_run(guard, url, seed, bias=None, **settings):
    """One cold run of the job alone on the store (it grows it): (its choice, the blocks it timed)."""
    from autotune_guard import choice_log
    from autotune_guard.evidence import store_growth

    winners.RANDOM.seed(seed)
    winners.BIAS.clear()
    winners.BIAS.update(bias or {})
    try:
        guard({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": url, "AUTOTUNE_POOL_RUNS": "3", **settings})
        winners.CALLS.clear()
        winners.launch(winners.make(ORDER))
        store_growth.flush()
    finally:
        winners.BIAS.clear()
    (entry,) = [v for k, v in choice_log().items() if "tagged_kernel" in k]
    return entry, list(winners.CALLS)


def _measured(url):
    from autotune_guard.adapters.redis_tables import Store

    notes = []
    document, _ = Store(url).read_kernel("interpret", KERNEL, notes)
    assert notes == [], notes
    measured = list(document.get("measured", {}).get(KERNEL, {}).values())  # before issue 57: none kept
    (entry,) = document["kernels"][KERNEL].values()
    return (measured[0] if measured else {}), entry["kwargs"]["BLOCK"]


def test_the_first_three_cold_runs_pool_a_key_on_a_store_and_the_fourth_times_nothing(redis_server, guard,  # noqa: F811
                                                                                       ag_log, capsys):
    from autotune_guard.report import cli

    url = redis_server().url()
    first, calls = _cold_run(guard, url, 0, bias={32: 1.03, 64: 1.03})  # alone, run 1 freezes BLOCK=16
    assert set(calls) == set(ORDER) and "BLOCK=16," in first
    measured, block = _measured(url)
    assert block == 16 and "pooled" not in measured and "earlier" not in measured
    for run in (2, 3):  # before: the store kept no measurement, and these timed nothing
        _, calls = _cold_run(guard, url, run)
        assert {16, 32, 64} <= set(calls) and not {256, 512} & set(calls), calls
        measured, block = _measured(url)
        assert measured["pooled"]["runs"] == run and len(measured["earlier"]) == run - 1
        assert int(measured["earlier"][0]["winner"].split("BLOCK=")[1].split(",")[0]) == 16  # run 1's, kept
    assert block == 32 and measured["pooled"]["winner"].startswith("BLOCK=32,"), measured["pooled"]
    said = [m for m in ag_log.messages() if "AUTOTUNE_POOL_RUNS=3" in m]
    assert any("candidates timed again to pool 3 cold runs" in m and "BLOCK=32" in m for m in said), said
    assert any(f"table store {url}: kernel {KERNEL}" in m and "now holds BLOCK=32" in m and "(pooled)" in m
               for m in ag_log.messages()), ag_log.messages()  # said once, as for a table file
    fourth, calls = _cold_run(guard, url, 4)
    assert calls == [] and "BLOCK=32," in fourth and fourth.endswith(";table"), fourth
    capsys.readouterr()
    assert cli.main(["show", url]) == 0
    shown = capsys.readouterr().out
    assert "POOLED over 3 cold runs" in shown and "the last run's own" in shown, shown


# --- two writers at once ---------------------------------------------------------------------------

WRITER = r"""
import sys, time
from autotune_guard.adapters.redis_tables import Stores
from autotune_guard.core.model import signature, tuned_winner

url, name, block, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
mine, other = {"kwargs": {"BLOCK": block}, "num_warps": 1}, {"kwargs": {"BLOCK": 48 - block}, "num_warps": 1}
sigs = {signature(mine): mine, signature(other): other}
stores = Stores()
while time.time() < start:
    time.sleep(0.001)
for i in range(40):
    # Each writer times its own config 1 % faster; pooled alone, each would freeze its own.
    times = {signature(mine): 1.0 + i / 1000, signature(other): 1.01 + i / 1000}
    measured = {"how": "clear", "winner": signature(mine), "arch": "interpret", "run": name,
                "candidates": {sig: {"median": t} for sig, t in times.items()}}
    pooled = i % 2 == 0  # even keys: two pooling runs at once; odd keys: first writer wins
    if pooled:
        measured["pooled"] = {"winner": signature(mine), "how": "clear", "runs": 1}
    desc = tuned_winner(mine, {"source": "s1", "candidates": "c1", "count": 2}, measured, extends=pooled,
                        choices=sigs if pooled else None)
    if hasattr(stores, "grow_kernel"):
        found = stores.grow_kernel(url, "interpret", "pkg.ops.raced", {str(i): desc},
                                   {"run_id": name, "rank": 0}, {}, desc.provenance)
    else:  # before issue 57: HSETNX per entry, no measurements
        found = stores.add_kernel(url, "interpret", "pkg.ops.raced", desc.provenance,
                                  {str(i): (desc, {"run_id": name, "rank": 0})})
    assert found is not None, "the store did not take the write"
print("done", name)
"""


def test_two_writers_at_once_lose_nothing_and_pooling_runs_pool_over_both(redis_server, tmp_path):  # noqa: F811
    from autotune_guard.adapters.redis_tables import Store

    server = redis_server()
    url = server.url()
    start = time.time() + 2.0  # both started and connected by then
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, url, name, str(block), str(start)], cwd=TESTS,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, block in (("a", 16), ("b", 32))]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "done" in out, err[-3000:]
    document, notes = Store(url).read("interpret")
    assert notes == []
    entries, measured = document["kernels"]["pkg.ops.raced"], document.get("measured", {}).get("pkg.ops.raced", {})
    added = document["added"]["pkg.ops.raced"]
    assert sorted(entries, key=int) == [str(i) for i in range(40)]
    for i in range(40):
        key, kept = str(i), measured.get(str(i), {})
        runs = [kept, *kept.get("earlier", [])]
        # Both writers' measurements are kept, whoever won: the one entry's and the other's beside it.
        assert sorted(r.get("run") for r in runs) == ["a", "b"], (key, kept)
        if i % 2:  # first writer wins: the entry is its, with its measurement; the other's beside it
            assert entries[key]["kwargs"]["BLOCK"] == {"a": 16, "b": 32}[added[key]["run_id"]], key
            assert kept["run"] == added[key]["run_id"]
        else:  # the later pooling writer pooled over both runs (before: each pooled over its own)
            assert kept["pooled"]["runs"] == 2, (key, kept["pooled"])
            assert kept["earlier"][-1]["replaced"]["added"]["run_id"] != added[key]["run_id"]


# --- report store-import / store-export ------------------------------------------------------------

def _pooled_table():
    """A table directory's document as pooling runs grow it: an entry pooled over 2 runs with the
    replaced entry beside it, a plain one, a retune asked for, and a superseded kernel version."""
    from autotune_guard.core.model import signature, tuned_winner
    from autotune_guard.core.table_writes import grow_table

    fast, slow = {"kwargs": {"BLOCK": 32}, "num_warps": 1}, {"kwargs": {"BLOCK": 16}, "num_warps": 1}
    choices = {signature(fast): fast, signature(slow): slow}
    prov = {"source": "s1", "candidates": "c1", "count": 2}
    document = None
    for run, (winner, other) in enumerate(((slow, fast), (fast, slow))):
        measured = {"how": "clear", "winner": signature(winner), "arch": "interpret", "rounds": 2, "margin": 0.01,
                    "candidates": {signature(winner): {"median": 1.0, "spread": 0.002},
                                   signature(other): {"median": 1.02, "spread": 0.003}}}
        if run:
            measured["pooled"] = {"winner": signature(winner), "how": "clear", "runs": 1}
        additions = {"pkg.ops.k": {"1024": tuned_winner(winner, prov, measured, extends=bool(run),
                                                        choices=choices if run else None)}}
        if not run:
            additions["pkg.ops.k"]["2048"] = tuned_winner(slow, prov, {**measured, "how": "tie"})
        document = grow_table(document, "interpret", additions, {"run_id": f"run{run}", "rank": 0}, {},
                              {"pkg.ops.k": prov}).document
    document["retune"] = {"pkg.ops.k": {"2048": {"by": "report retune"}}}
    document["superseded"] = [{"kernel": "pkg.ops.k", "provenance": {"source": "s0"}, "entries": {"1024": slow},
                               "added": {"1024": {"run_id": "run-old"}}, "measured": {}, "why": ["its source changed"],
                               "replaced_at": "2026-12-01T00:00:00+0000"}]
    assert document["measured"]["pkg.ops.k"]["1024"]["pooled"]["runs"] == 2
    return document


def test_a_pooled_table_round_trips_directory_store_directory_with_its_measurements(redis_server, tmp_path,  # noqa: F811
                                                                                    capsys):
    from autotune_guard.report import cli

    url = redis_server().url()
    table = _pooled_table()
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "interpret.json").write_text(json.dumps(table))
    assert cli.main(["store-import", str(tmp_path / "tables" / "interpret.json"), "-o", url]) == 0
    assert "added 2 entries; 0 were there already" in capsys.readouterr().out
    assert cli.main(["store-export", url, "-o", str(tmp_path / "back")]) == 0
    back = json.loads((tmp_path / "back" / "interpret.json").read_text())
    for name in ("kernels", "measured", "added", "provenance", "retune", "superseded"):
        assert json.dumps(back[name], sort_keys=True) == json.dumps(table[name], sort_keys=True), name
    # Again: nothing added, nothing replaced, and a table's differing measurement of a held entry is named.
    table["measured"]["pkg.ops.k"]["2048"]["margin"] = 0.5
    (tmp_path / "tables" / "interpret.json").write_text(json.dumps(table))
    capsys.readouterr()
    assert cli.main(["store-import", str(tmp_path / "tables" / "interpret.json"), "-o", url]) == 0
    said = capsys.readouterr().out
    assert "added 0 entries; 2 were there already" in said and "the measurements of 1 entry it holds" in said, said
    assert cli.main(["store-export", url, "-o", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "interpret.json").read_text())
    assert again["measured"] == back["measured"] and again["superseded"] == back["superseded"]
    assert cli.main(["show", url]) == 0
    assert "POOLED over 2 cold runs" in capsys.readouterr().out


# --- a bare kernel name --------------------------------------------------------------------------

def _plant_bare(server, name="tagged_kernel"):
    client = server.client
    client.hset(f"autotune_guard:{{interpret}}:kernel:{name}", "*",
                json.dumps({"entry": {"kwargs": {"BLOCK": 64}, "num_warps": 1}, "added": {"run_id": "report import"}}))
    client.sadd("autotune_guard:{interpret}:kernels", name)


def test_a_bare_name_in_a_store_is_named_once_per_kernel_and_refused_with_on_miss_error(redis_server, guard,  # noqa: F811
                                                                                        ag_log):
    from autotune_guard import choice_log
    from autotune_guard.core.errors import SelectionError

    server = redis_server()
    _plant_bare(server)
    url = server.url()
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": url})
    for _ in range(2):
        winners.launch(winners.make(ORDER))
    (entry,) = [v for k, v in choice_log().items() if "tagged_kernel" in k]
    assert entry.startswith("BLOCK=64,"), entry  # used, with a word
    said = [m for m in ag_log.messages() if "bare name" in m]
    assert len(said) == 1 and f"kernel {KERNEL}: table store {url}" in said[0], said
    assert "only under the bare name tagged_kernel" in said[0], said
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": url, "AUTOTUNE_ON_MISS": "error"})
    with pytest.raises(SelectionError, match="bare name tagged_kernel.*refused with AUTOTUNE_ON_MISS=error"):
        winners.launch(winners.make(ORDER))
    # The qualified name's own entry is used without a word, the bare one beside it notwithstanding.
    server.client.hset(f"autotune_guard:{{interpret}}:kernel:{KERNEL}", "*",
                       json.dumps({"entry": {"kwargs": {"BLOCK": 32}, "num_warps": 1}}))
    server.client.sadd("autotune_guard:{interpret}:kernels", KERNEL)
    ag_log.records.clear()
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": url, "AUTOTUNE_ON_MISS": "error"})
    winners.launch(winners.make(ORDER))
    (entry,) = [v for k, v in choice_log().items() if "tagged_kernel" in k]
    assert entry.startswith("BLOCK=32,") and not [m for m in ag_log.messages() if "bare name" in m], entry


def test_hostile_measurements_are_named_and_left_out_and_the_entry_stays(redis_server):  # noqa: F811
    from autotune_guard.adapters.redis_tables import Store

    server = redis_server()
    client = server.client
    value = json.dumps({"entry": {"kwargs": {"BLOCK": 64}, "num_warps": 1}})
    client.hset(f"autotune_guard:{{interpret}}:kernel:{KERNEL}", mapping={"1": value, "2": value, "3": value})
    client.hset(f"autotune_guard:{{interpret}}:measured:{KERNEL}", mapping={
        "1": b"\x80 not JSON", "2": b"[" + b" " * (2 * 2**20) + b"]", "3": json.dumps({"how": "clear"})})
    notes = []
    document, _ = Store(server.url()).read_kernel("interpret", KERNEL, notes)
    assert len(document["kernels"][KERNEL]) == 3 and list(document["measured"][KERNEL]) == ["3"]
    assert any("measured" in n and "field '1'" in n for n in notes), notes
    assert any("field '2'" in n and "more than any measurement" in n for n in notes), notes
