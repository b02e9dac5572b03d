"""Settings the program changes in ``os.environ`` after the guard, active from start-up, read them
(``core/late_settings.py``): they do nothing, and at exit one WARNING names each with the value read.
Cold processes, with Triton imported for real."""

import pytest

from support import clean_env, last_json, run_python

pytestmark = pytest.mark.slow

CHANGED_LATE = """
import json, os
import triton
import autotune_guard
os.environ["AUTOTUNE_MODE"] = "pinned"
os.environ["AUTOTUNE_ON_MISS"] = "error"
os.environ["AUTOTUNE_VERIFY_STRICT"] = "1"
os.environ["AUTOTUNE_TABLE_PATH"] = "redis://tune:S3CRETPW@db:6379/0"
del os.environ["AUTOTUNE_LOG_LEVEL"]
print(json.dumps({"mode": autotune_guard.active_policy().mode}))
"""


def test_settings_changed_after_the_guard_read_them_are_named_at_exit_with_no_effect():
    env = clean_env(AUTOTUNE_MODE="auto", AUTOTUNE_VERIFY_STRICT="0", AUTOTUNE_LOG_LEVEL="info")
    proc = run_python(CHANGED_LATE, env=env)
    assert last_json(proc.stdout) == {"mode": "auto"}  # what was read at Triton's import stays in force
    named = [line for line in proc.stderr.splitlines() if "had no effect" in line]
    assert len(named) == 1 and "WARNING" in named[0], proc.stderr
    for said in ("AUTOTUNE_MODE='pinned' (read as 'auto')", "AUTOTUNE_ON_MISS='error' (read as unset)",
                 "AUTOTUNE_VERIFY_STRICT='1' (read as '0')", "AUTOTUNE_LOG_LEVEL=unset (read as 'info')",
                 "AUTOTUNE_TABLE_PATH='redis://tune:***@db:6379/0'"):
        assert said in named[0], named[0]
    assert "S3CRETPW" not in proc.stderr


def test_settings_read_again_by_install_or_left_alone_are_not_named():
    install_after = """
import json, os
import triton
import autotune_guard
os.environ["AUTOTUNE_MODE"] = "pinned"
autotune_guard.install()
print(json.dumps({"mode": autotune_guard.active_policy().mode}))
"""
    proc = run_python(install_after, env=clean_env(AUTOTUNE_MODE="auto"))
    assert last_json(proc.stdout) == {"mode": "pinned"}
    assert "had no effect" not in proc.stderr, proc.stderr
    untouched = run_python("import os, triton\nos.environ['OTHER'] = '1'\nos.environ['AUTOTUNE_TRACEBACK'] = '1'\n",
                           env=clean_env(AUTOTUNE_MODE="auto"))
    assert "had no effect" not in untouched.stderr, untouched.stderr
