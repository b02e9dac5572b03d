"""The libraries' own switches (issue 47): each is read where set, said in one start-up line with
how it combines with the mode, carried in the evidence files and printed by ``report show``; the
batch-invariance switch alone wakes the guard and pins. Real torch (CPU), real Triton kernels under
TRITON_INTERPRET=1, in cold processes."""

import glob
import json

import pytest

from autotune_guard.core import switches
from support import clean_env, last_json, run_python

RUN_DEMO = """
import json, torch
from kernels import demo
import autotune_guard
x = torch.arange(100, dtype=torch.float32)
assert torch.equal(demo.add(x, x), x + x)
p = autotune_guard.active_policy()
print(json.dumps({"mode": p and p.mode, "timer_calls": len(demo.TIMER_CALLS), "log": autotune_guard.choice_log()}))
"""
SWITCH_VARS = [*switches.KNOWN, "GEMM_A8W8_TRITON_AUTOTUNE"]


def _run(**env):
    """The demo under ``env`` alone (the caller's switch variables removed): (result, the switch line or None)."""
    base = {k: v for k, v in clean_env(**env).items() if k in env or k not in SWITCH_VARS}
    proc = run_python(RUN_DEMO, env=base)
    lines = [line for line in proc.stderr.splitlines() if "library switches in force" in line]
    assert len(lines) <= 1, proc.stderr
    return last_json(proc.stdout), (lines[0] if lines else None)


@pytest.mark.slow
@pytest.mark.parametrize("name, value, words", [
    ("FLA_CACHE_MODE", "1", "fla's CachedAutotuner reads its configs from its own JSON cache; those configs bypass the table"),
    ("HELION_ASSERT_CACHE_HIT", "1", "Helion's kernels are governed: a table's entry is a hit; a search the mode would run is refused"),
    ("FLAGGEMS_DB_URL", "sqlite:////tmp/tuned.db", "pinned and consensus decide governed keys without reading or writing it"),
    ("GEMM_A8W8_TRITON_AUTOTUNE", "1", "aiter's GEMM_A8W8 kernels autotune at run time through Triton's autotuner; "
                                       "governed (mode pinned)"),
    ("LIGER_FUSED_MOE_AUTOTUNE", "1", "Liger's fused MoE kernels autotune at run time"),
    ("VLLM_BATCH_INVARIANT", "1", "vLLM's batch-invariant kernels: pinned already"),
    ("TORCHINDUCTOR_BATCH_INVARIANT", "1", "Inductor's batch-invariant kernels: pinned already"),
], ids=["fla", "helion", "flaggems", "aiter", "liger", "vllm", "inductor"])
def test_each_switch_is_said_at_start_up_and_carried_in_the_evidence(tmp_path, capsys, name, value, words):
    from autotune_guard import report

    result, line = _run(**{name: value}, AUTOTUNE_MODE="pinned", AUTOTUNE_DIGEST_PATH=tmp_path / "c")
    assert result["mode"] == "pinned" and result["timer_calls"] == 0
    assert line is not None and f"{name}={value} (" in line and words in line, line
    [path] = glob.glob(str(tmp_path / "c.rank0.*.json"))
    with open(path) as f:
        assert json.load(f)["switches"] == {name: value}
    capsys.readouterr()
    assert report.main(["show", path]) == 0
    assert f"switches {name}={value}" in capsys.readouterr().out


@pytest.mark.slow
def test_inductors_batch_invariance_switch_alone_wakes_the_guard_and_pins():
    # Inductor reads TORCHINDUCTOR_BATCH_INVARIANT as == "1": so does the .pth's wake test.
    result, line = _run(TORCHINDUCTOR_BATCH_INVARIANT="1")  # no AUTOTUNE_* at all
    assert result["mode"] == "pinned" and result["timer_calls"] == 0, (result, line)
    assert result["log"] and all(v.endswith(";fallback (min_cost)") for v in result["log"].values())  # no table
    assert ("TORCHINDUCTOR_BATCH_INVARIANT=1 (Inductor's batch-invariant kernels: no AUTOTUNE_MODE: pinned, "
            "from this request") in line
    result, line = _run(TORCHINDUCTOR_BATCH_INVARIANT="true")  # not what Inductor reads as on
    assert result["mode"] is None and line is None


@pytest.mark.slow
def test_the_batch_invariance_switch_alone_wakes_the_guard_and_pins():
    result, line = _run(VLLM_BATCH_INVARIANT="1")  # no AUTOTUNE_* at all
    assert result["mode"] == "pinned" and result["timer_calls"] == 0, (result, line)
    assert result["log"] and all(v.endswith(";fallback (min_cost)") for v in result["log"].values())  # no table
    assert "VLLM_BATCH_INVARIANT=1 (vLLM's batch-invariant kernels: no AUTOTUNE_MODE: pinned, from this request" in line

    result, line = _run(VLLM_BATCH_INVARIANT="1", AUTOTUNE_MODE="auto")
    assert result["mode"] == "auto" and result["timer_calls"] > 0
    assert "AUTOTUNE_MODE=auto wins: the kernels are timed, so a batch may meet another config" in line

    result, line = _run(VLLM_BATCH_INVARIANT="0")  # off: nothing wakes, nothing said
    assert result["mode"] is None and line is None
    result, line = _run(VLLM_BATCH_INVARIANT="false")  # not an integer: off, as it counts (it woke the guard)
    assert result["mode"] is None and line is None


def test_which_values_are_in_force():
    env = {"VLLM_BATCH_INVARIANT": "0", "FLA_CACHE_MODE": "off", "HELION_ASSERT_CACHE_HIT": "",
           "FLAGGEMS_DB_URL": "sqlite:///x.db", "MOE_TRITON_AUTOTUNE": "1", "AUTOTUNE_TRITON_AUTOTUNE": "1",
           "LIGER_FUSED_MOE_AUTOTUNE": "false", "PATH": "/bin"}
    assert switches.in_force(env) == {"FLAGGEMS_DB_URL": "sqlite:///x.db", "MOE_TRITON_AUTOTUNE": "1"}
    assert switches.in_force({"VLLM_BATCH_INVARIANT": "2"}) == {"VLLM_BATCH_INVARIANT": "2"}
    assert switches.in_force({"VLLM_BATCH_INVARIANT": "yes"}) == {}  # vLLM reads an integer
    assert switches.in_force({"TORCHINDUCTOR_BATCH_INVARIANT": "1"}) == {"TORCHINDUCTOR_BATCH_INVARIANT": "1"}
    assert switches.in_force({"TORCHINDUCTOR_BATCH_INVARIANT": "true"}) == {}  # Inductor reads == "1"
    assert switches.in_force({"HELION_ASSERT_CACHE_HIT": "true"}) == {}  # Helion reads == "1": honoured by no one
    assert switches.in_force({"HELION_ASSERT_CACHE_HIT": "1"}) == {"HELION_ASSERT_CACHE_HIT": "1"}
    assert switches.shown({"X": "a\nb"}) == "X=a\\nb"


def test_the_wake_test_reads_each_switch_as_its_library_does():
    from autotune_guard import _boot

    assert _boot.wakes({"VLLM_BATCH_INVARIANT": "2"}) and _boot.wakes({"TORCHINDUCTOR_BATCH_INVARIANT": "1"})
    assert not _boot.wakes({"VLLM_BATCH_INVARIANT": "0", "TORCHINDUCTOR_BATCH_INVARIANT": "0"})
    assert not _boot.wakes({"TORCHINDUCTOR_BATCH_INVARIANT": "yes"}) and not _boot.wakes({})
    assert not _boot.wakes({"VLLM_BATCH_INVARIANT": "false"}) and not _boot.wakes({"VLLM_BATCH_INVARIANT": " "})
