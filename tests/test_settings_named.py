"""Settings that would do nothing are acted on or named (issue 12), in cold interpreters with
real kernels: another tool's AUTOTUNE_* variable, typos of ours, env-file lines that python-dotenv
would skip or expand to nothing, AUTOTUNE_DISABLE in the env file, settings of another mode, a
module prefix or a block-size name that matched none of the kernels that ran, a determinism
request made after Triton was imported, and a missing dependency."""

import json
import os

import pytest

from autotune_guard.core.errors import PolicyError
from autotune_guard.core.settings import AutotunePolicy, StartupSettings, close_to_ours, ineffective_settings, \
    policy_from_environment, policy_from_settings
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


def guard_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("autotune_guard")]


def test_the_rule_for_unknown_names():
    for typo, meant in [("AUTOTUNE_MDOE", "AUTOTUNE_MODE"), ("AUTOTUNE_BLOCKSIZES", "AUTOTUNE_BLOCK_SIZES"),
                        ("AUTOTUNE_TABLE_DIR", "AUTOTUNE_TABLE_PATH"), ("AUTOTUNE_VERIFY", "AUTOTUNE_VERIFY_EVERY"),
                        ("AUTOTUNE_DISABLED", "AUTOTUNE_DISABLE"), ("AUTOTUNE_record_path", "AUTOTUNE_RECORD_PATH")]:
        assert close_to_ours(typo) == meant, typo
        with pytest.raises(PolicyError, match=f"{typo}='x'.*did you mean {meant}"):
            policy_from_settings({typo: "x"})
        with pytest.raises(PolicyError) as said:
            policy_from_settings({typo: "x"})
        # a right guess is the line: the other names are where the docs list them, not after it
        assert str(said.value).endswith("(every setting: docs/settings.md, section Every setting)"), str(said.value)
        assert "AUTOTUNE_TRACEBACK" not in str(said.value) and len(str(said.value)) < 160, str(said.value)
    for foreign in ("AUTOTUNE_CACHE_DIR", "AUTOTUNE_WORKERS", "AUTOTUNE_HOME"):
        assert close_to_ours(foreign) is None, foreign
        assert policy_from_settings({foreign: "x"}).foreign == (foreign,)


@pytest.mark.slow
def test_another_tools_variable_is_a_notice_not_a_broken_triton():
    proc = run_python(RUN_DEMO, env=clean_env(AUTOTUNE_CACHE_DIR="/tmp/x"))
    assert last_json(proc.stdout)["mode"] == "auto"
    notices = [line for line in guard_lines(proc.stderr) if "AUTOTUNE_CACHE_DIR" in line]
    assert len(notices) == 1 and "not autotune_guard settings" in notices[0]


@pytest.mark.slow
def test_settings_of_another_mode_are_named_at_start_up(tmp_path):
    (tmp_path / "t").mkdir()
    cases = {
        "AUTOTUNE_ON_MISS": ({"mode": "auto", "on_miss": "error"}, "pinned mode only"),
        "AUTOTUNE_BLOCK_SIZES": ({"mode": "record", "block_sizes": (("BLOCK", 64),), "record_path": "r"}, "pinned mode only"),
        "AUTOTUNE_TABLE_PATH": ({"mode": "auto", "table_path": (str(tmp_path / "t"),)}, "pinned mode only"),
        "AUTOTUNE_VERIFY_STRICT": ({"verify_strict": True}, "no barrier is checked"),
        "AUTOTUNE_CONSENSUS_TIMEOUT": ({"consensus_timeout": 5.0}, "consensus mode only"),
    }
    for var, (fields, text) in cases.items():
        warnings = ineffective_settings(AutotunePolicy(**fields), StartupSettings())
        assert len(warnings) == 1 and var in warnings[0] and text in warnings[0], (var, warnings)
    assert ineffective_settings(AutotunePolicy(mode="pinned", on_miss="error", block_sizes=(("BLOCK", 64),)),
                                StartupSettings()) == []
    # AUTOTUNE_TABLE_PATH alone is acted on: tables are for pinned mode, so it selects pinned.
    alone = policy_from_settings({"AUTOTUNE_TABLE_PATH": str(tmp_path / "t")})
    assert alone.mode == "pinned" and "AUTOTUNE_TABLE_PATH" in alone.mode_from
    assert ineffective_settings(alone, StartupSettings()) == []
    # In a cold process: a table path alone pins with the table, and says why.
    (tmp_path / "t" / "interpret.json").write_text(json.dumps({
        "format": "autotune_guard.table/1", "arch": "interpret",
        "kernels": {"kernels.demo.add_kernel": {"*": {"kwargs": {"BLOCK": 128}, "num_warps": 2}}}}))
    pinned = run_python(RUN_DEMO, env=clean_env(AUTOTUNE_TABLE_PATH=str(tmp_path / "t")))
    result = last_json(pinned.stdout)
    assert result["mode"] == "pinned" and result["timer_calls"] == 0
    assert [v.split(",")[:2] for v in result["log"].values()] == [["BLOCK=128", "num_warps=2"]]
    assert any("mode pinned, from AUTOTUNE_TABLE_PATH" in line for line in guard_lines(pinned.stderr))
    # In a cold process the warning reaches stderr when Triton is imported.
    proc = run_python(RUN_DEMO, env=clean_env(AUTOTUNE_MODE="auto", AUTOTUNE_ON_MISS="error"))
    assert any("AUTOTUNE_ON_MISS=error has an effect in pinned mode only" in line for line in guard_lines(proc.stderr))


@pytest.mark.slow
def test_env_file_lines_dotenv_would_skip_or_empty_are_errors(tmp_path, monkeypatch):
    env_file = tmp_path / "job.env"
    env_file.write_text("AUTOTUNE_MODE=pinned\nthis is not a setting\n")
    with pytest.raises(PolicyError, match=r"AUTOTUNE_ENV_FILE=.*job.env.*line 2 cannot be parsed"):
        policy_from_environment({"AUTOTUNE_ENV_FILE": str(env_file)})
    env_file.write_text("AUTOTUNE_MODE=record\nAUTOTUNE_RECORD_PATH=${RUN_DIR}/rec\n")
    with pytest.raises(PolicyError, match=r"line 2: AUTOTUNE_RECORD_PATH refers to \$\{RUN_DIR\}, which is not set"):
        policy_from_environment({"AUTOTUNE_ENV_FILE": str(env_file)})
    # Set in the environment, defined earlier in the file, or given a default: fine.
    monkeypatch.setenv("RUN_DIR", str(tmp_path))  # python-dotenv expands from os.environ
    assert policy_from_environment({"AUTOTUNE_ENV_FILE": str(env_file), "RUN_DIR": str(tmp_path)}).record_path == \
        f"{tmp_path}/rec"
    monkeypatch.delenv("RUN_DIR")
    env_file.write_text(f"RUN_DIR={tmp_path}\nAUTOTUNE_RECORD_PATH=${{RUN_DIR}}/rec\nAUTOTUNE_DIGEST_PATH=${{NOPE:-x}}/c\n")
    policy = policy_from_environment({"AUTOTUNE_ENV_FILE": str(env_file)})
    assert (policy.record_path, policy.digest_path) == (f"{tmp_path}/rec", "x/c")
    # The same error fails `import triton` in a cold process.
    env_file.write_text("AUTOTUNE_MODE=pinned\nAUTOTUNE_TABLE_PATH=${NOT_SET_ANYWHERE}\n")
    proc = run_python("import triton", env=clean_env(AUTOTUNE_ENV_FILE=str(env_file)), check=False)
    first = proc.stderr.strip().splitlines()[0]  # the guard's one-line report, no traceback
    assert proc.returncode != 0 and first.startswith("autotune_guard: error: ") and "NOT_SET_ANYWHERE" in first


@pytest.mark.slow
def test_disable_in_the_env_file_turns_the_guard_off(tmp_path):
    env_file = tmp_path / "job.env"
    env_file.write_text("AUTOTUNE_DISABLE=1\nAUTOTUNE_MODE=pinned\n")
    proc = run_python(RUN_DEMO + "import triton; print(json.dumps(getattr(triton.runtime.Autotuner.run, "
                      "'_autotune_guard', False)))", env=clean_env(AUTOTUNE_ENV_FILE=str(env_file)))
    result = json.loads(proc.stdout.strip().splitlines()[-2])
    assert result["mode"] is None and result["timer_calls"] > 0  # Triton timed: the guard is off
    assert proc.stdout.strip().splitlines()[-1] == "false"
    assert any("AUTOTUNE_DISABLE=1 in AUTOTUNE_ENV_FILE" in line for line in guard_lines(proc.stderr))


@pytest.mark.slow
def test_modules_and_block_sizes_that_matched_nothing_are_named_at_exit():
    proc = run_python(RUN_DEMO, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_MODULES="kernels.dmeo",
                                              AUTOTUNE_BLOCK_SIZES="BLOKC=64"))
    lines = guard_lines(proc.stderr)
    assert last_json(proc.stdout)["timer_calls"] > 0  # the typo left add_kernel to Triton: unguarded
    assert any("AUTOTUNE_MODULES: 'kernels.dmeo' matched none of the 1 autotuner launched (kernels.demo.add_kernel)"
               in line and "unguarded" in line for line in lines), lines
    proc = run_python(RUN_DEMO, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_BLOCK_SIZES="BLOKC=64"))
    lines = guard_lines(proc.stderr)
    assert any("AUTOTUNE_BLOCK_SIZES: BLOKC is a meta-parameter of none of the 1 autotuner launched" in line
               and "theirs: BLOCK" in line for line in lines), lines
    # Matching settings say nothing.
    proc = run_python(RUN_DEMO, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_MODULES="kernels",
                                              AUTOTUNE_BLOCK_SIZES="BLOCK=64"))
    assert not [line for line in guard_lines(proc.stderr) if "WARNING" in line]


@pytest.mark.slow
@pytest.mark.parametrize("order", ["torch first, flag after triton", "triton first, flag later"])
def test_a_determinism_request_after_triton_is_imported_pins(order):
    """``torch.use_deterministic_algorithms(True)`` imports Triton itself (torch 2.13) before it
    sets the flag, so at install the flag is off; the first launch looks again."""
    first = "import torch\n" if order.startswith("torch") else "import triton, torch\n"
    code = first + "torch.use_deterministic_algorithms(True)\n" + RUN_DEMO
    proc = run_python(code, env=clean_env(AUTOTUNE_LOG_LEVEL="info"))
    result = last_json(proc.stdout)
    assert result["mode"] == "pinned" and result["timer_calls"] == 0
    # pinned without a table: each key runs the min_cost fallback, and the log says so (issue 58 item 3)
    assert all(v.endswith(";fallback (min_cost)") for v in result["log"].values()) and result["log"], result["log"]
    assert any("mode pinned, from torch.are_deterministic_algorithms_enabled(), found at the first launch" in line
               for line in guard_lines(proc.stderr)), proc.stderr
    # An explicit mode wins, and without the request the mode stays auto.
    explicit = last_json(run_python(code, env=clean_env(AUTOTUNE_MODE="auto")).stdout)
    assert explicit["mode"] == "auto" and explicit["timer_calls"] > 0
    plain = last_json(run_python(RUN_DEMO, env=clean_env(AUTOTUNE_LOG_LEVEL="info")).stdout)
    assert plain["mode"] == "auto"


@pytest.mark.slow
def test_a_missing_dependency_fails_every_activation_the_same_way(tmp_path):
    broken = tmp_path / "shadow" / "wrapt"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('wrapt is broken here')\n")
    env = clean_env(AUTOTUNE_MODE="pinned")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "shadow"), env["PYTHONPATH"]])
    code = """
import json
attempts = []
for name in ("torch", "torch", "triton", "triton"):
    try:
        __import__(name)
        attempts.append("imported " + name)
    except Exception as exc:
        attempts.append(type(exc).__name__ + ': ' + str(exc))
print(json.dumps(attempts))
"""
    attempts = last_json(run_python(code, env=env).stdout)
    assert len(set(attempts)) == 1 and "wrapt cannot be imported" in attempts[0], attempts
    assert "AUTOTUNE_DISABLE=1" in attempts[0]
    # python-dotenv, needed only with AUTOTUNE_ENV_FILE, fails `import triton` the same way each time.
    (tmp_path / "shadow" / "dotenv").mkdir()
    (tmp_path / "shadow" / "dotenv" / "__init__.py").write_text("raise ImportError('dotenv is broken here')\n")
    (broken / "__init__.py").unlink()
    broken.rmdir()
    env_file = tmp_path / "job.env"
    env_file.write_text("AUTOTUNE_MODE=pinned\n")
    env["AUTOTUNE_ENV_FILE"] = str(env_file)
    attempts = last_json(run_python(code.replace('"torch", "torch", ', ""), env=env).stdout)
    assert len(set(attempts)) == 1 and "needs python-dotenv" in attempts[0], attempts
