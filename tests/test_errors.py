"""The error hierarchy (``core/errors``): one base, a builtin beside it, fields a handler can read
without parsing the message, and messages unchanged by the fields."""

import inspect
import pickle

import pytest

from autotune_guard.core import errors
from autotune_guard.core.settings import policy_from_settings


def _classes():
    return [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, Exception)]


def test_every_class_is_a_guard_error_and_a_builtin():
    for cls in _classes():
        assert issubclass(cls, errors.GuardError), cls
        if cls is not errors.GuardError and not issubclass(cls, errors.InputError):
            # a caller that does not know the guard catches it as the builtin it is
            assert any(base.__module__ == "builtins" and base is not Exception for base in cls.__mro__[1:]), cls
    assert issubclass(errors.OutputPathError, (errors.PolicyError, PermissionError))
    assert issubclass(errors.ActivationError, ImportError)


def test_report_errors_live_in_core_and_keep_their_old_names():
    from autotune_guard.report import cache_import, readers, reading

    assert reading.InputError is errors.InputError
    assert cache_import.CacheError is errors.CacheError and issubclass(errors.CacheError, errors.InputError)
    assert readers.ReaderError is errors.ReaderError


def test_a_bad_setting_names_variable_value_and_allowed():
    with pytest.raises(errors.PolicyError) as caught:
        policy_from_settings({"AUTOTUNE_MODE": "pined"})
    error = caught.value
    assert (error.variable, error.value) == ("AUTOTUNE_MODE", "pined") and "pinned" in error.allowed
    assert str(error) == ("AUTOTUNE_MODE='pined' is not allowed; did you mean AUTOTUNE_MODE=pinned? allowed: "
                          + ", ".join(error.allowed))
    with pytest.raises(errors.PolicyError) as caught:
        policy_from_settings({"AUTOTUNE_CONSENSUS_TIMEOUT": "-1"})
    assert caught.value.variable == "AUTOTUNE_CONSENSUS_TIMEOUT" and "seconds" in caught.value.allowed
    with pytest.raises(errors.PolicyError) as caught:
        policy_from_settings({"AUTOTUNE_MDOE": "pinned"})
    assert caught.value.variable == "AUTOTUNE_MDOE" and "AUTOTUNE_MODE" in caught.value.allowed


def test_a_report_input_error_names_its_path(tmp_path):
    from autotune_guard.report.reading import expand

    missing = str(tmp_path / "nothing-here")
    with pytest.raises(errors.InputError) as caught:
        expand(missing)
    assert caught.value.path == missing and str(caught.value).startswith(f"{missing}: no such file")


def test_fields_default_to_none_survive_pickling_and_refuse_unknown_names():
    error = errors.OutputPathError("AUTOTUNE_RECORD_PATH='/x/rec': cannot write files in /x",
                                   variable="AUTOTUNE_RECORD_PATH", value="/x/rec", path="/x")
    assert isinstance(error, PermissionError) and str(error) == "AUTOTUNE_RECORD_PATH='/x/rec': cannot write files in /x"
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), str(back), back.variable, back.path, back.allowed) == \
        (errors.OutputPathError, str(error), "AUTOTUNE_RECORD_PATH", "/x", None)
    assert errors.SelectionError("refused").kernel is None
    with pytest.raises(TypeError, match="no field colour"):
        errors.PolicyError("bad", colour="red")
    unsafe = errors.UnsafePathError(13, "is a symlink: not followed", "/tmp/link")
    assert str(unsafe) == "/tmp/link: is a symlink: not followed" and unsafe.path == "/tmp/link"
