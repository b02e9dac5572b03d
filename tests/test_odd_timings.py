"""Timers that answer inf, NaN, 0 or nonsense where the guard times for others (consensus, record):
the program runs on as plain Triton would (issue 59: a timer returning inf for every config ended the
program with a bare ``ValueError: no candidate could be timed``; a 0.0 ms timing could end it with
``ZeroDivisionError``). The real ``kernels/winners.py`` kernel, its timer replaced."""

import json
import math

import pytest
import torch
import triton

from kernels import winners

ORDER = [16, 32, 64]


def _kernel(answer):
    """An autotuner over ORDER whose timer answers ``answer(block)`` (ms) for each candidate."""
    def timer(kernel_call, quantiles):
        kernel_call()
        t = answer(int(winners.TAG[0]))
        return [t, t, t]

    configs = [triton.Config({"BLOCK": b}, num_warps=1) for b in ORDER]
    return triton.autotune(configs=configs, key=["n"], do_bench=timer)(winners.tagged_kernel)


@pytest.mark.parametrize("bad", [math.inf, math.nan, 0.0, -1.0])
@pytest.mark.parametrize("mode", ["consensus", "record"])
def test_no_candidate_that_can_be_timed_runs_the_first_declared_and_says_so(guard, tmp_path, ag_log, bad, mode):
    from autotune_guard import choice_log
    from autotune_guard.evidence import table_growth

    settings = {"AUTOTUNE_TABLE_PATH": str(tmp_path)} if mode == "consensus" else \
        {"AUTOTUNE_RECORD_PATH": str(tmp_path / "rec")}
    guard({"AUTOTUNE_MODE": mode, **settings})
    out = winners.launch(_kernel(lambda block: bad))
    assert out.equal(2 * torch.arange(1000, dtype=torch.float32))
    table_growth.flush()
    (text,) = choice_log().values()
    assert text.startswith("BLOCK=16,"), text  # the first declared, as Triton launches it
    (said,) = [m for m in ag_log.messages() if "no candidate could be timed" in m]
    assert "tagged_kernel" in said and "key (1000," in said and "BLOCK=16" in said
    assert not (tmp_path / "interpret.json").exists()  # nothing frozen from no timing


def test_a_zero_timing_among_real_ones_never_wins_and_never_divides(guard, tmp_path):
    from autotune_guard import choice_log
    from autotune_guard.evidence import table_growth

    guard({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": str(tmp_path)})
    winners.launch(_kernel(lambda block: {16: 0.0, 32: 1.0, 64: 1.5}[block]))
    table_growth.flush()
    (text,) = choice_log().values()
    assert text.startswith("BLOCK=32,"), text
    table = json.loads((tmp_path / "interpret.json").read_text())
    (measured,) = table["measured"]["kernels.winners.tagged_kernel"].values()
    zero = measured["candidates"]["BLOCK=16,num_warps=1,num_stages=3,num_ctas=1"]
    assert measured["winner"].startswith("BLOCK=32,") and zero["median"] is None  # kept as could-not-run


@pytest.mark.parametrize("then", ["uninstall", "install"])
def test_a_record_is_whole_and_complete_when_its_policy_is_replaced(guard, tmp_path, then):
    """Issue 59: record mode, 10 keys, then ``uninstall()`` (or ``install()`` of another policy): the
    record held 6 of 10 choices, said ``complete: false``, and ``report merge`` refused it."""
    import glob

    import autotune_guard
    from autotune_guard.report import cli

    guard({"AUTOTUNE_MODE": "record", "AUTOTUNE_RECORD_PATH": str(tmp_path / "rec"), "AUTOTUNE_RETIME_ROUNDS": "0"})
    kernel = winners.make(ORDER)
    for n in range(100, 1100, 100):
        winners.launch(kernel, n)
    if then == "uninstall":
        autotune_guard.uninstall()
    else:
        guard({"AUTOTUNE_MODE": "auto"})
    (path,) = glob.glob(str(tmp_path / "rec.rank*.json"))
    record = json.loads(open(path).read())
    assert record["complete"] is True and len(record["kernels"]["kernels.winners.tagged_kernel"]) == 10
    assert cli.main(["merge", str(tmp_path / "rec"), "-o", str(tmp_path / "t.json")]) == 0
