"""Autotuners that are not Triton's, and Triton's timer called from outside a governed autotuner,
are named once, counted as not governed, and refused by pinned mode with AUTOTUNE_ON_MISS=error.
Real kernels under TRITON_INTERPRET=1 in cold processes (tests/kernels/custom_tuners.py)."""

import pytest

from support import clean_env, run_python

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

LAUNCH_BOTH = """
import kernels.custom_tuners as ct, kernels.demo as demo
import torch
gptq, forked = ct.gptq(timer=ct.random_timer), ct.forked()
for _ in range(2):
    assert torch.equal(ct.launch(gptq), torch.arange(100.) * 2)
    assert torch.equal(ct.launch(forked), torch.arange(100.) * 3)
print("timer calls", len(demo.TIMER_CALLS))
"""

HAND_TUNED = """
import kernels.custom_tuners as ct, kernels.demo as demo
import triton
for what in ("hand", "plain"):
    try:
        ct.tune_by_hand() if what == "hand" else triton.testing.do_bench(lambda: None)
    except Exception as exc:  # on the CPU, Triton's own timer has no driver to time with
        print(what, type(exc).__name__)
"""


def run(code, check=True, **settings):
    return run_python(code, env=clean_env(AUTOTUNE_LOG_LEVEL="INFO", **settings), check=check)


def test_a_kernelinterface_autotuner_of_its_own_is_named_once_and_counted_in_the_exit_line():
    proc = run(LAUNCH_BOTH, AUTOTUNE_MODE="auto")
    for kernel, cls in (("double_kernel", "GptqAutotuner"), ("triple_kernel", "ForkedAutotuner")):
        said = [line for line in proc.stderr.splitlines() if f"kernels.custom_tuners.{kernel}: its autotuner" in line]
        assert len(said) == 1 and f"kernels.custom_tuners.{cls} is a triton.KernelInterface of its own" in said[0], \
            proc.stderr
    assert "2 not governed: kernels.custom_tuners.double_kernel, kernels.custom_tuners.triple_kernel" in proc.stderr
    assert "timer calls 6" in proc.stdout  # each tuner timed its 3 configs once: the guard changed nothing


def test_pinned_with_on_miss_error_refuses_a_custom_autotuner_before_it_times():
    proc = run(LAUNCH_BOTH, check=False, AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error")
    # an on-purpose refusal reads as one: no traceback (uncaught.refusal_lines)
    assert proc.returncode != 0 and "refused: kernel kernels.custom_tuners.double_kernel" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "kernels.custom_tuners.double_kernel" in proc.stderr and "AUTOTUNE_ON_MISS=error" in proc.stderr
    assert "timer calls" not in proc.stdout


def test_a_kernel_left_to_its_own_tuning_by_scope_is_not_named():
    proc = run(LAUNCH_BOTH, AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error",
               AUTOTUNE_CONFIG_INVARIANT="double_kernel,triple_kernel")
    assert "not governed" not in proc.stderr and "timer calls 6" in proc.stdout, proc.stderr


def test_the_timer_sentinel_names_a_hand_written_tuner_and_leaves_a_plain_measurement_alone():
    proc = run(HAND_TUNED, AUTOTUNE_MODE="auto")
    assert proc.stderr.count("kernels.custom_tuners.tune_by_hand times 3 triton.Config candidates with "
                             "triton.testing.do_bench") == 1, proc.stderr
    assert "1 not governed: kernels.custom_tuners.tune_by_hand" in proc.stderr
    assert "called from __main__.<module>, outside any autotuner" in proc.stderr
    # Pinned with on_miss=error: the hand-written tuner is refused at its first timer call; the
    # plain measurement is not (it fails on Triton's own terms, without a driver).
    proc = run(HAND_TUNED, AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error")
    assert "hand SelectionError" in proc.stdout and "plain RuntimeError" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("mode", ["auto", "record"])
def test_a_governed_autotuner_timing_through_triton_testing_is_not_named(tmp_path, mode):
    code = """
import random, triton, triton.language as tl, torch

def through_triton(kernel_call, quantiles):
    try:
        return triton.testing.do_bench(kernel_call, quantiles=quantiles)
    except RuntimeError:  # no driver on the CPU: the sentinel has already looked at the callers
        kernel_call()
        t = random.random()
        return [t, t, t]

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"], do_bench=through_triton)
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

x = torch.ones(64)
k[lambda meta: (triton.cdiv(64, meta["BLOCK"]),)](x, 64)
"""
    with open(tmp_path / "prog.py", "w") as f:
        f.write(code)
    paths = {"AUTOTUNE_RECORD_PATH": tmp_path / "rec"} if mode == "record" else {}
    proc = run(f"import runpy; runpy.run_path({str(tmp_path / 'prog.py')!r}, run_name='__main__')", AUTOTUNE_MODE=mode,
               **paths)
    assert "not governed" not in proc.stderr and "outside any autotuner" not in proc.stderr, proc.stderr
    assert "made 1 autotune choice, digest" in proc.stderr, proc.stderr
