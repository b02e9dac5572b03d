"""Warnings a user can silence by name (AUTOTUNE_DISABLE_WARNINGS, core/warning_names.py): each ends
with its name, a silenced one goes to DEBUG, an unknown name is refused naming what is allowed, and
what the guard promises to name cannot be silenced. A real Triton kernel under TRITON_INTERPRET=1."""

import pytest

from autotune_guard import PolicyError
from autotune_guard.core import warning_names
from support import clean_env, run_python

ALONE = "timed by this process alone, as in auto mode"
RUN = """
from kernels import winners
winners.launch(winners.make(list(winners.COSTS)))
"""


def _consensus_alone(tmp_path, **settings):
    """A cold process alone under consensus: its lines about timing alone ("LEVEL: text")."""
    tmp_path.mkdir()
    proc = run_python(RUN, env=clean_env(AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=str(tmp_path), **settings))
    assert proc.returncode == 0, proc.stderr
    return [line.split("] ", 1)[1] for line in proc.stderr.splitlines() if ALONE in line]


@pytest.mark.slow
def test_a_named_warning_carries_its_name_and_is_silenced_by_it(tmp_path):
    (said,) = _consensus_alone(tmp_path / "said")
    assert said.startswith("INFO: ") and said.endswith("[consensus-alone]")
    assert _consensus_alone(tmp_path / "silenced", AUTOTUNE_DISABLE_WARNINGS="newer-triton, consensus-alone") == []
    (debug,) = _consensus_alone(tmp_path / "debug", AUTOTUNE_DISABLE_WARNINGS="consensus-alone",
                                AUTOTUNE_LOG_LEVEL="debug")
    assert debug.startswith("DEBUG: ")  # still there for whoever reads DEBUG


def test_an_unknown_name_is_refused_naming_the_variable_the_value_and_what_is_allowed(guard):
    with pytest.raises(PolicyError) as refused:
        guard({"AUTOTUNE_MODE": "auto", "AUTOTUNE_DISABLE_WARNINGS": "consensus-alone,ungoverned"})
    said = str(refused.value)
    assert "AUTOTUNE_DISABLE_WARNINGS='consensus-alone,ungoverned'" in said
    assert "'ungoverned' is not a warning that can be silenced" in said and "allowed: newer-triton," in said


def test_what_the_guard_promises_to_name_cannot_be_silenced():
    # An ungoverned choice, a fallback that costs speed, a refused entry: named whatever is set.
    for promised in ("ungoverned", "pinned-fallback", "other-numerics", "max-autotune"):
        assert promised not in warning_names.SILENCEABLE
    assert all(name == name.lower() and " " not in name for name in warning_names.SILENCEABLE)
