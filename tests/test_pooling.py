"""AUTOTUNE_POOL_RUNS (docs/winners.md, "Pooling cold runs"): a table's key is timed again by each
of the first N cold runs and its entry becomes the winner pooled over their measurements; run N+1
times nothing. The cold runs drive a real Triton kernel (``kernels/winners.py``) whose timer has
known true costs, a noise of 1 % a call and, where a test says so, a bias of its own in one run
(a cold process's speed for one config moves from one process to the next)."""

import json
import math
import random

import pytest

from kernels import winners

ORDER = list(winners.COSTS)  # BLOCK=16 (2 % behind) declared first; 32 the best, 64 0.3 % behind it
KERNEL = "kernels.winners.tagged_kernel"


def _cold_run(guard, table_dir, seed, bias=None, **settings):
    """One cold run of the job alone (it grows its table): (its choice, the blocks it timed)."""
    from autotune_guard import choice_log
    from autotune_guard.evidence import table_growth

    winners.RANDOM.seed(seed)
    winners.BIAS.clear()
    winners.BIAS.update(bias or {})
    try:
        guard({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": str(table_dir), "AUTOTUNE_POOL_RUNS": "3",
               **settings})
        winners.CALLS.clear()
        winners.launch(winners.make(ORDER))
        table_growth.flush()
    finally:
        winners.BIAS.clear()
    (entry,) = [v for k, v in choice_log().items() if "tagged_kernel" in k]
    return entry, list(winners.CALLS)


def _measured(table_dir):
    table = json.loads((table_dir / "interpret.json").read_text())
    (measured,) = table["measured"][KERNEL].values()
    (entry,) = table["kernels"][KERNEL].values()
    return measured, entry["kwargs"]["BLOCK"]


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_the_first_three_cold_runs_time_the_key_and_pool_it_and_the_fourth_times_nothing(guard, tmp_path, ag_log,
                                                                                         capsys):
    from autotune_guard.report import cli

    # Run 1 draws a process that times BLOCK=32 and 64 3 % slow: alone, it freezes BLOCK=16.
    slow_best = {32: 1.03, 64: 1.03}
    first, calls = _cold_run(guard, tmp_path, 0, bias=slow_best)
    assert set(calls) == set(ORDER) and "BLOCK=16," in first
    measured, block = _measured(tmp_path)
    assert block == 16 and "pooled" not in measured and "earlier" not in measured
    for run in (2, 3):  # each times again the candidates that contend (256 and 512 are far behind); pooled
        _, calls = _cold_run(guard, tmp_path, run)
        assert {16, 32, 64} <= set(calls) and not {256, 512} & set(calls), calls
        measured, block = _measured(tmp_path)
        assert measured["pooled"]["runs"] == run and len(measured["earlier"]) == run - 1
        assert _block(measured["earlier"][0]["winner"]) == 16  # run 1's own measurement, kept
    assert block == 32 and measured["pooled"]["winner"].startswith("BLOCK=32,"), measured["pooled"]
    assert measured["pooled"]["how"] == "tie" and measured["pooled"]["margin"] > 0.005  # 64 ties; 16 is behind
    said = [m for m in ag_log.messages() if "AUTOTUNE_POOL_RUNS=3" in m]
    assert any("candidates timed again to pool 3 cold runs (AUTOTUNE_POOL_RUNS=3)" in m and "BLOCK=32" in m
               for m in said), said
    assert any("keys new to the table are timed by this run" in m for m in said), said  # said from run 1
    # Run 4: the key has its 3 runs; it is the table's, untimed.
    fourth, calls = _cold_run(guard, tmp_path, 4)
    assert calls == [] and "BLOCK=32," in fourth and fourth.endswith(";table"), fourth
    capsys.readouterr()
    assert cli.main(["show", str(tmp_path / "interpret.json")]) == 0
    shown = capsys.readouterr().out
    assert "POOLED over 3 cold runs" in shown and "the last run's own" in shown, shown


def _block(signature):
    return int(signature.split("BLOCK=")[1].split(",")[0])


def test_without_pool_runs_the_second_run_reads_the_entry_untimed(guard, tmp_path):
    _cold_run(guard, tmp_path, 0, AUTOTUNE_POOL_RUNS="1")
    second, calls = _cold_run(guard, tmp_path, 1, AUTOTUNE_POOL_RUNS="1")
    assert calls == [] and second.endswith(";table")
    measured, _ = _measured(tmp_path)
    assert "pooled" not in measured and "earlier" not in measured


def test_a_measurement_of_other_versions_does_not_count_toward_the_pool(guard, tmp_path):
    _cold_run(guard, tmp_path, 0)
    table = json.loads((tmp_path / "interpret.json").read_text())
    (key,) = table["measured"][KERNEL]
    table["measured"][KERNEL][key]["triton"] = "0.0.1"  # measured under another Triton
    (tmp_path / "interpret.json").write_text(json.dumps(table))
    _, calls = _cold_run(guard, tmp_path, 1)
    assert calls == []  # nothing comparable to pool with: the entry stands, untimed


def test_pool_runs_outside_consensus_with_a_table_is_named_as_ignored(tmp_path):
    from autotune_guard.core.settings import StartupSettings, ineffective_settings, policy_from_environment

    for environ, why in (({"AUTOTUNE_MODE": "auto"}, "the mode is auto"),
                         ({"AUTOTUNE_MODE": "consensus"}, "without a table path")):
        policy = policy_from_environment({**environ, "AUTOTUNE_POOL_RUNS": "3"})
        (said,) = [s for s in ineffective_settings(policy, StartupSettings()) if "AUTOTUNE_POOL_RUNS" in s]
        assert why in said and said.endswith("it is ignored"), said
    policy = policy_from_environment({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": str(tmp_path),
                                     "AUTOTUNE_POOL_RUNS": "3"})
    assert policy.pool_runs == 3 and not ineffective_settings(policy, StartupSettings())


# Pure rules (core.pooling) over synthetic measurements: what pooling buys where a pair's ratio moves
# between cold processes.

def _measurement(costs, rng, between, version="3.9.0"):
    return {"triton": version, "candidates": {
        f"BLOCK={b}": {"median": c * math.exp(rng.gauss(0, between))} for b, c in costs.items()}}


def test_pooling_three_runs_freezes_the_better_config_where_single_runs_draw_either():
    from autotune_guard.core import pooling

    # Declared first is 2 % behind; a process moves each config's speed by 1 % (a pair's ratio by
    # 1.4 %, as layer_norm_bwd's pairs moved between cold processes on an H100).
    costs = {16: 1.02, 32: 1.000, 256: 1.30}
    signatures = [f"BLOCK={b}" for b in costs]
    rng = random.Random(7)
    right = {1: 0, 3: 0, 5: 0}
    trials = 400
    for _ in range(trials):
        runs = [_measurement(costs, rng, 0.01) for _ in range(5)]
        for count in right:
            right[count] += pooling.pool(runs[:count], signatures).winner == "BLOCK=32"
    # about 84, 96 and 99 % (1,000 trials): the spread between runs shrinks as the square root of their count
    assert right[1] / trials < 0.9 and right[3] / trials > 0.92 and right[5] >= right[3], right


def test_a_pooled_tie_goes_to_the_candidate_declared_first_and_an_unrunnable_one_never_wins():
    from autotune_guard.core import pooling

    runs = [{"candidates": {"a": {"median": 1.003}, "b": {"median": 1.0}, "c": {"median": None}}},
            {"candidates": {"a": {"median": 1.002}, "b": {"median": 1.0}, "c": {"median": math.inf}}}]
    found = pooling.pool(runs, ["a", "b", "c"])
    assert found.winner == "a" and found.how == "tie" and found.tied == ("b",) and found.runs == 2
    assert found.margin is None and found.spread is not None and "c" not in found.timed_by


def test_a_candidate_new_since_run_1_counts_by_the_runs_that_timed_it():
    """Issue 57: run 1 timed BLOCK 16 and 32, runs 2-3 also 64, 2x faster in each: 64 wins (pooling kept
    only the candidates every run timed, and froze 16)."""
    from autotune_guard.core import pooling

    run = lambda **medians: {"candidates": {f"BLOCK={b[1:]}": {"median": m} for b, m in medians.items()}}
    runs = [run(b16=1.0, b32=1.01), run(b16=1.02, b32=1.0, b64=0.5), run(b16=1.0, b32=1.02, b64=0.51)]
    signatures = ["BLOCK=16", "BLOCK=32", "BLOCK=64"]
    found = pooling.pool(runs, signatures)
    assert found.winner == "BLOCK=64" and found.how == "clear", found
    assert found.timed_by == {"BLOCK=16": 3, "BLOCK=32": 3, "BLOCK=64": 2}
    assert 0.9 < found.margin < 1.1, found  # the next is about 2x slower: said as about 100 %, not log 2's 69 %
    # after the three runs, 16 and 32 trail 64 by far: it alone contends, and the key is settled
    assert pooling.to_time(runs, signatures, 3) is None
    assert pooling.to_time(runs[:1], signatures, 3) == signatures  # after run 1: 64 is new, 16 and 32 close


def test_a_timing_that_failed_in_one_run_counts_by_the_others():
    """inf, NaN or 0 from one run's timer: that run says nothing of the candidate; the others decide."""
    from autotune_guard.core import pooling

    for bad in (math.inf, math.nan, 0.0, -1.0, "fast", True):
        runs = [{"candidates": {"a": {"median": 1.0}, "b": {"median": 0.5}}},
                {"candidates": {"a": {"median": 1.0}, "b": {"median": bad}}},
                {"candidates": {"a": {"median": 1.01}, "b": {"median": 0.49}}}]
        found = pooling.pool(runs, ["a", "b"])
        assert found.winner == "b" and found.timed_by == {"a": 3, "b": 2}, (bad, found)


def test_close_candidates_are_timed_until_each_has_the_runs_asked_for():
    from autotune_guard.core import pooling

    run = lambda a, b, c: {"candidates": {"a": {"median": a}, "b": {"median": b}, "c": {"median": c}}}
    runs = [run(1.0, 1.01, 1.5), run(1.0, 1.012, 1.52)]
    assert pooling.to_time(runs, ["a", "b", "c"], 3) == ["a", "b"]  # c is 50 % behind: settled
    assert pooling.to_time(runs, ["a", "b", "c"], 2) is None
    assert pooling.to_time(runs, ["a", "b", "c", "d"], 2) == ["a", "b", "d"]  # d is new: the key pools again


def test_a_candidate_a_pooling_run_left_out_stays_settled_when_the_best_shifts():
    """Run 1 found c 11 % behind a: settled, so run 2 timed a and b alone and found b ahead; pooled
    again, c comes within 10 % of the new best, yet run 2 left it out: run 3 times nothing (it
    pooled a third time, seen on 2 ranks under Triton 3.3.1's interpreter)."""
    from autotune_guard.core import pooling

    run1 = {"candidates": {"a": {"median": 1.0}, "b": {"median": 1.09}, "c": {"median": 1.11}}}
    run2 = {"candidates": {"a": {"median": 1.2}, "b": {"median": 1.0}}}
    assert pooling.to_time([run1], ["a", "b", "c"], 2) == ["a", "b"]
    assert pooling.left_out(run2, ["a", "b", "c"]) == ["c"]
    assert pooling.to_time([run2, run1], ["a", "b", "c"], 2) == ["a", "b", "c"]  # without the word: c again
    assert pooling.to_time([{**run2, pooling.SETTLED: ["c"]}, run1], ["a", "b", "c"], 2) is None
    # a settled candidate that leads the pooled verdict still contends
    run3 = {"candidates": {"a": {"median": 1.0}, "b": {"median": 1.0}}, pooling.SETTLED: ["c"]}
    lead = {"candidates": {"a": {"median": 1.0}, "b": {"median": 1.01}, "c": {"median": 0.96}}}
    assert "c" in pooling.to_time([run3, lead], ["a", "b", "c"], 3)


def test_one_runs_spike_is_left_out_where_three_runs_are_pooled():
    from autotune_guard.core import pooling

    run = lambda a, b: {"candidates": {"a": {"median": a}, "b": {"median": b}}}
    runs = [run(1.0, 1.02), run(2.0, 1.01), run(1.0, 1.015)]  # another process slowed a 2x in run 2
    found = pooling.pool(runs, ["b", "a"])
    assert found.winner == "a" and found.how == "clear" and 0.01 < found.margin < 0.02, found
    assert pooling.pool(runs[:2], ["b", "a"]).winner == "b"  # two runs cannot tell a spike from the truth


def test_only_measurements_of_this_arch_and_versions_are_pooled():
    from autotune_guard.core import pooling

    on = {"arch": "sm90", "triton": "3.6.0", "torch": None}
    here = {"arch": "sm90", "triton": "3.6.0", "candidates": {}}
    entry = {**here, "earlier": [{**here, "triton": "3.5.0"}, here, "not a measurement"]}
    assert pooling.comparable(entry, on) == [entry, here]
    assert pooling.comparable(None, on) == [] and pooling.comparable({"arch": "sm90"}, on) == []


@pytest.mark.slow
def test_the_readmes_command_pools_two_runs_on_two_ranks_and_the_third_reads_the_table(tmp_path):
    """examples/train.py under the README's command with AUTOTUNE_POOL_RUNS=2 on 2 torchrun ranks over
    gloo (the real wall-clock timer, default rounds): run 2's claimer times again every key whose close
    candidates need it and their entries become the pooled winners; run 3 times nothing and leaves the table as it was;
    every run's ranks agree on one hash."""
    import re

    from support import REPO, clean_env, torchrun

    from autotune_guard.core import pooling

    env = clean_env(OMP_NUM_THREADS=1, AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=tmp_path, AUTOTUNE_POOL_RUNS=2)
    env.pop("AUTOTUNE_RETIME_ROUNDS")  # the default, as a user runs it
    tables = []
    for run in (1, 2, 3):
        proc = torchrun(f"{REPO}/examples/train.py", 2, env=env)
        assert len(set(re.findall(r"rank \d: result hash ([0-9a-f]{12})", proc.stdout))) == 1, proc.stdout
        pooled_lines = re.findall(r"candidates timed again to pool (\d) cold runs \(AUTOTUNE_POOL_RUNS=2\)", proc.stderr)
        tables.append((tmp_path / "interpret.json").read_text())
        measured = [m for keys in json.loads(tables[-1])["measured"].values() for m in keys.values()]
        if run == 1:
            assert measured and not pooled_lines and not any("pooled" in m for m in measured)
        if run == 2:  # a key whose run 1 found one candidate 10 % ahead of the rest is settled: not timed again
            assert set(pooled_lines) <= {"2"}, proc.stderr[-3000:]
            assert bool(pooled_lines) == any("pooled" in m for m in measured), proc.stderr[-3000:]
            for m in measured:
                settled = pooling.to_time([m], list(m["candidates"]), 2) is None
                assert (m["pooled"]["runs"] == 2 and len(m["earlier"]) == 1) if "pooled" in m else settled, m
    assert tables[2] == tables[1] and not pooled_lines, proc.stderr[-3000:]


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_report_merge_pools_the_selections_of_several_cold_record_runs(guard, tmp_path, capsys):
    """Three cold record runs (the first a process that times BLOCK=32 and 64 3 % slow) merged with
    ``--rule pooled``: the entry is the winner pooled over the three selections, all kept."""
    from autotune_guard import evidence
    from autotune_guard.report import cli

    prefixes = []
    for run, bias in enumerate(({32: 1.03, 64: 1.03}, {}, {})):
        winners.RANDOM.seed(run)
        winners.BIAS.update(bias)
        try:
            guard({"AUTOTUNE_MODE": "record", "AUTOTUNE_RECORD_PATH": str(tmp_path / f"rec-{run}" / "run")})
            winners.launch(winners.make(ORDER))
            evidence.write_files()
        finally:
            winners.BIAS.clear()
        prefixes.append(str(tmp_path / f"rec-{run}" / "run"))
    own = [_block(_record_entry(tmp_path / f"rec-{run}")["measured"]["winner"]) for run in range(3)]
    assert own[0] == 16, own
    capsys.readouterr()
    assert cli.main(["merge", "--allow-partial", "--rule", "pooled", *prefixes, "-o", str(tmp_path / "t.json")]) == 0
    said = capsys.readouterr().out
    table = json.loads((tmp_path / "t.json").read_text())
    (entry,) = table["kernels"][KERNEL].values()
    (measured,) = table["measured"][KERNEL].values()
    assert entry["kwargs"]["BLOCK"] == 32 and measured["pooled"]["runs"] == 3 and len(measured["earlier"]) == 2
    assert "pooled over 3 processes" in said, said  # the records disagree (16 once): the merge says why
    assert cli.main(["show", str(tmp_path / "t.json")]) == 0
    assert "POOLED over 3 cold runs" in capsys.readouterr().out


def _record_entry(folder):
    (path,) = folder.glob("run*.json")
    (entry,) = json.loads(path.read_text())["kernels"][KERNEL].values()
    return entry
