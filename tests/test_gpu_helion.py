"""The Helion family where Helion can search: a CUDA GPU (the GPU tier; scripts/run_gpu_bench.sh).
auto searches once and notes it; record -> merge -> pinned searches nothing and runs the recorded
config; the README's command on 2 ranks searches once for the job, and its run 2 nothing."""

import json
import os
import subprocess
import sys
import tempfile

import pytest

from support import TESTS, clean_env, last_json

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # the GPU tier: Helion's import (2.5 s of CPU) only where it can run
    pytest.skip("Helion's search needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("helion")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="Helion's search needs a CUDA GPU")]


def env(**settings):
    found = clean_env(**settings)
    found.pop("TRITON_INTERPRET", None)
    found.setdefault("HELION_AUTOTUNE_PROGRESS_BAR", "0")
    return found


def run(**settings):
    proc = subprocess.run([sys.executable, "-m", "kernels.helion_kernels", "listed"], env=env(**settings),
                          capture_output=True, text=True, timeout=600, cwd=TESTS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return last_json(proc.stdout)


def job(nproc: int, **settings):
    results = tempfile.mkdtemp()  # a file a rank: their stdout lines can interleave
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(nproc), "-m", "kernels.helion_kernels", "listed"],
                          env=env(HELION_KERNELS_RESULTS=results, **settings),
                          capture_output=True, text=True, timeout=600, cwd=TESTS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(open(os.path.join(results, f"rank{rank}.json")).read()) for rank in range(nproc)]


def test_auto_searches_once_and_record_merge_pinned_searches_nothing(tmp_path):
    auto = run(AUTOTUNE_MODE="auto")
    assert auto["right"] and auto["searches"] == ["FiniteSearch"], auto
    (choice,) = auto["log"].values()
    assert choice.endswith(";timed")
    prefix = tmp_path / "rec" / "run"
    recorded = run(AUTOTUNE_RECORD_PATH=prefix)
    assert recorded["searches"] == ["FiniteSearch"]
    tables = tmp_path / "tables"
    arch = next(iter(recorded["log"])).split("|")[0]
    merge = subprocess.run([sys.executable, "-m", "autotune_guard.report", "merge", str(prefix), "-o",
                            str(tables / f"{arch}.json")],
                           env=env(), capture_output=True, text=True, timeout=120)
    assert merge.returncode == 0, merge.stderr
    pinned = run(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables, AUTOTUNE_ON_MISS="error")
    assert pinned["right"] and pinned["searches"] == [] and pinned["config"] == recorded["config"], pinned
    (choice,) = pinned["log"].values()
    assert choice.endswith(";table")


def test_the_readme_command_searches_once_for_the_job_and_run_2_nothing(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    first = job(2, AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=tables)
    # one search for the job: the claimer's, or (a kernel Helion searches across ranks, as under
    # torch 2.11) one search every rank takes part in
    together = first[0]["collective"] if first else False
    assert len(first) == 2 and sum(len(rank["searches"]) for rank in first) == (2 if together else 1), first
    assert first[0]["config"] == first[1]["config"] and all(rank["right"] for rank in first)
    second = job(2, AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=tables)
    assert [rank["searches"] for rank in second] == [[], []], second
    assert {json.dumps(rank["config"], sort_keys=True) for rank in second + first} == {
        json.dumps(first[0]["config"], sort_keys=True)}
