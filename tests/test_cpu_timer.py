"""Where Triton cannot time (issue 58, item 2): under TRITON_INTERPRET=1 the README's command runs an
ordinary kernel that brings no ``do_bench``, the wall clock timing its candidates, said once a
process and named in what tables and records keep (``timer: wall-clock``); a kernel's own
``do_bench`` stays its own; with neither a GPU driver nor the interpreter the failure is one block
of lines. And a candidate clearly out of the race after the first pass is not timed again (issue
59, defect 1: a candidate whose timing took 20 s was timed again for nothing).

The processes run the checkout (PYTHONPATH names it), so that the file runs under another
Triton's venv as well (3.3.1's: ``PYTHONPATH=/work/main <venv>/bin/python -m pytest ...``)."""

import json
import os
import time

import pytest
import torch
import triton
import triton.language as tl

from support import REPO, TESTS, clean_env, run_python, torchrun

PROG = os.path.join(TESTS, "progs", "cpu_plain_job.py")
ONCE = "timed with the wall clock"
KERNELS = {"__main__.scale_kernel", "__main__.add_kernel"}


def _env(**settings):
    env = clean_env(OMP_NUM_THREADS=1, **settings)
    env.pop("AUTOTUNE_RETIME_ROUNDS", None)  # the README's command: the rounds as they are by default
    env["PYTHONPATH"] = os.pathsep.join([TESTS, REPO])  # the checkout, from any venv
    return env


def _ranks(stdout) -> dict:
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {line["rank"]: line for line in lines}


def _once_lines(stderr, rank) -> list:
    return [line for line in stderr.splitlines() if f"autotune_guard[rank {rank}]" in line and ONCE in line]


@pytest.mark.slow
def test_the_readme_command_runs_a_plain_kernel_on_the_cpu_and_run_two_times_nothing(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    env = _env(AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=str(tables))
    first = torchrun(PROG, 2, env=env)
    ranks = _ranks(first.stdout)
    assert sorted(ranks) == [0, 1] and len({r["hash"] for r in ranks.values()}) == 1, first.stdout
    assert sum(r["bench_calls"] for r in ranks.values()) > 0 and "Traceback" not in first.stderr, first.stderr
    for rank, line in ranks.items():  # said once by each rank that timed, however many keys it timed
        assert len(_once_lines(first.stderr, rank)) == (1 if line["bench_calls"] else 0), first.stderr
    table = json.loads((tables / "interpret.json").read_text())
    assert set(table["kernels"]) == KERNELS and all(len(keys) == 2 for keys in table["kernels"].values())
    measured = [m for keys in table["measured"].values() for m in keys.values()]
    assert len(measured) == 4 and {m.get("timer") for m in measured} == {"wall-clock"}, measured
    second = torchrun(PROG, 2, env=env)
    again = _ranks(second.stdout)
    assert [again[r]["bench_calls"] for r in (0, 1)] == [0, 0], second.stdout
    assert {r["hash"] for r in again.values()} == {ranks[0]["hash"]} and ONCE not in second.stderr
    exits = [line for line in second.stderr.splitlines() if " made 4 autotune choices" in line]
    assert len(exits) == 2 and all(line.endswith("(4 table)") for line in exits), second.stderr


@pytest.mark.slow
def test_split_tuning_names_the_wall_clock_in_every_measurement(tmp_path):
    """Under split tuning the finalists' rank may time none of a key's winners itself: the shares
    carry their timer's name, so a table made on the CPU never passes for GPU timings."""
    tables = tmp_path / "tables"
    tables.mkdir()
    env = _env(AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=str(tables), AUTOTUNE_CONSENSUS_SPLIT="1")
    torchrun(PROG, 2, env=env)
    table = json.loads((tables / "interpret.json").read_text())
    measured = [m for keys in table["measured"].values() for m in keys.values()]
    assert len(measured) == 4 and {m.get("timer") for m in measured} == {"wall-clock"}, measured


@pytest.mark.slow
def test_record_says_the_wall_clock_once_and_every_record_names_it(tmp_path):
    prefix = tmp_path / "runs" / "rec"
    proc = run_python(f"import runpy; runpy.run_path({PROG!r}, run_name='__main__')",
                      env=_env(AUTOTUNE_RECORD_PATH=str(prefix)))
    assert _ranks(proc.stdout)[0]["bench_calls"] > 0
    said = _once_lines(proc.stderr, 0)
    assert len(said) == 1 and "not GPU timings" in said[0] and "TRITON_INTERPRET=1" in said[0], proc.stderr
    [record] = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("rec.rank0.")]
    entries = [e for keys in json.loads(record.read_text())["kernels"].values() for e in keys.values()]
    assert len(entries) == 4 and {e["measured"].get("timer") for e in entries} == {"wall-clock"}, entries


@pytest.mark.slow
def test_no_gpu_driver_and_no_interpreter_is_one_block_not_a_traceback(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: Triton finds its driver")
    env = _env(AUTOTUNE_MODE="auto")
    del env["TRITON_INTERPRET"]
    proc = run_python(f"import runpy; runpy.run_path({PROG!r}, run_name='__main__')", env=env, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.startswith(("autotune_guard: ", "  "))]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 3 and lines[0].startswith("autotune_guard: error: Triton found no GPU driver"), lines
    assert "TRITON_INTERPRET=1" in lines[1] and "wall clock" in lines[1] and "AUTOTUNE_MODE=pinned" in lines[1]
    assert lines[2] == "  (AUTOTUNE_TRACEBACK=1 shows the traceback)"


@triton.jit
def add_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def test_a_kernel_that_brings_its_own_timer_keeps_it_and_a_plain_one_gets_the_wall_clock(guard):
    from autotune_guard.adapters.triton.wall_timer import wall_clock_timer
    from kernels import demo

    guard({"AUTOTUNE_MODE": "auto"})
    # autotuned here, the guard in place: Triton 3.3 alone resolves its timer at decoration, and fails
    plain_kernel = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 64)], key=["n"])(add_one_kernel)
    x = torch.arange(200, dtype=torch.float32)
    out = torch.empty_like(x)
    plain_kernel[lambda meta: (triton.cdiv(200, meta["BLOCK"]),)](x, out, 200)
    assert out.equal(x + 1) and plain_kernel.do_bench is wall_clock_timer
    calls = len(demo.TIMER_CALLS)
    assert demo.add(x[:77], x[:77]).equal(2 * x[:77])
    assert len(demo.TIMER_CALLS) > calls and demo.add_kernel.do_bench is demo.random_timer


def test_the_wall_clock_timer_answers_as_tritons_do_bench():
    from autotune_guard.adapters.triton import wall_timer

    calls = []
    found = wall_timer.wall_clock_timer(lambda: calls.append(time.sleep(0.001)), quantiles=(0.5, 0.2, 0.8))
    assert isinstance(found, list) and len(found) == 3 and found[1] <= found[0] <= found[2] and found[0] >= 1.0
    assert wall_timer.timer_of(found) == "wall-clock" and len(calls) == 1 + wall_timer.MOST_REPEATS
    assert isinstance(wall_timer.wall_clock_timer(lambda: None, quantiles=(0.5,)), float)  # one quantile: a number
    assert isinstance(wall_timer.wall_clock_timer(lambda: None), float)  # none asked: the median
    slow = []
    wall_timer.wall_clock_timer(lambda: slow.append(time.sleep(0.1)), quantiles=(0.5, 0.2, 0.8))
    assert len(slow) == 1 + wall_timer.LEAST_REPEATS  # a slow candidate is not timed for long


# --- issue 59: a candidate out of the race is timed once ------------------------------------------

@pytest.mark.parametrize("mode", ["consensus", "record"])
def test_a_slow_candidate_far_behind_is_timed_once_by_a_real_kernel(guard, tmp_path, mode):
    from kernels import winners

    timed = []

    def timer(kernel_call, quantiles):  # the kernel's own: BLOCK 64's timing takes 0.3 s, and it is 12x slower
        kernel_call()
        block = int(winners.TAG[0])
        timed.append(block)
        if block == 64:
            time.sleep(0.3)
        t = {32: 1.0, 64: 12.0}[block]
        return [t, t * 0.99, t * 1.01]

    settings = {"AUTOTUNE_TABLE_PATH": str(tmp_path)} if mode == "consensus" else \
        {"AUTOTUNE_RECORD_PATH": str(tmp_path / "rec")}
    guard({"AUTOTUNE_MODE": mode, "AUTOTUNE_RETIME_ROUNDS": "10", **settings})
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=1) for b in (64, 32)], key=["n"],
                             do_bench=timer)(winners.tagged_kernel)
    started = time.monotonic()
    assert winners.launch(kernel).equal(2 * torch.arange(1000, dtype=torch.float32))
    assert sorted(timed) == [32, 64] and time.monotonic() - started < 2.0, timed  # was [32, 32, 64, 64]
    assert kernel.best_config.kwargs == {"BLOCK": 32}
