"""The launch strategies: one small class each, chosen once per autotuner and epoch (``choose``).
Once a strategy has run an autotuner's first launch, later launches skip the guard (``go_direct``:
an instance ``run`` that shadows the class's); a new key meets the guard in a seam.

* ``Untouched``: out of scope, or a single candidate: Triton's run.
* ``Observe`` (auto, record): Triton's own run; a winner Triton stores in its ``cache`` is noted
  as it is stored (``observe.ObservedCache``). A library subclass that fills ``cache`` itself is
  observed around each launch instead.
* ``PinThroughPruning`` (pinned, Triton 3.8+): the pinned config is the only survivor of the
  kernel's own pruning, which Triton caches without timing; later launches are Triton's cached
  path itself (``direct``), or written out with the pre_hook given this call's own arguments
  (``decided``: ``seam.cached_run``), or Triton's run under the lock past the newest tested
  release (``held``).
* ``PinBySwap`` (pinned, Triton 3.3-3.7): ``configs`` swapped to ``[chosen]`` for a new key's
  launch, which Triton's single-config branch runs without timing or touching ``cache``; a decided
  key's launch is Triton's cached path written out over the guard's choices (``selected``:
  ``seam.cached_run``).
* ``ConsensusBySwap`` (consensus): the same, with a new key decided for the job (``consensus``).
"""

from __future__ import annotations

import functools
import types

from ...runtime import current
from ... import _patching
from . import library, observe
from .eager import first_launch_of, pinned_choice
from .registry import RUN_PATCH_ATTR, registry
from .seam import cache_of, cached_run, candidates, configs_of, has_config_pre_hooks, held_run, swap_run, timings_now


class Untouched:
    name = "untouched"

    def run(self, autotuner, state, args, kwargs):
        return registry().original_run(autotuner, *args, **kwargs)


class Observe:
    name = "observe"

    def run(self, autotuner, state, args, kwargs):
        if not state.library_check:  # the cache notes what Triton stores (observe_cache at go_direct)
            return registry().original_run(autotuner, *args, **kwargs)
        cache = cache_of(autotuner)
        if state.library_check and len(cache) != len(state.seen):
            library.check_entry(autotuner, state, args, kwargs)
        before = len(cache)
        timings = timings_now(autotuner)
        result = registry().original_run(autotuner, *args, **kwargs)
        if len(cache) != before:
            observe.observe(autotuner, state, timings)
        return result

    def go_direct(self, autotuner, state) -> None:
        """Triton's own run on the instance; its ``cache`` notes each winner it stores."""
        if state.library_check:
            return
        observe.observe_cache(autotuner)
        _shadow(autotuner, state, types.MethodType(registry().original_run, autotuner))

    def direct_name(self, autotuner, run) -> str:
        return "observe:direct"


class PinThroughPruning:
    """The choice lives in Triton's ``cache``; the guarded pruning (``guarded.prune``) makes it."""

    name = "pin-through-pruning"

    def run(self, autotuner, state, args, kwargs):
        if state.library_check:
            with state.lock:
                if len(cache_of(autotuner)) != len(state.seen):
                    library.check_entry(autotuner, state, args, kwargs)
                return held_run(autotuner, state, *args, **kwargs)
        return held_run(autotuner, state, *args, **kwargs)

    def go_direct(self, autotuner, state) -> None:
        """Later launches skip the guarded run (an instance attribute shadows the class's); a new
        key still meets the guard in the pruning. Under the guard's lock, so a new epoch cannot
        miss it (its listener takes the launches back)."""
        if state.library_check:
            return
        if not has_config_pre_hooks(autotuner):
            run = types.MethodType(registry().original_run, autotuner)  # no pre_hook reads the arguments threads share
        elif registry().caps.writes_out_decided:
            run = functools.partial(cached_run, autotuner, state, cache_of(autotuner))
        else:
            run = functools.partial(held_run, autotuner, state)
        _shadow(autotuner, state, run)

    def direct_name(self, autotuner, run) -> str:
        if getattr(run, "func", None) is cached_run:
            return "pin-through-pruning:decided"
        if getattr(run, "func", None) is held_run:
            return "pin-through-pruning:held"
        return "pin-through-pruning:direct"


def _shadow(autotuner, state, run) -> None:
    """``run`` on the instance, shadowing the guarded class ``run``. Under the guard's lock, so a
    new epoch cannot miss it (its listener takes the launches back)."""
    with current().lock:
        if not state.is_current() or autotuner.__dict__.get("_autotune_guard_state") is not state:
            return
        autotuner.__dict__[RUN_PATCH_ATTR] = _patching.shadow(autotuner, "run", run)
        registry().direct.add(autotuner)


class PinBySwap:
    name = "pin-by-swap"

    def go_direct(self, autotuner, state) -> None:
        """Decided keys through ``cached_run``; past the newest tested release, every launch here."""
        if state.library_check or len(configs_of(autotuner)) < 2 or not registry().caps.writes_out_cached:
            return
        _shadow(autotuner, state, functools.partial(cached_run, autotuner, state, state.selected))

    def direct_name(self, autotuner, run) -> str:
        return self.name + ":selected"

    def run(self, autotuner, state, args, kwargs):
        # Every launch comes here: the steady state is written out. Under the lock, because another
        # thread's launch swaps ``configs`` to one element for the length of its call.
        lock = state.lock
        lock.acquire()
        try:
            if len(configs_of(autotuner)) < 2:
                return registry().original_run(autotuner, *args, **kwargs)
            key = state.key.of(args, kwargs)
            config = state.selected.get(key)
            if config is None:
                if library.leaves_to_library(autotuner, state, key):
                    return registry().original_run(autotuner, *args, **kwargs)
                # a new policy installed meanwhile: the launch under it
                return pinned_choice(autotuner, state, key, candidates(autotuner, args, kwargs),
                                     lambda config: swap_run(autotuner, config, args, kwargs),
                                     lambda: autotuner.run(*args, **kwargs))
            return swap_run(autotuner, config, args, kwargs)
        finally:
            lock.release()


class ConsensusBySwap(PinBySwap):
    name = "consensus"

    def run(self, autotuner, state, args, kwargs):
        with state.lock:
            key = state.key.of(args, kwargs) if len(configs_of(autotuner)) > 1 else None
            config = None if key is None else state.selected.get(key)
            if key is None or config is not None or library.leaves_to_library(autotuner, state, key):
                return swap_run(autotuner, config, args, kwargs) if config is not None else \
                    registry().original_run(autotuner, *args, **kwargs)
        # A key consensus has not decided yet: outside the lock, which the decision takes after its gate.
        return first_launch_of(autotuner, state, key, args, kwargs)


STRATEGIES = {name: cls() for name, cls in (("off", Untouched), ("auto", Observe), ("record", Observe),
                                            ("consensus", ConsensusBySwap))}
_PINNED = {True: PinThroughPruning(), False: PinBySwap()}


def choose(state) -> object:
    """The strategy of an autotuner under its epoch, once."""
    if state.mode == "pinned":
        return _PINNED[registry().caps.pins_through_pruning]
    return STRATEGIES[state.mode]
