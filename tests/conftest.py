"""Shared fixtures.  Every kernel in these tests runs on the CPU through Triton's interpreter."""

import logging
import os

import pytest

# Kernels are built as interpreted functions only if this is set before they are decorated.
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def guard():
    """``guard(settings, **kw)`` installs a policy in this process (``autotune_guard.install``);
    after the test the process is left as an unguarded one (no policy, empty choice log)."""
    import triton  # noqa: F401  (installs in place on Triton's Autotuner)

    import autotune_guard

    saved = autotune_guard.active_policy()
    yield autotune_guard.install
    if saved is not None:
        autotune_guard.install(saved)
    else:
        autotune_guard.uninstall()  # per-autotuner state of the test's policy is dropped; the log too


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def messages(self, level=logging.DEBUG):
        return [r.getMessage() for r in self.records if r.levelno >= level]


@pytest.fixture
def ag_log():
    """What the ``autotune_guard`` logger says during the test (it does not propagate to root)."""
    handler = _Collect()
    log = logging.getLogger("autotune_guard")
    log.addHandler(handler)
    yield handler
    log.removeHandler(handler)
