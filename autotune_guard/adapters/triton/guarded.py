"""The guard's methods on Triton's ``Autotuner``: ``run`` (finds the autotuner's state under the
current epoch, builds it at the first launch, hands the launch to its strategy), ``__init__`` and,
on Triton 3.8+, ``prune_configs`` (the pinned config as the pruning's only survivor)."""

from __future__ import annotations

import logging
import os
import sys

from ...runtime import current
from . import launch, library, observe
from .tuner import MISSING, REGISTRY, STATE_ATTR, TunerState

logger = logging.getLogger("autotune_guard")
_registry = REGISTRY
_guard = current()  # one object for the process's life: read on every launch


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def run(self, *args, **kwargs):
    state = self.__dict__.get(STATE_ATTR)
    if state is None or state.generation != _guard.epoch.generation:
        if _guard.epoch.installed is None:
            return _registry.original_run(self, *args, **kwargs)
        state = state_for(self, (args, kwargs))
    return state.run(self, state, args, kwargs)


def init(self, *args, **kwargs):
    # Triton 3.3 resolves its default timer in __init__, which under TRITON_INTERPRET=1 on a
    # CPU-only machine fails at decoration ("0 active drivers") even for kernels the guard pins.
    if _registry.caps.init_needs_timer and kwargs.get("do_bench") is None and interpreting():
        kwargs["do_bench"] = _no_timer_under_interpreter
    _registry.original_init(self, *args, **kwargs)
    if not getattr(type(self).run, "_autotune_guard", False):
        library.wrap_overriding_run(type(self))


def _no_timer_under_interpreter(kernel_call, quantiles):
    raise RuntimeError("Triton's default timer needs a GPU driver; under TRITON_INTERPRET=1 give the kernel "
                       "do_bench=..., or pin it with AUTOTUNE_MODE=pinned")


def state_for(autotuner, launching=None) -> TunerState:
    """The autotuner's state under the current epoch, built once (under its lock: two threads meeting
    its first launch share one). ``launching``: the (args, kwargs) of the launch that builds it,
    whose key a subclass may just have filled in ``cache`` itself."""
    lock = _registry.lock_of(autotuner)
    with lock:
        guard = current()
        epoch = guard.epoch
        previous = autotuner.__dict__.get(STATE_ATTR)
        if isinstance(previous, TunerState) and previous.epoch is epoch:
            return previous
        state = TunerState(autotuner, epoch, lock, previous)
        state.strategy = launch.choose(state)
        state.run = state.strategy.run
        guard.launched(epoch, state.qualified, {k for c in autotuner.configs for k in c.kwargs})
        _announce(autotuner, state)
        if isinstance(state.strategy, launch.PinThroughPruning) or isinstance(previous, TunerState):
            _clear_pins(autotuner, state, previous)
        if state.mode in observe.OBSERVED_MODES and not state.library_check:
            observe.observe_cache(autotuner)  # before any launch can see the state
        autotuner.__dict__[STATE_ATTR] = state
        if state.library_check and launching is not None and autotuner.cache and state.mode != "off":
            library.check_entry(autotuner, state, *launching)
        if state.mode in observe.OBSERVED_MODES and autotuner.cache:
            observe.observe(autotuner, state, MISSING)  # winners Triton chose before this epoch
        go_direct = getattr(state.strategy, "go_direct", None)
        if go_direct is not None:  # later launches skip this run
            go_direct(autotuner, state)
        return state


def _clear_pins(autotuner, state, previous) -> None:
    """Entries an earlier epoch pinned through Triton's cache are not Triton's winners; a pin
    through pruning governs keys Triton chose before too (they are timed again under a later auto
    policy). A subclass that fills the cache itself keeps what is not known to be Triton's."""
    cache = autotuner.cache
    if isinstance(previous, TunerState) and isinstance(previous.strategy, launch.PinThroughPruning):
        for key, config in previous.selected.items():
            if cache.get(key) is config:
                del cache[key]
    if isinstance(state.strategy, launch.PinThroughPruning):
        if state.library_check:
            for key in state.accounted:
                cache.pop(key, None)
        else:
            cache.clear()


def _announce(autotuner, state) -> None:
    if state.epoch.policy.enumerate and len(autotuner.configs) > 1:
        how = {"off": "left to Triton (out of scope)", "pinned": "pinned", "consensus": "consensus"}.get(
            state.mode, "timed")
        logger.info("autotuner %s: %d candidates, %s", state.qualified, len(autotuner.configs), how)


def prune(self, kwargs):
    """Triton 3.8+: the kernel's own pruning, then, for a pinned autotuner, the chosen config as its
    only survivor (Triton caches it without timing). Called by Triton's run for a key not in its
    cache; the pruning functions see this call's own arguments even when other threads launch the
    autotuner meanwhile (and rewrite ``self.nargs``)."""
    call = _tritons_call(sys._getframe(1))
    if call is not None and (self.early_config_prune or self.perf_model):
        pruned = _registry.original_prune(_OwnArguments(self, dict(zip(self.arg_names, call[1]))), kwargs)
    else:
        pruned = _registry.original_prune(self, kwargs)
    while True:
        state = self.__dict__.get(STATE_ATTR)
        if not isinstance(state, TunerState) or not state.is_current():
            if current().epoch.installed is None:
                return pruned
            state = state_for(self)
        if not isinstance(state.strategy, launch.PinThroughPruning):
            return pruned
        key = call[0] if call is not None else state.key.of((), {**(self.nargs or {}), **kwargs})
        config = state.selected.get(key)
        if config is None:
            config = launch.pinned_choice(self, state, key, list(pruned))
            if config is None:  # a new policy was installed meanwhile: choose under it
                continue
        state.seen.add(key)
        return [config]


def _tritons_call(frame):
    """(the tuning key, the positional arguments) of the call of Triton's run that called the
    pruning (its locals ``key`` and ``args``), or None when pruning was called from elsewhere. Read
    from Triton's own frame because a kernel launched directly (no guard frame on the steady path)
    meets its new keys here, and ``self.nargs`` may be another thread's by now."""
    if frame is not None and frame.f_code is _registry.original_run.__code__:
        local = frame.f_locals
        key, args = local.get("key"), local.get("args")
        if isinstance(key, tuple) and isinstance(args, tuple):
            return key, args
    return None


class _OwnArguments:
    """The autotuner as the kernel's pruning functions see it at a new key's first launch: its
    ``nargs`` are this call's arguments; every other attribute is the autotuner's."""

    def __init__(self, autotuner, nargs):
        self.__dict__["_autotuner"] = autotuner
        self.__dict__["nargs"] = nargs

    def __getattr__(self, name):
        return getattr(self.__dict__["_autotuner"], name)


for _method in (run, init, prune):
    _method._autotune_guard = True
