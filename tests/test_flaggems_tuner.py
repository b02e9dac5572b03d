"""FlagGems' LibTuner governed through its own seams: modelled on FlagGems 5.0.2's source in
``kernels.libtuner`` (its own run, a persistent SQLite config and timing database, its key
through strategies, a registered policy). Real kernels under TRITON_INTERPRET=1, cold processes,
torchrun ranks over gloo, real record files and tables."""

import json
import os

import pytest
import torch

from support import TESTS, clean_env, last_json, rank_file, run_python, torchrun

JOB = os.path.join(TESTS, "progs", "libtuner_job.py")
KERNEL = "kernels.libtuner.triple_kernel"
F32 = "torch.float32"
KEYS = [f"{k},{F32},{F32}" for k in (128, 320, 1024)]  # n = 100, 300, 1000 through align32


def _entry(key):
    return f"interpret|{KERNEL}|{key}"


def _job(tmp_path, **settings):
    env = clean_env(LIBTUNER_DB=tmp_path / "TunedConfig.db", **settings)
    return last_json(run_python(open(JOB).read(), env=env).stdout)


@pytest.fixture
def libtuner(tmp_path, monkeypatch):
    monkeypatch.setenv("LIBTUNER_DB", str(tmp_path / "TunedConfig.db"))
    from kernels import libtuner

    del libtuner.TIMER_CALLS[:]
    return libtuner


def test_pinned_times_nothing_and_reads_no_database(guard, libtuner, ag_log):
    from autotune_guard import choice_log
    from autotune_guard.adapters.triton import strategy_of

    guard({"AUTOTUNE_MODE": "auto"})  # the library's database now holds its (random) winners
    libtuner.triple(torch.arange(100.0))
    assert len(libtuner.TIMER_CALLS) == 4 and choice_log()[_entry(KEYS[0])].endswith(";timed")
    guard({"AUTOTUNE_MODE": "pinned"})
    for n in (100, 300, 100):
        assert libtuner.triple(torch.arange(float(n))).equal(torch.arange(float(n)) * 3)
    assert len(libtuner.TIMER_CALLS) == 4  # no new timing
    assert strategy_of(libtuner.triple_kernel) == "libtuner-pinned"
    # min_cost, the on-miss default: the smallest tile, whatever the database says
    assert choice_log() == {_entry(k): "BLOCK=16,num_warps=1,num_stages=3,num_ctas=1;fallback (min_cost)" for k in KEYS[:2]}
    assert not [m for m in ag_log.messages() if "not govern" in m or "overrides run()" in m]


@pytest.mark.slow
def test_cold_pinned_processes_agree_and_never_time(tmp_path):
    results = [_job(tmp_path, AUTOTUNE_MODE="pinned") for _ in range(3)]
    assert {r["hash"] for r in results} == {results[0]["hash"]}
    assert [r["timer_calls"] for r in results] == [0, 0, 0]
    assert len({json.dumps(r["choices"], sort_keys=True) for r in results}) == 1
    assert sorted(results[0]["choices"]) == sorted(_entry(k) for k in KEYS)
    assert all(r["ungoverned"] == {} and r["strategy"] == "libtuner-pinned" for r in results)
    # without the guard the library times in its first process
    plain = _job(tmp_path / "..", AUTOTUNE_DISABLE="1")
    assert plain["timer_calls"] == 12 and plain["choices"] == {}


@pytest.mark.slow
def test_record_merge_pinned_round_trip(tmp_path, capsys):
    from autotune_guard import report
    from autotune_guard.core import schema

    prefix = tmp_path / "rec"
    recorded = _job(tmp_path, AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=prefix)
    assert recorded["timer_calls"] == 12 and recorded["strategy"] == "libtuner-record"
    entries = schema.read_document(rank_file(prefix, 0))["kernels"][KERNEL]
    assert sorted(entries) == sorted(KEYS)
    for key in KEYS:
        entry = entries[key]
        assert entry["how"] == "timed" and len(entry["timings"]) == 4 and len(entry["candidates"]) == 4
        assert recorded["choices"][_entry(key)] == f"{entry['signature']};timed"
    assert report.main(["merge", str(prefix), "-o", str(tmp_path / "interpret.json")]) == 0
    capsys.readouterr()
    os.remove(tmp_path / "TunedConfig.db")  # a cold machine: the library's database is gone
    pinned = [_job(tmp_path, AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error", AUTOTUNE_TABLE_PATH=tmp_path)
              for _ in range(2)]
    for run in pinned:
        assert run["timer_calls"] == 0 and run["hash"] == recorded["hash"]
        assert run["choices"] == {k: v.replace(";timed", ";table") for k, v in recorded["choices"].items()}


@pytest.mark.slow
def test_auto_takes_the_librarys_stored_timings_not_its_stored_winner(tmp_path):
    first = _job(tmp_path, AUTOTUNE_MODE="auto")
    second = _job(tmp_path, AUTOTUNE_MODE="auto")
    assert first["timer_calls"] == 12 and second["timer_calls"] == 0  # timings come from its database
    assert second["choices"] == first["choices"] and all(v.endswith(";timed") for v in first["choices"].values())


@pytest.mark.slow
def test_consensus_tunes_once_per_job(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = clean_env(AUTOTUNE_MODE="consensus", AUTOTUNE_CONSENSUS_TIMEOUT=120)
    # each rank a database of its own (as on separate machines): only the guard makes them agree
    script = tmp_path / "rank_db.py"
    script.write_text(f"import os, runpy\nos.environ['LIBTUNER_DB'] = os.path.join({str(tmp_path)!r}, "
                      f"'db' + os.environ['RANK'])\nrunpy.run_path({JOB!r}, run_name='__main__')\n")
    torchrun(str(script), 2, env=env, args=[str(out)])
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["choices"] == ranks[1]["choices"] and ranks[0]["hash"] == ranks[1]["hash"]
    assert sorted(ranks[0]["choices"]) == sorted(_entry(k) for k in KEYS)
    assert all(v.endswith(";consensus") for v in ranks[0]["choices"].values())
    assert sum(r["timer_calls"] for r in ranks) == 12  # each key timed once, by one rank, for the job


def test_on_miss_error_refuses_a_key_without_a_table_entry(guard, libtuner):
    from autotune_guard import SelectionError

    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "error"})
    with pytest.raises(SelectionError, match=r"kernels\.libtuner\.triple_kernel key \(128,torch\.float32"):
        libtuner.triple(torch.arange(100.0))
    assert libtuner.TIMER_CALLS == []
