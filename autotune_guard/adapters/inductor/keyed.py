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

import operator

from torch.autograd import profiler as autograd_profiler

from ... import _patching
from . import seam


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
    in_force = [seam.launchers_of(autotuner)[0]]
    if not seam.can_write_out(autotuner):
        return _wrap(autotuner, key_values, text_of, class_run, launcher_for_key)
    debug_mode = seam.debug_mode_probe(autotuner)
    profiler = autograd_profiler

    def slow(args, stream, kwargs):
        values = key_values(args)
        launcher = table.get(values)
        if launcher is None:
            launcher = table[values] = launcher_for_key(text_of(args))
        if launcher is not in_force[0]:
            in_force[0] = launcher
            seam.put_launcher(autotuner, launcher)
        result = class_run(autotuner, *args, stream=stream, **kwargs)
        if not kwargs:
            steady = seam.steady_launcher(autotuner, launcher)
            if steady is not None:
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
    in_force = [seam.launchers_of(autotuner)[0]]

    def run(*args, **kwargs):
        launcher = table.get(key_values(args))
        if launcher is not in_force[0]:  # a key not seen yet (None), or another key's launcher
            if launcher is None:
                launcher = table[key_values(args)] = launcher_for_key(text_of(args))
            in_force[0] = launcher
            seam.put_launcher(autotuner, launcher)
        return class_run(autotuner, *args, **kwargs)

    run.autotune_guard_keyed = "wrapped"
    return _shadow_run(autotuner, run)


def _shadow_run(autotuner, run) -> _patching.Patch:
    """``run`` in front of the class's run on this one kernel, through the patching idiom; the run
    keeps its Patch, so whoever finds the run can undo it."""
    run.autotune_guard_patch = _patching.shadow(autotuner, "run", run)
    return run.autotune_guard_patch


def how_followed(autotuner) -> str | None:
    """'written-out', 'wrapped', or None (no per-key run on this kernel)."""
    run = autotuner.__dict__.get("run")
    return getattr(run, "autotune_guard_keyed", None)
