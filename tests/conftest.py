"""Shared fixtures.  Every kernel in these tests runs on the CPU through Triton's interpreter."""

import _posixsubprocess
import contextlib
import logging
import os
import subprocess

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


@pytest.fixture(scope="session", autouse=True)
def long_claimer(request, tmp_path_factory):
    """With GUARD_LONG=1 (scripts/test.sh sets it for its first Triton): a consensus job whose
    claimer tunes one key for 10 minutes, started when the session starts and checked by its last
    test (test_zz_long_claimer.py), so that it costs the suite next to nothing. Two nodes; the
    second, where a pid namespace can be had, on "another machine", watching the heartbeat."""
    checked = any(item.name.startswith("test_a_claimer_that_tunes_one_key_for_10") for item in request.session.items)
    # Not in a pytest-xdist worker: each would start one (scripts/test.sh gives it a session of its own).
    if os.environ.get("GUARD_LONG") != "1" or not checked or os.environ.get("PYTEST_XDIST_WORKER"):
        yield None
        return
    from realistic import can_unshare, torchrun_job

    job = torchrun_job(tmp_path_factory.mktemp("long") / "claimer", nproc=2, nodes=2,
                       own_namespace=(1,) if can_unshare() else (), AUTOTUNE_MODE="consensus", REAL_KEYS=1,
                       REAL_CANDIDATE_S=150, REAL_GIL_BLOCK_S=30, REAL_STAGGER_S=2)
    yield job
    for proc in job.procs:  # the session ended before its check (-x, or a selection): no orphans
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# The two tiers: `pytest -m "not slow"` runs the in-process tests (under 30 s of CPU);
# `pytest -m slow` the tests that start another process (a subprocess, torchrun, multiprocessing
# workers, a fresh venv, a browser, a fork), and the few in-process ones that take seconds of CPU
# each (simulations of many cold runs, the fuzzers, retunes through the interpreter). A test is slow by its module's `pytestmark` or its own
# `@pytest.mark.slow` (pyproject.toml registers the marker). So that the fast tier stays fast, a
# test without the marker that starts a process fails, naming what it started.
# subprocess keeps its own reference to fork_exec (`_fork_exec`, Python 3.11+); multiprocessing uses the module's.
_STARTERS = ((subprocess, "_fork_exec"), (_posixsubprocess, "fork_exec"), (os, "fork"), (os, "posix_spawn"),
             (os, "posix_spawnp"), (os, "system"))


def _described(name, args) -> str:
    """A process start's command line, short (the function's name where it has none)."""
    if name == "system":
        return str(args[0])[:200] if args else name
    argv = args[1] if name.startswith("posix_spawn") and len(args) > 1 else args[0] if args else ()
    if not isinstance(argv, (list, tuple)):
        return name
    return " ".join(a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in argv)[:200] or name


@contextlib.contextmanager
def _processes_started():
    """Every process started (subprocess, multiprocessing's spawn and forkserver, os.fork,
    posix_spawn, os.system) while the block runs, as short descriptions; each is still started."""
    started, saved = [], []
    for owner, name in _STARTERS:
        original = getattr(owner, name, None)
        if original is None:
            continue

        def starting(*args, _original=original, _name=name, **kwargs):
            started.append(_described(_name, args))
            return _original(*args, **kwargs)

        saved.append((owner, name, original))
        setattr(owner, name, starting)
    try:
        yield started
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if item.get_closest_marker("slow") is not None:
        return (yield)
    with _processes_started() as started:
        result = yield
    if started:
        pytest.fail(f"{item.nodeid} started {len(started)} process(es), first {started[0]!r}: mark it "
                    "@pytest.mark.slow (the fast tier, -m 'not slow', is the in-process tests)", pytrace=False)
    return result
