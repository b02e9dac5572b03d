"""The guard's methods on Triton's ``Autotuner``: ``run`` (finds the autotuner's state under the
current epoch, builds it at the first launch, hands the launch to its strategy), ``__init__`` and,
on Triton 3.8+, ``prune_configs`` (the pinned config as the pruning's only survivor)."""

from __future__ import annotations

import logging

from ...runtime import current
from . import launch, library, observe, provenance, seam, wall_timer
from .eager import pinned_choice
from .registry import registry
from .tuner import MISSING, STATE_ATTR, TunerState

logger = logging.getLogger("autotune_guard")
_guard = current()  # one object for the process's life: read on every launch


interpreting = wall_timer.interpreting
TIMING_MODES = ("auto", "record", "consensus")  # the modes whose candidates are timed in this process


def run(self, *args, **kwargs):
    state = self.__dict__.get(STATE_ATTR)
    if state is None or state.generation != _guard.epoch.generation:
        if _guard.epoch.installed is None:
            return registry().original_run(self, *args, **kwargs)
        state = state_for(self, (args, kwargs))
    return state.run(self, state, args, kwargs)


def init(self, *args, **kwargs):
    # Triton 3.3 resolves its default timer in __init__, which where Triton cannot time (the
    # interpreter, no GPU driver) fails at decoration ("0 active drivers"): the wall clock instead.
    if registry().caps.init_needs_timer and kwargs.get("do_bench") is None and wall_timer.cannot_time():
        kwargs["do_bench"] = wall_timer.wall_clock_timer
    registry().original_init(self, *args, **kwargs)
    if not getattr(type(self).run, "_autotune_guard", False):
        library.wrap_overriding_run(type(self))


def _time_by_wall_clock_where_needed(autotuner, state) -> None:
    """A timing mode where Triton cannot time: the wall clock times a kernel that brought no timer."""
    if state.mode in TIMING_MODES and seam.own_timer(autotuner) is None and wall_timer.cannot_time():
        seam.time_with(autotuner, wall_timer.wall_clock_timer)


def state_for(autotuner, launching=None) -> TunerState:
    """The autotuner's state under the current epoch, built once (under its lock: two threads meeting
    its first launch share one). ``launching``: the (args, kwargs) of the launch that builds it,
    whose key a subclass may just have filled in ``cache`` itself."""
    lock = registry().lock_of(autotuner)
    with lock:
        guard = current()
        epoch = guard.epoch
        previous = autotuner.__dict__.get(STATE_ATTR)
        if isinstance(previous, TunerState) and previous.epoch is epoch:
            return previous
        if launching is not None:
            provenance.note_launch(autotuner, launching[1])
        state = TunerState(autotuner, epoch, lock, previous)
        state.strategy = launch.choose(state)
        state.run = state.strategy.run
        _time_by_wall_clock_where_needed(autotuner, state)
        guard.launched(epoch, state.qualified, {k for c in seam.configs_of(autotuner) for k in c.kwargs})
        _announce(autotuner, state)
        if isinstance(state.strategy, launch.PinThroughPruning) or isinstance(previous, TunerState):
            _clear_pins(autotuner, state, previous)
        if state.mode in observe.OBSERVED_MODES and not state.library_check:
            observe.observe_cache(autotuner)  # before any launch can see the state
        autotuner.__dict__[STATE_ATTR] = state
        if state.library_check and launching is not None and seam.cache_of(autotuner) and state.mode != "off":
            library.check_entry(autotuner, state, *launching)
        if state.mode in observe.OBSERVED_MODES and seam.cache_of(autotuner):
            observe.observe(autotuner, state, MISSING)  # winners Triton chose before this epoch
        go_direct = getattr(state.strategy, "go_direct", None)
        if go_direct is not None:  # later launches skip this run
            go_direct(autotuner, state)
        return state


def _clear_pins(autotuner, state, previous) -> None:
    """Entries an earlier epoch pinned through Triton's cache are not Triton's winners; a pin
    through pruning governs keys Triton chose before too (they are timed again under a later auto
    policy). A subclass that fills the cache itself keeps what is not known to be Triton's."""
    cache = seam.cache_of(autotuner)
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
    if state.epoch.policy.enumerate and len(seam.configs_of(autotuner)) > 1:
        how = {"off": "left to Triton (out of scope)", "pinned": "pinned", "consensus": "consensus"}.get(
            state.mode, "timed")
        logger.info("autotuner %s: %d candidates, %s", state.qualified, len(seam.configs_of(autotuner)), how)


def prune(self, kwargs):
    """Triton 3.8+: the kernel's own pruning, then, for a pinned autotuner, the chosen config as its
    only survivor (Triton caches it without timing). Called by Triton's run for a key not in its
    cache; the pruning functions see this call's own arguments (``seam.pruned``)."""
    key, pruned = seam.pruned(self, seam.caller_frame(), kwargs)
    while True:
        state = self.__dict__.get(STATE_ATTR)
        if not isinstance(state, TunerState) or not state.is_current():
            if current().epoch.installed is None:
                return pruned
            state = state_for(self)
        if not isinstance(state.strategy, launch.PinThroughPruning):
            return pruned
        if key is None:  # pruning called from elsewhere than Triton's run: the key of its arguments
            key = state.key.of((), {**seam.shared_arguments(self), **kwargs})
        config = state.selected.get(key)
        if config is None:
            config = pinned_choice(self, state, key, list(pruned), lambda chosen: chosen, lambda: None)
            if config is None:  # a new policy was installed meanwhile: choose under it
                continue
        state.seen.add(key)
        return [config]


for _method in (run, init, prune):
    _method._autotune_guard = True
