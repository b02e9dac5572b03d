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

The library's key is the key of the log and the tables: it is what FlagGems decides per.
"""

from __future__ import annotations

import logging

from ...core import consensus as protocol
from ...deciding import consensus as engine
from ...core.model import Choice, ChoiceKey, descriptor, key_text, record_entry, signature
from ...runtime import current
from . import consensus, observe, provenance
from .calls import candidates
from .tuner import MISSING, REGISTRY, STATE_ATTR, TunerState

logger = logging.getLogger("autotune_guard")

LIBRARY_CACHE_ATTR = "_autotune_guard_library_cache"


def libtuner_shaped(owner) -> bool:
    """A class whose own ``run`` is FlagGems' ``LibTuner.run``: it defines ``get_key`` and
    ``policy`` beside it (a subclass that overrides ``run`` again is not: it is probed instead)."""
    names = owner.__dict__
    return all(callable(names.get(n)) or isinstance(names.get(n), staticmethod) for n in ("run", "get_key", "policy"))


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
    """``LibTuner.run`` under the current policy."""
    guard = current()
    if guard.epoch.installed is None or len(autotuner.configs) < 2:
        return original(autotuner, *args, **kwargs)
    state = state_for(autotuner)
    if state.mode == "off":
        return original(autotuner, *args, **kwargs)
    key = library_key(autotuner, args, kwargs)
    if key in state.selected:
        return original(autotuner, *args, **kwargs)
    if state.mode == "pinned":
        with state.lock:
            if key not in state.selected and not _pin(autotuner, state, key, candidates(autotuner, args, kwargs)):
                return run(autotuner, original, args, kwargs)  # a new policy was installed meanwhile
        return original(autotuner, *args, **kwargs)
    if state.mode == "consensus":
        return _consensus(autotuner, state, key, original, args, kwargs)
    with state.lock:
        result, winner, timings = _library_tunes(autotuner, state, key, original, args, kwargs)
        _note(autotuner, state, key, winner, timings, "timed")
    return result


def library_key(autotuner, args, kwargs) -> tuple:
    """The key ``LibTuner.run`` decides by, computed as it computes it."""
    named = {**dict(zip(autotuner.arg_names, args)), **kwargs}
    return autotuner.get_key({k: v for k, v in named.items() if k in autotuner.arg_names})


def state_for(autotuner) -> TunerState:
    """The LibTuner's state under the current epoch (built once, with the cache view in place)."""
    lock = REGISTRY.lock_of(autotuner)
    with lock:
        guard = current()
        previous = autotuner.__dict__.get(STATE_ATTR)
        if isinstance(previous, TunerState) and previous.epoch is guard.epoch:
            return previous
        state = TunerState(autotuner, guard.epoch, lock, previous)
        state.strategy = Governed(state.mode)
        attrs = autotuner.__dict__
        if attrs.get(LIBRARY_CACHE_ATTR, MISSING) is MISSING:
            attrs[LIBRARY_CACHE_ATTR] = attrs["cache"]
            attrs["cache"] = GovernedCache(attrs, attrs[LIBRARY_CACHE_ATTR])
        guard.launched(guard.epoch, state.qualified, {k for c in autotuner.configs for k in c.kwargs})
        if state.epoch.policy.enumerate:
            logger.info("autotuner %s (FlagGems LibTuner): %d candidates, %s", state.qualified,
                        len(autotuner.configs), state.mode)
        attrs[STATE_ATTR] = state
        return state


def _pin(autotuner, state, key, live) -> bool:
    """The pinned rule's pick among ``live`` for ``key``, noted; False when a new policy was
    installed meanwhile."""
    guard = current()
    choice_key = ChoiceKey(guard.facts.get("arch"), state.qualified, key_text(key))
    descriptors = [descriptor(c) for c in live]
    provenance.check_pinned(autotuner, state, choice_key)
    pick = guard.pin(state.epoch, choice_key, descriptors)
    state.selected[key] = live[pick.index]
    if not guard.note(state.epoch, choice_key, Choice(signature(descriptors[pick.index]), "pinned")):
        state.selected.pop(key, None)
        return False
    return True


def _library_tunes(autotuner, state, key, original, args, kwargs):
    """The library's own tuning launch of ``key``: (its result, the winner, its timings by
    signature). The caller holds the lock."""
    before = autotuner.__dict__.get("configs_timings")
    result = original(autotuner, *args, **kwargs)
    winner = state.selected.get(key, autotuner.__dict__.get("best_config"))
    return result, winner, observe.measured(autotuner, autotuner.__dict__.get("configs_timings"), before)


def _note(autotuner, state, key, winner, timings, how) -> None:
    guard = current()
    desc = descriptor(winner)
    record = None
    if state.epoch.policy.record_path:
        record = record_entry(desc, signature(desc), how, timings, [descriptor(c) for c in autotuner.configs],
                              provenance.of(autotuner))
    guard.note(state.epoch, ChoiceKey(guard.facts.get("arch"), state.qualified, key_text(key)),
               Choice(signature(desc), how), record)


def _consensus(autotuner, state, key, original, args, kwargs):
    """A key's first launch under consensus: one rank's library tunes it for the job (the same
    Store protocol as Triton's autotuners), the others launch its winner untimed."""
    with REGISTRY.gate(autotuner, key):
        if key in state.selected:
            return original(autotuner, *args, **kwargs)
        guard = current()
        choice_key = ChoiceKey(guard.facts.get("arch"), state.qualified, key_text(key))
        with state.lock:
            live = candidates(autotuner, args, kwargs)
        signatures = [signature(descriptor(c)) for c in live]
        index = from_table = consensus.table_index(autotuner, state, choice_key, live)
        store = guard.job_store(choice_key)
        if store is None:
            if index is not None:
                consensus.settle(autotuner, state, key, choice_key, live[index], signatures[index], None, "pinned")
                return original(autotuner, *args, **kwargs)
            with state.lock:
                result, winner, timings = _library_tunes(autotuner, state, key, original, args, kwargs)
            consensus.tuned_for_job(autotuner, state, choice_key, winner)
            consensus.settle(autotuner, state, key, choice_key, winner, signature(descriptor(winner)), timings, "timed")
            return result

        def tune():  # on the claimer only, when its table lacks the key (a table's entry goes with the claim)
            with state.lock:
                tuned = _library_tunes(autotuner, state, key, original, args, kwargs)
            return signature(descriptor(tuned[1])), tuned

        name = protocol.decision_name(choice_key.arch, choice_key.kernel, choice_key.key)
        index, tuned_here, tuned = engine.decide(store, choice_key.what(), name, guard.facts.ask("rank_now", (0, 1))[0],
                                                   signatures, tune, state.epoch.policy.consensus_timeout,
                                                   dead_after=state.epoch.policy.consensus_dead_after,
                                                   from_table=None if index is None else signatures[index])
        if tuned_here and tuned[1] is not None:
            result, winner, timings = tuned[1]
            consensus.tuned_for_job(autotuner, state, choice_key, winner)
            consensus.settle(autotuner, state, key, choice_key, winner, tuned[0], timings, "consensus")
            return result
        how = "table" if index == from_table else "consensus"  # the job followed this rank's table entry too
        consensus.settle(autotuner, state, key, choice_key, live[index], signatures[index], None, how)
    return original(autotuner, *args, **kwargs)
