"""The apply half of the family protocol (``deciding.first_launch``): a decision the engine could not
note, because another policy was installed while it decided, is kept by no family; each family's
first launch runs again under the policy in force now, and the key is noted once, under it. Real
kernels under TRITON_INTERPRET=1 (Triton's pinned and consensus paths, GPTQ's ``custom_autotune``,
FlagGems' ``LibTuner``) and Inductor's real ``CachingAutotuner`` over stand-in launchers; the new
policy is installed from inside the decision (the pinned rule's fallback line, a candidate's timer)."""

import logging

import pytest
import torch
import triton
import triton.language as tl

import autotune_guard
from test_inductor import X, _entry, _generated, patched  # noqa: F401  (patched: a fixture)

PINNED = {"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "first"}


class _InstallOnce(logging.Handler):
    """Installs ``policy`` (a new epoch) at the first line that contains ``said``."""

    def __init__(self, policy, said):
        super().__init__(logging.DEBUG)
        self.policy, self.said, self.installed = policy, said, 0

    def emit(self, record):
        if not self.installed and self.said in record.getMessage():
            self.installed += 1
            autotune_guard.install(self.policy)


@pytest.fixture
def meanwhile():
    """``meanwhile(policy, said)``: ``policy`` installed once while a decision is being taken."""
    log = logging.getLogger("autotune_guard")
    level, handlers = log.level, []

    def arm(policy, said="no table entry"):
        handler = _InstallOnce(policy, said)
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)
        handlers.append(handler)
        return handler

    yield arm
    for handler in handlers:
        log.removeHandler(handler)
    log.setLevel(level)


def _only_noted(kernel: str) -> dict:
    return {k: v for k, v in autotune_guard.choice_log().items() if f"|{kernel}|" in k}


TIMES = []


def _installing_timer(kernel_call, quantiles):
    """A candidate's timer that installs consensus again (a new epoch) at its first call."""
    kernel_call()
    TIMES.append(1)
    if len(TIMES) == 1:
        autotune_guard.install({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_RETIME_ROUNDS": "0"})
    return [1.0 / len(TIMES)] * 3


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"], do_bench=_installing_timer)
@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def _double(n):
    x = torch.arange(float(n))
    out = torch.empty_like(x)
    double_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return x, out


def test_triton_pinned_chooses_again_under_the_policy_installed_meanwhile(guard, meanwhile):
    from kernels.demo import add

    guard(PINNED)
    handler = meanwhile(PINNED)
    x = torch.arange(100.0)
    assert add(x, x).equal(x * 2) and handler.installed == 1
    assert list(_only_noted("kernels.demo.add_kernel").values()) == [
        "BLOCK=32,num_warps=1,num_stages=3,num_ctas=1;fallback (first)"]


def test_triton_consensus_chooses_again_under_the_policy_installed_meanwhile(guard):
    del TIMES[:]
    guard({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_RETIME_ROUNDS": "0"})
    x, out = _double(100)
    assert out.equal(x * 2) and len(TIMES) == 6  # timed under the first policy, then again under the new one
    noted = _only_noted("test_first_launch.double_kernel")
    assert len(noted) == 1 and list(noted.values())[0].endswith(";timed"), autotune_guard.choice_log()


def test_gptq_chooses_again_under_the_policy_installed_meanwhile(guard, meanwhile):
    from kernels import gptq_autotune as gptq

    tuner = gptq.new_tuner()
    a, b = torch.rand(32, 32), torch.rand(32, 32)
    guard(PINNED)
    handler = meanwhile(PINNED)
    assert torch.allclose(gptq.matmul(a, b, tuner), a @ b, atol=1e-4) and handler.installed == 1
    noted = _only_noted("kernels.gptq_autotune.matmul_kernel")
    assert len(noted) == 1 and list(noted.values())[0].endswith(";fallback (first)"), autotune_guard.choice_log()


def test_flaggems_chooses_again_under_the_policy_installed_meanwhile(guard, meanwhile, tmp_path, monkeypatch):
    monkeypatch.setenv("LIBTUNER_DB", str(tmp_path / "TunedConfig.db"))
    from kernels import libtuner

    guard(PINNED)
    handler = meanwhile(PINNED)
    x = torch.arange(100.0)
    assert libtuner.triple(x).equal(x * 3) and handler.installed == 1
    noted = _only_noted("kernels.libtuner.triple_kernel")
    assert len(noted) == 1 and list(noted.values())[0].endswith(";fallback (first)"), autotune_guard.choice_log()


def test_inductors_step_chooses_again_under_the_policy_installed_meanwhile(patched, guard, meanwhile):  # noqa: F811
    guard(PINNED)
    handler = meanwhile(PINNED)
    kernel = _generated("meanwhile")
    assert kernel.run(X, X, 8192, stream=0).kwargs == {"XBLOCK": 1024} and handler.installed == 1
    assert kernel.benchmarked == 0 and len(kernel.launchers) == 1
    assert _entry(kernel) == "XBLOCK=1024,num_warps=4,num_stages=3,num_ctas=1;fallback (first)"


# --- the family registry beside the engine -------------------------------------------------------

def test_a_family_is_checked_when_it_registers():
    from autotune_guard.core.errors import FamilyError
    from autotune_guard.deciding import families

    class Unnamed(families.Family):
        recognises = "autotuner-run"

        def shaped(self, owner):
            return False

        def run(self, autotuner, original, args, kwargs):
            return None

    class Elsewhere(Unnamed):
        name, recognises = "elsewhere", "helion-kernel"

    class TwoArguments(Unnamed):
        name = "short run"

        def run(self, autotuner, original):
            return None

    class NoModule(families.Family):  # a module family names the module whose import installs it
        name, recognises = "no module", "module"

        def install(self, module):
            return None

    class InstallsNothing(NoModule):
        name, module = "bad install", "some.library"

        def install(self):
            return None

    for bad, problem in ((Unnamed(), "its name is '?'"), (Elsewhere(), "it recognises 'helion-kernel'; allowed: "),
                         (TwoArguments(), "its run takes (autotuner, original)"), (object(), "is not a"),
                         (NoModule(), "its module is ''"), (InstallsNothing(), "its install takes ()")):
        with pytest.raises(FamilyError, match="autotuner family") as raised:
            families.register(bad)
        assert problem in raised.value.problem, raised.value


_THIRD_PARTY = '''
from autotune_guard.deciding import families

class Doubler(families.Family):
    name, recognises = "doubler", "kernel-interface-run"

    def shaped(self, owner):
        return owner.__name__ == "DoublingTuner"

    def run(self, autotuner, original, args, kwargs):
        return ("governed", original(autotuner, *args, **kwargs))
'''

_USER = '''
import json, triton
import autotune_guard
autotune_guard.install({"AUTOTUNE_MODE": "pinned"})

class DoublingTuner(triton.KernelInterface):
    def run(self, x):
        return x * 2

print(json.dumps({"run": DoublingTuner().run(21), "ungoverned": autotune_guard.ungoverned()}))
'''


@pytest.mark.slow
def test_a_third_party_family_registers_through_its_entry_point(tmp_path):
    from support import clean_env, last_json, run_python

    (tmp_path / "doubler_family.py").write_text(_THIRD_PARTY)
    info = tmp_path / "doubler_family-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: doubler-family\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[autotune_guard.families]\ndoubler = doubler_family:Doubler\n")
    env = clean_env()
    env["PYTHONPATH"] += ":" + str(tmp_path)
    out = last_json(run_python(_USER, env=env).stdout)
    assert out == {"run": ["governed", 42], "ungoverned": {}}, out


_MEANWHILE = '''
import logging
import autotune_guard

class InstallOnce(logging.Handler):
    installed = 0

    def emit(self, record):
        if not InstallOnce.installed and "no table entry" in record.getMessage():
            InstallOnce.installed += 1
            autotune_guard.install({"AUTOTUNE_MODE": "pinned"})

logging.getLogger("autotune_guard").addHandler(InstallOnce())
'''


@pytest.mark.slow
def test_inductors_template_selection_chooses_again_under_the_policy_installed_meanwhile(tmp_path):
    import os
    import subprocess
    import sys

    from test_inductor_templates import WORKER, result_of

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "_AUTOTUNE_GUARD_"))}
    env.pop("TRITON_INTERPRET", None)
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), AUTOTUNE_MODE="pinned")
    proc = subprocess.run([sys.executable, "-c", _MEANWHILE + WORKER], env=env, capture_output=True, text=True,
                          timeout=400, cwd=tmp_path)
    result = result_of(proc)
    assert result["benchmarks"] == 0, result
    assert list(result["choices"].values()) == ["choice=_mkl_linear;fallback (deterministic)"], result  # noted under the new policy
