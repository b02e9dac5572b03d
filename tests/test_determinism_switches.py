"""Issue 36, part A: the ecosystem's deterministic and batch-invariant switches select pinned when
no AUTOTUNE_MODE was given, as torch's deterministic flag does, each named in the log as the
reason. Real torch (CPU), real Triton kernels under TRITON_INTERPRET=1, in cold processes."""

import pytest

from autotune_guard.adapters import torch_flags
from autotune_guard.adapters.inductor.flags import flag
from autotune_guard.core.settings import derived_mode, policy_from_settings
from support import clean_env, last_json, run_python

RUN_DEMO = """
import json, torch
{before}
from kernels import demo
{after}
import autotune_guard
x = torch.arange(100, dtype=torch.float32)
assert torch.equal(demo.add(x, x), x + x)
p = autotune_guard.active_policy()
print(json.dumps({{"mode": p and p.mode, "timer_calls": len(demo.TIMER_CALLS), "log": autotune_guard.choice_log()}}))
"""


def _lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("autotune_guard")]


def _run(env, before="", after=""):
    proc = run_python(RUN_DEMO.format(before=before, after=after), env=clean_env(AUTOTUNE_LOG_LEVEL="info", **env))
    return last_json(proc.stdout), _lines(proc.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("env, before, after, reason", [
    ({"TORCHINDUCTOR_BATCH_INVARIANT": "1"}, "", "", "Inductor's batch_invariant config"),
    ({"TORCHINDUCTOR_DETERMINISTIC": "1"}, "", "", "Inductor's deterministic config"),
    ({}, "", "import torch._inductor.config as c; c.batch_invariant = True", "Inductor's batch_invariant config"),
    ({}, "import torch._inductor.config as c; c.deterministic = True", "", "Inductor's deterministic config"),
    ({"VLLM_BATCH_INVARIANT": "1"}, "", "", "vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT)"),
], ids=["inductor-batch-invariant-env", "inductor-deterministic-env", "inductor-batch-invariant-set-in-code",
        "inductor-deterministic-set-in-code", "vllm-batch-invariant"])
def test_each_switch_pins_and_is_named_as_the_reason(env, before, after, reason):
    result, lines = _run(env, before, after)
    assert result["mode"] == "pinned" and result["timer_calls"] == 0, (result, lines)
    assert result["log"] and all(v.endswith(";fallback (min_cost)") for v in result["log"].values())  # no table
    assert any(f"mode pinned, from {reason}" in line and "found at the first launch" in line for line in lines), lines


@pytest.mark.slow
def test_an_explicit_mode_wins_and_off_switches_leave_auto():
    result, _ = _run({"TORCHINDUCTOR_BATCH_INVARIANT": "1", "AUTOTUNE_MODE": "auto"})
    assert result["mode"] == "auto" and result["timer_calls"] > 0
    off = {"TORCHINDUCTOR_BATCH_INVARIANT": "0", "TORCHINDUCTOR_DETERMINISTIC": "", "VLLM_BATCH_INVARIANT": "0"}
    result, lines = _run(off)
    assert result["mode"] == "auto" and result["timer_calls"] > 0, lines
    # Set in the environment but turned off in code: Inductor's config module is the truth once imported.
    result, _ = _run({"TORCHINDUCTOR_BATCH_INVARIANT": "1"}, "import torch._inductor.config as c; c.batch_invariant = False")
    assert result["mode"] == "auto"


def test_the_reason_is_the_first_request_found(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "torch._inductor.config", raising=False)
    for name in ("TORCHINDUCTOR_BATCH_INVARIANT", "TORCHINDUCTOR_DETERMINISTIC", "VLLM_BATCH_INVARIANT"):
        monkeypatch.delenv(name, raising=False)
    assert torch_flags.determinism_reason(flag) == ""
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "not a number")  # vLLM would refuse it; it is no request here
    assert torch_flags.determinism_reason(flag) == ""
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "2")
    assert "vLLM" in torch_flags.determinism_reason(flag)
    monkeypatch.setenv("TORCHINDUCTOR_DETERMINISTIC", "1")
    assert "Inductor's deterministic" in torch_flags.determinism_reason(flag)
    derived = derived_mode(policy_from_settings({}), torch_flags.determinism_reason(flag))
    assert derived.mode == "pinned" and derived.mode_from.startswith("Inductor's deterministic config")
