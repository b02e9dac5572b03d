"""Triton's run called the ways the strategies need: under the autotuner's lock (``held_run``),
with ``configs`` swapped to the chosen one (``swap_run``), and the candidates after the kernel's
own pruning. A failed launch leaves the autotuner as it was."""

from __future__ import annotations

from .tuner import MISSING, REGISTRY

_registry = REGISTRY


def held_run(autotuner, state, *args, **kwargs):
    """Triton's own run under the autotuner's lock (its ``nargs`` are shared by every thread and a
    pre_hook reads them). A failed launch leaves the autotuner as it was. acquire/release rather
    than ``with``: measurably cheaper per launch."""
    lock = state.lock
    lock.acquire()
    try:
        attrs = autotuner.__dict__
        saved = attrs.get("best_config", MISSING), attrs.get("nargs", MISSING)
        try:
            return _registry.original_run(autotuner, *args, **kwargs)
        except BaseException:
            _restore_fields(autotuner, saved)
            _forget_failed_key(autotuner, state, args, kwargs)
            raise
    finally:
        lock.release()


def swap_run(autotuner, config, args, kwargs):
    """Launch ``config`` through Triton's single-config branch; the caller holds the lock."""
    saved_configs = autotuner.configs
    attrs = autotuner.__dict__
    saved = attrs.get("best_config", MISSING), attrs.get("nargs", MISSING)
    autotuner.configs = [config]
    try:
        return _registry.original_run(autotuner, *args, **kwargs)
    except BaseException:
        _restore_fields(autotuner, saved)
        raise
    finally:
        autotuner.configs = saved_configs


def _restore_fields(autotuner, saved) -> None:
    """``best_config`` and ``nargs`` as they were (Triton's run sets both and clears ``nargs`` only
    when it completes)."""
    attrs = autotuner.__dict__
    for name, value in zip(("best_config", "nargs"), saved):
        if value is MISSING:
            attrs.pop(name, None)
        else:
            attrs[name] = value


def _forget_failed_key(autotuner, state, args, kwargs) -> None:
    """No cache entry for a key whose first launch failed (the choice stays: the next launch runs it)."""
    try:
        key = state.key.of(args, kwargs)
    except Exception:  # the arguments themselves were the problem
        return
    config = state.selected.get(key)
    if config is not None and autotuner.cache.get(key) is config:
        del autotuner.cache[key]
        state.seen.discard(key)


def candidates(autotuner, args, kwargs) -> list:
    """The live candidates after the kernel's own pruning (early_config_prune, perf_model/top_k);
    the caller holds the lock (pruning reads ``nargs``)."""
    if not (autotuner.early_config_prune or autotuner.perf_model):
        return list(autotuner.configs)
    saved = autotuner.__dict__.get("nargs")
    autotuner.nargs = dict(zip(autotuner.arg_names, args))
    try:
        prune = _registry.original_prune or type(autotuner).prune_configs
        return list(prune(autotuner, kwargs))
    finally:
        autotuner.nargs = saved
