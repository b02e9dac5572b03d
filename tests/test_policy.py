"""The policy: parsing and validating every AUTOTUNE_* setting, the dotenv source, mode derivation.

Parsing is plain code and is tested in this process; what a bad value does to a real program
(``import triton`` fails, loudly, and keeps failing) is tested in cold interpreters.
"""

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from autotune_guard.core.errors import GuardError, PolicyError
from autotune_guard.core.settings import KNOWN_VARIABLES, AutotunePolicy, StartupSettings, derived_mode, \
    ineffective_settings, policy_from_environment, policy_from_settings, settings_from_environment, startup_settings
from support import clean_env, last_json, run_python


def test_every_setting_is_parsed(tmp_path):
    tables = tmp_path / "t"
    tables.mkdir()
    table_file = tmp_path / "x.json"
    table_file.write_text("{}")
    policy = policy_from_settings({
        "AUTOTUNE_MODE": " Pinned ",
        "AUTOTUNE_MODULES": "pkg.ops, other ,",
        "AUTOTUNE_CONFIG_INVARIANT": "pkg.ops.reduce,matmul_kernel",
        "AUTOTUNE_TABLE_PATH": f"{tables}{os.pathsep}{table_file}",
        "AUTOTUNE_ON_MISS": "FIRST",
        "AUTOTUNE_BLOCK_SIZES": "BLOCK_N=128, BLOCK_M=64",
        "AUTOTUNE_DETERMINISTIC": "yes",
        "AUTOTUNE_ENUMERATE": "on",
        "AUTOTUNE_CHAOS": "true",
        "AUTOTUNE_DIGEST_PATH": "runs/choices",
        "AUTOTUNE_VERIFY_EVERY": "10",
        "AUTOTUNE_VERIFY_STRICT": "1",
        "AUTOTUNE_CONSENSUS_TIMEOUT": "2.5",
        "AUTOTUNE_LOG_LEVEL": "debug",
        "AUTOTUNE_DISABLE": "0",
        "AUTOTUNE_ENV_FILE": "",
    })
    assert policy == AutotunePolicy(
        mode="pinned", modules=("pkg.ops", "other"), config_invariant=("pkg.ops.reduce", "matmul_kernel"),
        table_path=(str(tables), str(table_file)), on_miss="first", block_sizes=(("BLOCK_M", 64), ("BLOCK_N", 128)),
        deterministic=True, enumerate=True, chaos=True, digest_path="runs/choices",
        verify_strict=True, consensus_timeout=2.5, log_level="DEBUG")
    # AUTOTUNE_VERIFY_EVERY is no policy field: read once at start-up, only noted when install() is given it.
    assert policy.startup_given == (("AUTOTUNE_VERIFY_EVERY", 10),)
    record = policy_from_settings({"AUTOTUNE_MODE": "record", "AUTOTUNE_RECORD_PATH": "runs/rec"})
    assert record.record_path == "runs/rec"


def test_defaults_and_empty_values():
    assert policy_from_settings({}) == AutotunePolicy()
    assert AutotunePolicy().mode == "auto" and AutotunePolicy().on_miss == "min_cost"
    # An empty variable counts as unset (a shell's `AUTOTUNE_MODE= cmd`).
    assert policy_from_settings({"AUTOTUNE_MODE": "", "AUTOTUNE_BLOCK_SIZES": " "}) == AutotunePolicy()


def test_field_names_and_typed_values_are_accepted():
    policy = policy_from_settings({"mode": "pinned", "block_sizes": {"BLOCK": 64}, "modules": ["a.b"], "enumerate": True})
    assert (policy.mode, policy.block_sizes, policy.modules, policy.enumerate) == ("pinned", (("BLOCK", 64),), ("a.b",), True)


def test_the_policy_is_immutable_and_revalidated_on_replace():
    policy = policy_from_settings({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_CHAOS": "1"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.mode = "auto"
    hash(policy)
    with pytest.raises(PolicyError, match="AUTOTUNE_CHAOS"):
        dataclasses.replace(policy, mode="auto")


def test_mode_is_derived_when_omitted():
    assert policy_from_settings({"AUTOTUNE_RECORD_PATH": "runs/rec"}).mode == "record"
    assert policy_from_settings({"AUTOTUNE_DETERMINISTIC": "1"}).mode == "pinned"
    assert policy_from_settings({}, deterministic=True).mode == "pinned"
    assert policy_from_settings({"AUTOTUNE_MODE": "auto", "AUTOTUNE_DETERMINISTIC": "1"}).mode == "auto"  # explicit wins
    assert policy_from_settings({}).mode == "auto"


def test_torch_deterministic_flag_selects_pinned_at_the_first_launch():
    """A mode no setting chose is settled by ``derived_mode`` with torch's flag as the first launch
    finds it (a program may ask for determinism after Triton is imported); a chosen mode stays."""
    derived = policy_from_settings({})
    assert derived.mode == "auto"
    pinned = derived_mode(derived, torch_deterministic=True)
    assert pinned.mode == "pinned" and "torch.are_deterministic_algorithms_enabled()" in pinned.mode_from
    assert derived_mode(derived, torch_deterministic=False) is derived
    for chosen in ({"AUTOTUNE_MODE": "auto"}, {"AUTOTUNE_RECORD_PATH": "runs/rec"}, {"AUTOTUNE_MODE": "consensus"}):
        policy = policy_from_settings(chosen)
        assert derived_mode(policy, torch_deterministic=True) is policy, chosen


def test_start_up_settings_are_read_once_apart_from_the_policy():
    assert startup_settings({}) == StartupSettings(verify_every=0, verify_strict=False)
    assert startup_settings({"AUTOTUNE_VERIFY_EVERY": " 5 ", "AUTOTUNE_VERIFY_STRICT": "yes"}) == StartupSettings(5, True)
    assert startup_settings({"AUTOTUNE_VERIFY_EVERY": "", "AUTOTUNE_VERIFY_STRICT": " "}) == StartupSettings()
    with pytest.raises(PolicyError, match=r"AUTOTUNE_VERIFY_EVERY='-1'.*integer >= 0"):
        startup_settings({"AUTOTUNE_VERIFY_EVERY": "-1"})
    with pytest.raises(PolicyError, match=r"AUTOTUNE_VERIFY_STRICT='strict'.*1/0"):
        startup_settings({"AUTOTUNE_VERIFY_STRICT": "strict"})
    # install() given another cadence than start-up's: named, not applied (every rank counts the same barriers).
    given = policy_from_settings({"AUTOTUNE_VERIFY_EVERY": "3"})
    assert given == AutotunePolicy()
    (line,) = ineffective_settings(given, StartupSettings(verify_every=10))
    assert "AUTOTUNE_VERIFY_EVERY=3 given to install() is not applied" in line and "(10)" in line
    assert ineffective_settings(given, StartupSettings(verify_every=3)) == []
    assert issubclass(PolicyError, GuardError) and issubclass(PolicyError, ValueError)


def test_scope_by_module_prefix_and_config_invariant_names():
    everything = AutotunePolicy(mode="pinned")
    assert everything.in_scope("any.module.kernel")
    scoped = AutotunePolicy(mode="pinned", modules=("pkg.ops",), config_invariant=("pkg.ops.reduce", "softmax"))
    assert scoped.in_scope("pkg.ops.matmul") and scoped.in_scope("pkg.ops.sub.kernel")
    assert not scoped.in_scope("pkg.opsextra.kernel")  # a module prefix, not a string prefix
    assert not scoped.in_scope("other.kernel")
    assert not scoped.in_scope("pkg.ops.reduce")  # qualified name
    assert not scoped.in_scope("pkg.ops.fused.softmax")  # bare function name


# Each row: the environment of a cold `import triton`, and what its error must say besides the
# variable and the value (the allowed values, or why).
BAD = [
    ({"AUTOTUNE_MODE": "pined"}, ["auto, pinned, record, consensus"]),
    ({"AUTOTUNE_MODULES": "my-pkg.ops"}, ["dotted Python name"]),
    ({"AUTOTUNE_CONFIG_INVARIANT": "pkg.kernel fn"}, ["dotted Python name"]),
    ({"AUTOTUNE_TABLE_PATH": "/nonexistent/autotune-tables"}, ["does not exist", "<arch>.json"]),
    ({"AUTOTUNE_TABLE_PATH": "redis://127.0.0.1:port/0"}, ["port is not a number", "redis://[user:password@]host:port/db"]),
    ({"AUTOTUNE_TABLE_STORE_DOWN": "ignore"}, ["error, local"]),
    ({"AUTOTUNE_ON_MISS": "last"}, ["min_cost, first, error"]),
    ({"AUTOTUNE_BLOCK_SIZES": "BLOCK"}, ["NAME=VALUE"]),
    ({"AUTOTUNE_BLOCK_SIZES": "BLOCK=big"}, ["positive integer"]),
    ({"AUTOTUNE_BLOCK_SIZES": "BLOCK=0"}, ["positive integer"]),
    ({"AUTOTUNE_BLOCK_SIZES": "2BLOCK=64"}, ["meta-parameter name"]),
    ({"AUTOTUNE_DETERMINISTIC": "maybe"}, ["1/0, true/false"]),
    ({"AUTOTUNE_ENUMERATE": "2"}, ["1/0, true/false"]),
    ({"AUTOTUNE_CHAOS": "sometimes"}, ["1/0, true/false"]),
    ({"AUTOTUNE_CHAOS": "1", "AUTOTUNE_MODE": "auto"}, ["needs AUTOTUNE_MODE=pinned"]),
    ({"AUTOTUNE_DIGEST_PATH": "runs/"}, ["file prefix"]),
    ({"AUTOTUNE_DIGEST_PATH": "/proc/autotune-guard/choices"}, ["cannot be created"]),
    ({"AUTOTUNE_RECORD_PATH": "runs/rec", "AUTOTUNE_MODE": "pinned"}, ["record and consensus"]),
    ({"AUTOTUNE_RECORD_PATH": "runs/"}, ["file prefix"]),
    ({"AUTOTUNE_VERIFY_EVERY": "-1"}, ["integer >= 0"]),
    ({"AUTOTUNE_VERIFY_EVERY": "often"}, ["integer >= 0"]),
    ({"AUTOTUNE_VERIFY_STRICT": "strict"}, ["1/0, true/false"]),
    ({"AUTOTUNE_CONSENSUS_TIMEOUT": "0"}, ["positive number of seconds"]),
    ({"AUTOTUNE_CONSENSUS_TIMEOUT": "soon"}, ["positive number of seconds, or none"]),
    ({"AUTOTUNE_CONSENSUS_DEAD_AFTER": "2"}, ["positive number of seconds of at least 5"]),
    ({"AUTOTUNE_CONSENSUS_DEAD_AFTER": "none"}, ["positive number of seconds"]),
    ({"AUTOTUNE_CONSENSUS_SPLIT": "yes"}, ["AUTOTUNE_CONSENSUS_SPLIT='yes'", "0 (off) or 1 (on)"]),
    ({"AUTOTUNE_RETIME_ROUNDS": "many"}, ["AUTOTUNE_RETIME_ROUNDS='many'", "an integer >= 0"]),
    ({"AUTOTUNE_RETIME_ROUNDS": "500"}, ["AUTOTUNE_RETIME_ROUNDS='500'", "an integer from 0 to 100"]),
    ({"AUTOTUNE_RETIME_BAND": "0"}, ["AUTOTUNE_RETIME_BAND='0'", "a percentage from 0.1 to 50"]),
    ({"AUTOTUNE_POOL_RUNS": "9"}, ["AUTOTUNE_POOL_RUNS='9'", "an integer from 1 to 5"]),
    ({"AUTOTUNE_POOL_RUNS": "three"}, ["AUTOTUNE_POOL_RUNS='three'", "an integer"]),
    ({"AUTOTUNE_RETIME_BAND": "3 percent"}, ["AUTOTUNE_RETIME_BAND='3 percent'", "(like 3 or 3%)"]),
    ({"AUTOTUNE_DISABLE_WARNINGS": "consensus_alone"}, ["AUTOTUNE_DISABLE_WARNINGS='consensus_alone'",
                                                       "not a warning that can be silenced", "consensus-alone"]),
    ({"AUTOTUNE_LOG_LEVEL": "verbose"}, ["debug, info, warning, error"]),
    ({"AUTOTUNE_RUN_ID": "two words"}, ["letters, digits"]),
    ({"AUTOTUNE_DISABLE": "maybe"}, ["1/0, true/false"]),
    ({"AUTOTUNE_TRACEBACK": "maybe"}, ["1/0, true/false"]),
    ({"AUTOTUNE_MDOE": "pinned"}, ["not a setting", "did you mean AUTOTUNE_MODE", "every setting: docs/settings.md"]),
    ({"AUTOTUNE_TABLE_DIR": "tables"}, ["not a setting", "did you mean AUTOTUNE_TABLE_PATH"]),
    ({"AUTOTUNE_RECORD_PATH": "runs/same", "AUTOTUNE_DIGEST_PATH": "runs/same"}, ["are one prefix"]),
    ({"AUTOTUNE_ENV_FILE": "/nonexistent/autotune.env"}, ["no such file"]),
]


def _bad_value_run(env_overrides, cwd):
    code = "print('started', flush=True)\nimport triton\nprint('imported triton', flush=True)"
    return run_python(code, env=clean_env(**env_overrides), check=False, cwd=cwd, timeout=120)


@pytest.mark.slow
def test_every_bad_value_fails_the_import_of_triton(tmp_path):
    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = list(pool.map(lambda row: _bad_value_run(row[0], tmp_path), BAD))
    problems = []
    for (env, expected), proc in zip(BAD, procs):
        lines = proc.stderr.strip().splitlines()
        # The guard's one-line report of an uncaught activation error (the traceback is not shown).
        last = next((line for line in lines if line.startswith("autotune_guard: error: ")), lines[-1] if lines else "")
        why = []
        if proc.returncode == 0 or "imported triton" in proc.stdout:
            why.append("import succeeded")
        if "started" not in proc.stdout:
            why.append("failed before the program started (it must fail at `import triton`)")
        if not last.startswith("autotune_guard: error: ") or "Traceback" in proc.stderr:
            why.append("no one-line error (or a traceback)")
        for var, value in env.items():
            if var == "AUTOTUNE_MODE" and len(env) > 1:
                continue  # the companion setting of a cross-field check
            if f"{var}={value!r}" not in last and f"{var}={value} " not in last:
                why.append(f"does not name {var}={value!r}")
        why += [f"does not say {text!r}" for text in expected if text not in last]
        if why:
            problems.append(f"{env}: {'; '.join(why)}\n    stderr ends: {last}")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_a_bad_value_does_not_stop_a_program_that_never_imports_triton():
    proc = run_python("import json; print(json.dumps(1))", env=clean_env(AUTOTUNE_MODE="pined"))
    assert proc.returncode == 0 and proc.stderr == ""


@pytest.mark.slow
def test_a_retried_import_fails_again_and_a_fixed_setting_then_guards():
    code = """
import json, os, sys
attempts = []
for _ in range(3):
    try:
        import triton
        attempts.append("imported")
    except Exception as exc:
        attempts.append(type(exc).__name__ + ": " + str(exc))
left = sorted(m for m in sys.modules if m == "triton" or m.startswith("triton.runtime"))
os.environ["AUTOTUNE_MODE"] = "pinned"
import triton
from autotune_guard import active_policy
print(json.dumps({"attempts": attempts, "left": left, "mode": active_policy().mode,
                  "patched": getattr(triton.runtime.Autotuner.run, "_autotune_guard", False)}))
"""
    result = last_json(run_python(code, env=clean_env(AUTOTUNE_MODE="pined")).stdout)
    assert len(result["attempts"]) == 3
    for attempt in result["attempts"]:
        assert attempt.startswith("PolicyError: AUTOTUNE_MODE='pined'"), result["attempts"]
    assert "triton" not in result["left"] and "triton.runtime.autotuner" not in result["left"]
    assert result["mode"] == "pinned" and result["patched"] is True


# --- the dotenv file ---------------------------------------------------------------------------

ENV_FILE_TEXT = """\
# autotune settings for this job
AUTOTUNE_MODE=pinned
export AUTOTUNE_ON_MISS=first
AUTOTUNE_ENUMERATE=1   # inline comment
NOT_AUTOTUNE_SETTING=leaked
PATH=/leaked
"""


def test_env_file_supplies_only_autotune_keys_and_the_environment_wins(tmp_path):
    env_file = tmp_path / "job.env"
    env_file.write_text(ENV_FILE_TEXT)
    environ = {"AUTOTUNE_ENV_FILE": str(env_file), "AUTOTUNE_ON_MISS": "error", "PATH": "/usr/bin"}
    settings, used = settings_from_environment(environ)
    assert used == str(env_file)
    assert settings == {"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "error", "AUTOTUNE_ENUMERATE": "1",
                        "AUTOTUNE_ENV_FILE": str(env_file)}
    policy = policy_from_environment(environ)
    assert (policy.mode, policy.on_miss, policy.enumerate, policy.env_file) == ("pinned", "error", True, str(env_file))
    assert "NOT_AUTOTUNE_SETTING" not in os.environ


def test_a_bad_value_in_the_env_file_names_it(tmp_path):
    env_file = tmp_path / "job.env"
    env_file.write_text("AUTOTUNE_ON_MISS=sometimes\n")
    with pytest.raises(PolicyError, match=r"AUTOTUNE_ON_MISS='sometimes'.*min_cost, first, error"):
        policy_from_environment({"AUTOTUNE_ENV_FILE": str(env_file)})
    env_file.write_text("AUTOTUNE_ONMISS=first\n")
    with pytest.raises(PolicyError, match="AUTOTUNE_ONMISS.*did you mean AUTOTUNE_ON_MISS"):
        policy_from_environment({"AUTOTUNE_ENV_FILE": str(env_file)})


@pytest.mark.slow
def test_env_file_in_a_cold_process_and_no_implicit_dot_env(tmp_path):
    env_file = tmp_path / "job.env"
    env_file.write_text(ENV_FILE_TEXT)
    # A .env in the working directory is not read on its own: this one would fail the import.
    (tmp_path / ".env").write_text("AUTOTUNE_MODE=pined\n")
    code = """
import json, os, sys
before = "dotenv" in sys.modules
import triton
from autotune_guard import active_policy
p = active_policy()
print(json.dumps({"dotenv_before": before, "mode": p.mode, "on_miss": p.on_miss, "enumerate": p.enumerate,
                  "leaked": [k for k in ("NOT_AUTOTUNE_SETTING",) if k in os.environ], "path": os.environ["PATH"]}))
"""
    env = clean_env(AUTOTUNE_ENV_FILE=str(env_file), AUTOTUNE_ON_MISS="min_cost")
    result = last_json(run_python(code, env=env, cwd=tmp_path).stdout)
    assert result == {"dotenv_before": False, "mode": "pinned", "on_miss": "min_cost", "enumerate": True,
                      "leaked": [], "path": os.environ["PATH"]}
    result = last_json(run_python(code, env=clean_env(AUTOTUNE_LOG_LEVEL="info"), cwd=tmp_path).stdout)
    assert result["mode"] == "auto"


def test_known_variables_cover_the_issue():
    wanted = {"AUTOTUNE_MODE", "AUTOTUNE_MODULES", "AUTOTUNE_CONFIG_INVARIANT", "AUTOTUNE_TABLE_PATH",
              "AUTOTUNE_ON_MISS", "AUTOTUNE_BLOCK_SIZES", "AUTOTUNE_DETERMINISTIC", "AUTOTUNE_ENUMERATE",
              "AUTOTUNE_CHAOS", "AUTOTUNE_DIGEST_PATH", "AUTOTUNE_LOG_LEVEL", "AUTOTUNE_RECORD_PATH",
              "AUTOTUNE_VERIFY_EVERY", "AUTOTUNE_VERIFY_STRICT", "AUTOTUNE_DISABLE", "AUTOTUNE_ENV_FILE"}
    assert wanted <= set(KNOWN_VARIABLES)
    tested = {var for env, _ in BAD for var in env}
    assert set(KNOWN_VARIABLES) <= tested, f"no bad-value case for {set(KNOWN_VARIABLES) - tested}"
