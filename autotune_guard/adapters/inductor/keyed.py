"""The per-key run of a kernel ``torch.compile`` compiled for dynamic shapes (Inductor keeps one
launcher for every key; the guard's choice is per key).

Inductor's own run for a decided key is written out with the per-key choice in it: the launcher
its steady path calls for that key (torch 2.13: the fast launcher Inductor itself built and cached
in ``_cached_launcher``; older torch: the chosen launcher, where its run's steady path is that one
call), under the same per-call conditions (no extra arguments, no profiler, no debug mode). So a
decided key costs a tuple and a dict lookup more than Inductor's own path, in Inductor's frame's
place. Anything else (a new key, a key switch, a profiler) goes through Inductor's own run with
the key's launcher in ``launchers``, as before.
"""

from __future__ import annotations

import inspect
import operator
import sys

from torch.autograd import profiler as autograd_profiler

from .. import _patching

MISSING = object()
STEADY_CALL = "launcher(*args,**kwargs,stream=stream"  # Inductor's steady launch, blanks removed (2.6 ... 2.13)


def follow(autotuner, key_of, launcher_for_key) -> _patching.Patch:
    """Put the per-key run on ``autotuner`` (this one object); ``launcher_for_key(key_text)`` is
    the launcher chosen for a key seen the first time. Returns the Patch that undoes it; the run
    says how it follows (``how_followed``: 'written-out', or 'wrapped' when this torch's run is not
    one the guard can write out, so every launch goes through Inductor's run)."""
    positions, text_of = key_of
    class_run = type(autotuner).run
    key_values = operator.itemgetter(*positions)  # C-level
    table: dict = {}  # key values -> the launcher chosen for the key
    fast: dict = {}  # key values -> what Inductor's steady path calls for the key
    in_force = [autotuner.launchers[0]]
    writes_out = can_write_out(autotuner)
    if not writes_out:
        return _wrap(autotuner, key_values, text_of, class_run, launcher_for_key)
    debug_mode = getattr(sys.modules.get(type(autotuner).__module__), "get_active_debug_mode", None)
    profiler = autograd_profiler

    def slow(args, stream, kwargs):
        values = key_values(args)
        launcher = table.get(values)
        if launcher is None:
            launcher = table[values] = launcher_for_key(text_of(args))
        if launcher is not in_force[0]:
            in_force[0] = launcher
            autotuner.launchers = [launcher]
            if "_cached_launcher" in autotuner.__dict__:  # torch 2.13's fast path caches the launcher
                autotuner._cached_launcher = None
        result = class_run(autotuner, *args, stream=stream, **kwargs)
        if writes_out and not kwargs and autotuner.launchers == [launcher]:
            steady = autotuner.__dict__.get("_cached_launcher", MISSING)
            if steady is MISSING and not launcher.store_cubin:
                fast[values] = launcher
            elif steady is not None and steady is not MISSING:
                fast[values] = steady
        return result

    def run(*args, stream, **kwargs):
        launcher = fast.get(key_values(args))
        if (launcher is not None and not kwargs and not profiler._is_profiler_enabled
                and (debug_mode is None or not debug_mode())):
            return launcher(*args, stream=stream)
        return slow(args, stream, kwargs)

    run.autotune_guard_keyed = "written-out"
    return _shadow_run(autotuner, run)


def _wrap(autotuner, key_values, text_of, class_run, launcher_for_key) -> _patching.Patch:
    """Every launch through Inductor's own run, the key's launcher put in ``launchers`` first."""
    table: dict = {}
    in_force = [autotuner.launchers[0]]

    def run(*args, **kwargs):
        launcher = table.get(key_values(args))
        if launcher is not in_force[0]:  # a key not seen yet (None), or another key's launcher
            if launcher is None:
                launcher = table[key_values(args)] = launcher_for_key(text_of(args))
            in_force[0] = launcher
            autotuner.launchers = [launcher]
            if "_cached_launcher" in autotuner.__dict__:
                autotuner._cached_launcher = None
        return class_run(autotuner, *args, **kwargs)

    run.autotune_guard_keyed = "wrapped"
    return _shadow_run(autotuner, run)


def _shadow_run(autotuner, run) -> _patching.Patch:
    """``run`` in front of the class's run on this one kernel, through the patching idiom; the run
    keeps its Patch, so whoever finds the run can undo it."""
    run.autotune_guard_patch = _patching.shadow(autotuner, "run", run)
    return run.autotune_guard_patch


def can_write_out(autotuner) -> bool:
    """Whether Inductor's steady path for a decided key is the one launcher call written out in
    ``follow``: torch's fast-path cache (2.13), or a run whose steady launch is ``STEADY_CALL`` and
    that has nothing else to do per call (no interpreter, no launch-parameter dumps, no plugins)."""
    if "_cached_launcher" in autotuner.__dict__:
        return True
    if any(getattr(autotuner, name, None) for name in ("triton_interpret", "dump_launch_params",
                                                         "dump_launch_tensors", "_plugins")):
        return False
    try:
        source = inspect.getsource(type(autotuner).run)
    except (OSError, TypeError):
        return False
    source = "".join(source.split())
    return STEADY_CALL in source and "_get_args_with_constexprs" not in source


def how_followed(autotuner) -> str | None:
    """'written-out', 'wrapped', or None (no per-key run on this kernel)."""
    run = autotuner.__dict__.get("run")
    return getattr(run, "autotune_guard_keyed", None)
