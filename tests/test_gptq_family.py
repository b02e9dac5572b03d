"""A GPTQ-style ``custom_autotune`` (AutoGPTQ's, in ``kernels.gptq_autotune``) governed in every
mode by its family (``adapters/triton/gptq.py``), not only named: a real grouped-matmul kernel
under TRITON_INTERPRET=1, cold processes, record files merged into tables, 3 torchrun ranks over
gloo. The tuner's timer is counted (``TIMER_CALLS``) to show who timed: a cold tuning of its two
keys (32,32,32 and 64,32,32, after its power-of-two rounding) times 4 + 5 pruned candidates."""

import json
import os

import pytest

from support import TESTS, clean_env, last_json, rank_file, run_python, torchrun

from autotune_guard.core.model import signature

JOB = os.path.join(TESTS, "progs", "gptq_job.py")
KERNEL = "kernels.gptq_autotune.matmul_kernel"
KEYS = {"32,32,32": 4, "64,32,32": 5}  # the tuner's keys -> candidates its pruner leaves (one timer call each)
TUNED = sum(KEYS.values())
SMALLEST = "BLOCK_SIZE_K=16,BLOCK_SIZE_M=16,BLOCK_SIZE_N=16,GROUP_SIZE_M=1,num_warps=1,num_stages=2,num_ctas=1"


def entry(key):
    return f"interpret|{KERNEL}|{key}"


def job(check=True, **settings):
    """One cold process of the job; (its JSON line or None, the CompletedProcess)."""
    proc = run_python(open(JOB).read(), env=clean_env(AUTOTUNE_LOG_LEVEL="INFO", **settings), check=check)
    return (last_json(proc.stdout) if proc.returncode == 0 else None), proc


def key_of(m):
    return "64,32,32" if m == 64 else "32,32,32"  # the tuner's key of an (M x 32) @ (32 x 32) product


def configs(choices):
    return {k: v.rpartition(";")[0] for k, v in choices.items()}


def hows(choices):
    return {v.rpartition(";")[2] for v in choices.values()}


def governed(result, proc):
    """Nothing named as not governed, the sentinel on Triton's timer included; the tuner launches
    what the log says it chose."""
    assert result["ungoverned"] == {} and "not govern" not in proc.stderr, proc.stderr
    assert {entry(k): s for k, s in result["cached"].items()} == configs(result["choices"])


@pytest.mark.slow
def test_auto_lets_the_tuner_time_each_key_once_and_logs_its_winner():
    result, proc = job(AUTOTUNE_MODE="auto")
    assert result["timer_calls"] == TUNED and sorted(result["choices"]) == sorted(entry(k) for k in KEYS)
    assert hows(result["choices"]) == {"timed"}
    # 30 rounds to the key of 32: its first launch times nothing; the second pass times nothing
    assert result["launches"] == [[32, 4], [30, 0], [64, 5], [32, 0], [30, 0], [64, 0]]
    governed(result, proc)


@pytest.mark.slow
def test_record_keeps_the_timings_merge_makes_a_table_and_pinned_follows_it_untimed(tmp_path):
    from autotune_guard import report
    from autotune_guard.core import schema

    prefix = tmp_path / "rec"
    recorded, proc = job(AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=prefix)
    assert recorded["timer_calls"] == TUNED
    governed(recorded, proc)
    entries = schema.read_document(rank_file(prefix, 0))["kernels"][KERNEL]
    assert sorted(entries) == sorted(KEYS)
    for key, count in KEYS.items():
        assert entries[key]["how"] == "timed" and len(entries[key]["timings"]) == count
        assert len(entries[key]["candidates"]) == 5 and entries[key]["provenance"]["count"] == 5
        assert all(len(t) == 3 and t[0] > 0 for t in entries[key]["timings"].values())  # the tuner's quantiles
        assert recorded["choices"][entry(key)] == f"{entries[key]['signature']};timed"
    tables = tmp_path / "tables"
    tables.mkdir()
    assert report.main(["merge", str(prefix), "-o", str(tables / "interpret.json")]) == 0
    for _ in range(2):  # cold processes: each pins the recorded winners and times nothing
        pinned, proc = job(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error", AUTOTUNE_TABLE_PATH=tables)
        assert pinned["timer_calls"] == 0 and hows(pinned["choices"]) == {"table"}
        assert configs(pinned["choices"]) == configs(recorded["choices"])
        governed(pinned, proc)
    # a table recorded against another version of the kernel (one candidate more now): named ...
    other, proc = job(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables, GPTQ_VERSION="another")
    said = [line for line in proc.stderr.splitlines() if "recorded against another version" in line]
    assert len(said) == 1 and f"kernel {KERNEL}" in said[0] and "5 candidates then, 6 now" in said[0], proc.stderr
    assert other["timer_calls"] == 0 and configs(other["choices"]) == configs(recorded["choices"])
    # ... and refused with AUTOTUNE_ON_MISS=error, before anything is timed or launched
    _, proc = job(check=False, AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error", AUTOTUNE_TABLE_PATH=tables,
                  GPTQ_VERSION="another")
    assert proc.returncode != 0 and "recorded against another version" in proc.stderr, proc.stderr
    assert "refused with AUTOTUNE_ON_MISS=error" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_pinned_without_a_table_times_nothing_and_cold_processes_agree():
    runs = [job(AUTOTUNE_MODE="pinned") for _ in range(2)]
    for result, proc in runs:
        assert result["timer_calls"] == 0 and hows(result["choices"]) == {"fallback (min_cost)"}
        # min_cost, the on-miss default: the smallest tile among what the tuner's pruner leaves
        assert configs(result["choices"]) == {entry(k): SMALLEST for k in KEYS}
        governed(result, proc)
    _, proc = job(check=False, AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error")
    assert proc.returncode != 0 and f"kernel {KERNEL} key (" in proc.stderr and "Traceback" not in proc.stderr
    assert "timer_calls" not in proc.stdout


@pytest.mark.slow
def test_a_kernel_left_to_its_own_tuning_by_scope_is_timed_by_its_tuner_and_not_named():
    result, proc = job(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error", AUTOTUNE_CONFIG_INVARIANT="matmul_kernel")
    assert result["timer_calls"] == TUNED and result["choices"] == {} and "not governed" not in proc.stderr


@pytest.mark.slow
def test_a_tuner_class_defined_before_the_guard_is_installed_is_governed_too():
    code = """
import torch, autotune_guard, kernels.gptq_autotune as gptq
assert not getattr(gptq.CustomizedTritonAutoTuner.run, "_autotune_guard", False)  # no policy at start: untouched
autotune_guard.install({"AUTOTUNE_MODE": "pinned"})
a, b = torch.rand(32, 32), torch.rand(32, 32)
assert torch.allclose(gptq.matmul(a, b), a @ b, atol=1e-4)
print(len(gptq.TIMER_CALLS), autotune_guard.choice_log())
"""
    proc = run_python(code, env=clean_env())
    assert proc.stdout.startswith("0 ") and f"'{entry('32,32,32')}': '{SMALLEST};fallback (min_cost)'" in proc.stdout, proc.stdout


def test_each_new_policy_decides_again_in_one_process(guard):
    import torch

    from autotune_guard import choice_log
    from kernels import gptq_autotune as gptq

    tuner = gptq.new_tuner()  # a cache no other test filled
    a, b = torch.rand(32, 32), torch.rand(32, 32)
    calls = len(gptq.TIMER_CALLS)
    guard({"AUTOTUNE_MODE": "auto"})
    assert torch.allclose(gptq.matmul(a, b, tuner), a @ b, atol=1e-4)
    assert len(gptq.TIMER_CALLS) - calls == 4 and hows(choice_log()) == {"timed"}
    guard({"AUTOTUNE_MODE": "pinned"})  # the timed winner in the tuner's cache is not pinned mode's choice
    assert torch.allclose(gptq.matmul(a, b, tuner), a @ b, atol=1e-4)
    assert len(gptq.TIMER_CALLS) - calls == 4 and configs(choice_log()) == {entry("32,32,32"): SMALLEST}
    assert tuner.best_config.kwargs["BLOCK_SIZE_M"] == 16 and tuner.best_config.kwargs["BLOCK_SIZE_K"] == 16
    guard({"AUTOTUNE_MODE": "auto"})  # the pinned entry is hidden: the tuner times again in this epoch
    gptq.matmul(a, b, tuner)
    assert len(gptq.TIMER_CALLS) - calls == 8 and hows(choice_log()) == {"timed"}


@pytest.mark.slow
def test_consensus_one_rank_times_each_key_for_the_job_and_a_table_makes_the_next_run_untimed(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    env = clean_env(AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=tables, AUTOTUNE_CONSENSUS_TIMEOUT=180)
    runs = []
    for run in ("run1", "run2"):
        out = tmp_path / run
        out.mkdir()
        proc = torchrun(JOB, 3, env=env, args=[str(out)])
        ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(3)]
        for rank in ranks:  # every rank chose alike, launched what it chose, and nothing was named
            assert configs(rank["choices"]) == configs(ranks[0]["choices"])
            governed(rank, proc)
        runs.append(ranks)
    first, second = runs
    assert sorted(first[0]["choices"]) == sorted(entry(k) for k in KEYS)
    # run 1: each key timed once for the job, by one rank (its first launch of that key), followed by the others
    for key, count in KEYS.items():
        timed = [(r["rank"], calls) for r in first for size, calls in r["launches"] if calls and key_of(size) == key]
        assert len(timed) == 1 and timed[0][1] == count, first
    assert sum(r["timer_calls"] for r in first) == TUNED
    assert {h for r in first for h in hows(r["choices"])} == {"consensus"}
    # the table grew by the job's winners; run 2 times nothing and says the table decided
    table = json.loads((tables / "interpret.json").read_text())["kernels"][KERNEL]
    assert {entry(k): signature({"kwargs": {}, **e}) for k, e in table.items()} == configs(first[0]["choices"])
    assert [r["timer_calls"] for r in second] == [0, 0, 0]
    assert {h for r in second for h in hows(r["choices"])} == {"table"}
    assert configs(second[0]["choices"]) == configs(first[0]["choices"])
