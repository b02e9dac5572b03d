"""Third-party autotuner families that fail (issue 60): a plugin registered through the entry point
group ``autotune_guard.families`` that raises or calls ``sys.exit`` at import, raises in its
recogniser (``shaped``) or at tune (``run``), says yes to every class (Triton's own ``JITFunction``
among them), or a module family whose ``install`` raises. In each case the user's program runs to
its end, the family is named once, and Triton's own autotuner is still governed.

Real processes: a plugin package put on ``sys.path`` with its ``.dist-info`` (an entry point as pip
writes it), the user's program importing Triton with the guard active (pinned mode), a real
``@triton.autotune`` kernel under Triton's interpreter."""

import json

import pytest

from support import clean_env, last_json, run_python

pytestmark = pytest.mark.slow

_PLUGIN_HEAD = '''
import sys
from autotune_guard.deciding import families
'''

PLUGINS = {
    "raises at import": "raise RuntimeError('plugin broke at import')\n",
    "exits at import": "sys.exit(3)\n",
    "raises in shaped": '''
class Plugin(families.Family):
    name, recognises = "broken-shaped", "kernel-interface-run"

    def shaped(self, owner):
        raise KeyError("shaped broke")

    def run(self, autotuner, original, args, kwargs):
        return original(autotuner, *args, **kwargs)
''',
    "claims everything": '''
class Plugin(families.Family):
    name, recognises = "greedy", "kernel-interface-run"

    def shaped(self, owner):
        return True

    def run(self, autotuner, original, args, kwargs):
        return ("greedy", original(autotuner, *args, **kwargs))
''',
    "raises at tune": '''
class Plugin(families.Family):
    name, recognises = "broken-run", "kernel-interface-run"

    def shaped(self, owner):
        return owner.__name__ == "DoublingTuner"

    def run(self, autotuner, original, args, kwargs):
        raise ValueError("run broke")
''',
    "raises at install": '''
class Plugin(families.Family):
    name, recognises, module = "broken-install", "module", "plugin_target"

    def install(self, module):
        raise OSError("install broke")
''',
}

_USER = '''
import json, torch, triton
import plugin_target
import autotune_guard
from kernels import demo

class DoublingTuner(triton.KernelInterface):
    def run(self, x):
        return x * 2

x = torch.arange(300, dtype=torch.float32)
ok = torch.equal(demo.add(x, x), x + x)
print(json.dumps({"run": DoublingTuner().run(21), "ok": ok, "choices": autotune_guard.choice_log(),
                  "ungoverned": autotune_guard.ungoverned()}))
'''


def _plugin(tmp_path, body: str):
    (tmp_path / "broken_family.py").write_text(_PLUGIN_HEAD + body)
    (tmp_path / "plugin_target.py").write_text("VALUE = 1\n")
    info = tmp_path / "broken_family-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-family\nVersion: 1.0\n")
    target = "broken_family:Plugin" if "class Plugin" in body else "broken_family"
    (info / "entry_points.txt").write_text(f"[autotune_guard.families]\nbroken = {target}\n")


@pytest.mark.parametrize("failure", list(PLUGINS))
def test_a_failing_third_party_family_is_named_once_and_triton_stays_governed(tmp_path, failure):
    _plugin(tmp_path, PLUGINS[failure])
    env = clean_env(AUTOTUNE_MODE="pinned")
    env["PYTHONPATH"] += ":" + str(tmp_path)
    proc = run_python(_USER, env=env, cwd=tmp_path)
    out = last_json(proc.stdout)
    assert out["ok"] and out["run"] in (42, ["greedy", 42]), out
    assert any("|kernels.demo.add_kernel|" in kernel for kernel in out["choices"]), out  # Triton governed
    named = [line for line in proc.stderr.splitlines() if "autotuner family" in line]
    assert "Traceback" not in proc.stderr, proc.stderr
    if failure == "claims everything":  # it governs the user's own tuner, never Triton's JITFunction
        assert out["run"] == ["greedy", 42] and not named, proc.stderr
        return
    assert len(named) == 1, proc.stderr
    if failure in ("raises at import", "exits at import"):
        assert "broken = broken_family" in named[0] and "not registered" in named[0], named
    else:
        assert "is disabled" in named[0] and "broke" in named[0], named


def test_a_greedy_family_does_not_take_triton_s_own_classes(tmp_path):
    _plugin(tmp_path, PLUGINS["claims everything"].replace("return True", "print('ASKED', owner.__module__,"
                                                              " owner.__name__); return True"))
    env = clean_env(AUTOTUNE_MODE="pinned")
    env["PYTHONPATH"] += ":" + str(tmp_path)
    proc = run_python(_USER, env=env, cwd=tmp_path)
    asked = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("ASKED")]
    assert asked and all(module.split(".")[0] not in ("triton", "torch") for module, _ in asked), asked
    assert last_json(proc.stdout)["run"] == ["greedy", 42]
