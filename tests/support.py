"""Helpers for tests that run real processes."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, "tests")


def clean_env(**overrides) -> dict:
    """The current environment without AUTOTUNE_* (each test sets its own), under the interpreter."""
    # _AUTOTUNE_GUARD_RUN too: each test's processes are a run of their own
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "_AUTOTUNE_GUARD_"))}
    env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = TESTS  # `import kernels.demo`
    if overrides.get("AUTOTUNE_MODE") == "consensus":
        # The tests' timers are stand-ins (random, or fixed seconds a candidate) and their counts are
        # one timing a candidate: a consensus job here times in one pass unless the test asks for
        # rounds. The rounds are tested by test_winners.py (a torchrun job of the README's command too).
        env["AUTOTUNE_RETIME_ROUNDS"] = "0"
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def run_python(code: str, *, python: str = sys.executable, env=None, timeout=240, check=True, cwd=None):
    """Run ``code`` in a cold interpreter; returns the CompletedProcess."""
    proc = subprocess.run([python, "-c", code], env=clean_env() if env is None else env, capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def last_json(stdout: str):
    """The last line of a child's stdout, parsed as JSON (children print one result line)."""
    return json.loads(stdout.strip().splitlines()[-1])


def torchrun(script: str, nproc: int, *, env, args=(), timeout=300, check=True, extra=()):
    """Run ``script`` under ``torchrun --standalone`` (gloo ranks on this machine)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *extra,
           script, *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"torchrun exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}")
    return proc


def rank_files(prefix, rank) -> list:
    """The evidence files the processes of one rank wrote under ``prefix``: one per process,
    ``<prefix>.rank<N>.<host>-<pid>.json``."""
    import glob

    return sorted(glob.glob(f"{glob.escape(str(prefix))}.rank{rank}.*.json"))


def rank_file(prefix, rank) -> str:
    """The one evidence file of a rank that chose in one process."""
    found = rank_files(prefix, rank)
    assert len(found) == 1, f"rank {rank} under {prefix}: {found}"
    return found[0]
