"""FlagGems' ``LibTuner`` governed through its own seams, with the names, keys, tables, choice log
and verification of Triton's autotuners.

``LibTuner.run`` never calls Triton's run: it asks its config cache (``self.cache``, a view of
FlagGems' persistent SQLite database) whether its own key (``get_key``: the key arguments through
its strategies, such as ``align32``, then the dtypes) is decided; if not, it prunes, runs its
``policy`` over a ``bench`` function (whose timings FlagGems keeps in the database too) and stores
the winner in ``self.cache``. The guard puts a view in front of that cache, per instance:

* pinned: the guard's pick (table, block sizes, on-miss rule) is the cache's answer before the
  launch, so the library neither reads its database nor times anything;
* auto and record: the database's earlier winner is hidden, so the library's policy decides in
  this process (from its stored timings when it has them) and the guard logs and records the
  winner with the timings it was given;
* consensus: one rank's library tunes a key for the job, the others are given its winner.

The library's key is the key of the log and the tables: it is what FlagGems decides per. Every
mode is carried out by the decision engine (``autotune_guard.deciding``); the family registers
itself in the registry beside the engine (``deciding.families``).
"""

from __future__ import annotations

import logging

from ...core.model import descriptor
from ...deciding import Tuned, first_launch
from ...deciding import families as registered
from ...runtime import current
from ... import _patching
from .eager import TritonChoice
from .registry import registry
from .seam import argument_names, configs_of, tuning_launch
from .tuner import STATE_ATTR, TunerState

logger = logging.getLogger("autotune_guard")

CACHE_PATCH_ATTR = "_autotune_guard_library_cache"  # the Patch that put the GovernedCache in place


def libtuner_shaped(owner) -> bool:
    """A class whose own ``run`` is FlagGems' ``LibTuner.run``: it defines ``get_key`` and
    ``policy`` beside it (a subclass that overrides ``run`` again is not: it is probed instead)."""
    names = owner.__dict__
    return all(callable(names.get(n)) or isinstance(names.get(n), staticmethod) for n in ("run", "get_key", "policy"))


class LibTunerFamily(registered.Family):
    name = "flaggems"
    recognises = "autotuner-run"

    def shaped(self, owner) -> bool:
        return libtuner_shaped(owner)

    def run(self, autotuner, original, args, kwargs):
        return run(autotuner, original, args, kwargs)


class Governed:
    """The strategy a LibTuner runs under in one epoch (``strategy_of`` names it)."""

    def __init__(self, mode: str):
        self.name = "untouched" if mode == "off" else f"libtuner-{mode}"


class GovernedCache:
    """What ``LibTuner.run`` sees as ``self.cache``: under a policy, the guard's decisions for the
    current epoch; otherwise the library's own cache, unchanged."""

    def __init__(self, attrs: dict, library):
        self._attrs, self.library = attrs, library

    def _state(self):
        state = self._attrs.get(STATE_ATTR)
        if isinstance(state, TunerState) and state.is_current() and state.mode != "off":
            return state
        return None

    def __contains__(self, key) -> bool:
        state = self._state()
        return key in self.library if state is None else key in state.selected

    def __getitem__(self, key):
        state = self._state()
        return self.library[key] if state is None else state.selected[key]

    def get(self, key, default=None):
        state = self._state()
        return self.library.get(key) if state is None else state.selected.get(key, default)

    def __setitem__(self, key, config) -> None:
        """The library's policy chose ``config``: into its database as always, and, under a policy,
        the guard's decision for this epoch (logged by the launch that tuned it)."""
        self.library[key] = config
        state = self._state()
        if state is not None:
            state.selected.setdefault(key, config)

    set = __setitem__

    def __getattr__(self, name):
        return getattr(self.library, name)


def run(autotuner, original, args, kwargs):
    """``LibTuner.run`` under the current policy: a key's first launch is decided by the engine
    (once per key per process: its gate), every later one is the library's own run."""
    guard = current()
    if guard.epoch.installed is None or len(configs_of(autotuner)) < 2:
        return original(autotuner, *args, **kwargs)
    state = state_for(autotuner)
    if state.mode == "off":
        return original(autotuner, *args, **kwargs)
    key = library_key(autotuner, args, kwargs)
    if key in state.selected:
        return original(autotuner, *args, **kwargs)
    choice = LibTunerChoice(autotuner, state, key, (args, kwargs), original)

    def apply(index, tuned):
        if tuned is not None:  # the library tuned it here: its launch ran the kernel
            state.selected.setdefault(key, tuned.chosen)
        elif index is not None:
            state.selected[key] = choice.live[index]
        return lambda: original(autotuner, *args, **kwargs)

    return first_launch(state.epoch, lambda: None if key in state.selected else choice, apply,
                        lambda: run(autotuner, original, args, kwargs), gate=registry().gate(autotuner, key))


class LibTunerChoice(TritonChoice):
    """One key of a LibTuner: the library's own run tunes it (its policy over its timings)."""

    def __init__(self, autotuner, state, key, call, original):
        super().__init__(autotuner, state, key, call)
        self.original = original

    @property
    def splits(self) -> bool:  # the library's policy over its timings is its own run's: one rank tunes
        return False

    def tune(self, how: str) -> Tuned:
        args, kwargs = self.call
        with self.state.lock:
            result, winner, timings = tuning_launch(self.autotuner, self.tuning_key, args, kwargs, self.original)
        return Tuned(descriptor(winner), winner, timings, result)


def library_key(autotuner, args, kwargs) -> tuple:
    """The key ``LibTuner.run`` decides by, computed as it computes it."""
    named = {**dict(zip(argument_names(autotuner), args)), **kwargs}
    return autotuner.get_key({k: v for k, v in named.items() if k in argument_names(autotuner)})


def state_for(autotuner) -> TunerState:
    """The LibTuner's state under the current epoch (built once, with the cache view in place);
    the generation is checked without the lock first, as the guarded run checks it."""
    guard = current()
    previous = autotuner.__dict__.get(STATE_ATTR)
    if isinstance(previous, TunerState) and previous.epoch is guard.epoch:
        return previous
    lock = registry().lock_of(autotuner)
    with lock:
        previous = autotuner.__dict__.get(STATE_ATTR)
        if isinstance(previous, TunerState) and previous.epoch is guard.epoch:
            return previous
        state = TunerState(autotuner, guard.epoch, lock, previous)
        state.strategy = Governed(state.mode)
        attrs = autotuner.__dict__
        if CACHE_PATCH_ATTR not in attrs:
            attrs[CACHE_PATCH_ATTR] = _patching.shadow(autotuner, "cache", GovernedCache(attrs, attrs["cache"]))
        guard.launched(guard.epoch, state.qualified, {k for c in configs_of(autotuner) for k in c.kwargs})
        if state.epoch.policy.enumerate:
            logger.info("autotuner %s (FlagGems LibTuner): %d candidates, %s", state.qualified,
                        len(configs_of(autotuner)), state.mode)
        attrs[STATE_ATTR] = state
        return state


registered.register(LibTunerFamily())
