"""Observing Triton's own choices (auto, record) and Triton 3.8+'s autotuning listener.

A new ``cache`` entry is Triton's winner, logged (and recorded) with how Triton chose it: ``timed``,
``cache hit`` (its disk cache), ``pruned to one``. ``ObservedCache`` notes it as Triton stores it,
so that every launch after is Triton's own run with nothing of the guard around it; the label is
read from the Triton frame that stored it. A library subclass's run is observed around its launch
(``observe``), where Triton 3.8+'s ``knobs.autotuning.listener`` says which (not under
TRITON_INTERPRET=1), else the label is inferred from ``configs_timings``.
"""

from __future__ import annotations

import sys

from ...core.model import Choice, ChoiceKey, descriptor, key_text, record_entry, signature
from ...runtime import current
from . import provenance
from .tuner import MISSING, REGISTRY, STATE_ATTR

OBSERVED_MODES = ("auto", "record")


class ObservedCache(dict):
    """Triton's tuning ``cache`` of an autotuner observed in auto or record mode: reading it is
    dict's own (Triton's cached path costs what it costs without the guard); storing a winner
    notes it. Outside those modes (or another policy not launched yet) it is a plain dict."""

    __slots__ = ("autotuner",)

    def __setitem__(self, key, config):
        dict.__setitem__(self, key, config)
        state = self.autotuner.__dict__.get(STATE_ATTR)
        if state is not None and state.mode in OBSERVED_MODES and key not in state.seen and state.is_current():
            stored(self.autotuner, state, key, config, sys._getframe(1))


def observe_cache(autotuner):
    """The autotuner's ``cache`` as an ``ObservedCache`` (the same entries), once."""
    cache = autotuner.cache
    if type(cache) is not ObservedCache:
        observed = ObservedCache(cache)
        observed.autotuner = autotuner
        autotuner.cache = observed
    return autotuner.cache


def stored(autotuner, state, key, config, frame) -> None:
    """Note the winner Triton just stored for ``key``, labelled by the Triton frame that stored it:
    its disk-cache reader, a timing (a ``timings`` dict over the candidates in that frame), or its
    run keeping the one config the kernel's pruning left (3.8+). Timings over the live candidates
    are Triton's own timing; over Configs rebuilt from JSON, its disk cache."""
    code = frame.f_code if frame is not None else None
    timings = frame.f_locals.get("timings") if frame is not None else None
    found = measured(autotuner, timings, None) if isinstance(timings, dict) and config in timings else None
    if found is not None:
        how = "timed"
    elif (code is not None and code.co_name == "check_disk_cache") or isinstance(timings, dict):
        how = "cache hit"  # timings over Configs rebuilt from JSON: Triton's disk cache (3.4+)
    elif code is not None and code is REGISTRY.original_run.__code__:
        how = "pruned to one"
    else:  # stored by code that is not Triton's tuning: a winner all the same
        how = "timed"
    guard = current()
    desc = descriptor(config)
    record = None
    if state.mode == "record":
        record = record_entry(desc, signature(desc), how, found, [descriptor(c) for c in autotuner.configs],
                              provenance.of(autotuner))
    choice_key = ChoiceKey(guard.facts.get("arch"), state.qualified, key_text(key))
    if guard.note(state.epoch, choice_key, Choice(signature(desc), how), record):
        state.seen.add(key)


def observe(autotuner, state, timings_before) -> None:
    """Log the winners Triton chose that are not accounted for: the one this launch added (the
    newest entry) and any chosen before this epoch (``timings_before`` is MISSING: no launch)."""
    guard = current()
    arch = guard.facts.get("arch")
    cache = autotuner.cache
    timings_now = autotuner.__dict__.get("configs_timings")
    heard = getattr(REGISTRY.heard, "value", None)
    REGISTRY.heard.value = None
    newest = next(reversed(cache), None) if cache and timings_before is not MISSING else MISSING
    candidates = None
    for key, config in list(cache.items()):
        if key in state.seen:
            continue
        desc = descriptor(config)
        if key == newest:
            how, measured = how_chosen(autotuner, key, heard, timings_now, timings_before)
        else:
            how, measured = "reused", None
        record = None
        if state.mode == "record":
            candidates = candidates or [descriptor(c) for c in autotuner.configs]
            record = record_entry(desc, signature(desc), how, measured, candidates, provenance.of(autotuner))
        choice = Choice(signature(desc), "timed" if how == "reused" else how)
        if not guard.note(state.epoch, ChoiceKey(arch, state.qualified, key_text(key)), choice, record):
            return
        state.seen.add(key)


def how_chosen(autotuner, key, heard, timings_now, timings_before) -> tuple:
    """(label, Triton's timings by signature or None) for the entry this launch added."""
    if heard is not None and heard[0] == key and heard[2] is timings_now:  # Triton's listener said it
        if heard[1]:
            return "cache hit", None
        return "timed", measured(autotuner, heard[2], None)
    if timings_now is timings_before:
        # No timing and no disk-cache read, yet a new entry: Triton 3.8+ kept the one config the
        # kernel's pruning left.
        return "pruned to one", None
    found = measured(autotuner, timings_now, timings_before)
    # New timings over Configs rebuilt from JSON: Triton's disk cache (3.4+).
    return ("timed", found) if found is not None else ("cache hit", None)


def measured(autotuner, timings, timings_before) -> dict | None:
    """Triton's timings of the launch just made, by signature, if it timed in this process: it
    replaced ``configs_timings`` with one keyed by the live candidates."""
    if timings is None or timings is timings_before:
        return None
    live = {id(c) for c in autotuner.configs}
    if not all(id(c) in live for c in timings):
        return None
    return {signature(descriptor(c)): [float(t) for t in _as_list(v)] for c, v in timings.items()}


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


# --- Triton 3.8+'s listener ------------------------------------------------------------------------

def chain_listener(interpreting: bool) -> None:
    """Ours first, then whatever listener was set before. Not under TRITON_INTERPRET=1, where
    Triton's call of any listener fails (it looks for a JITFunction the interpreter does not make)."""
    if not REGISTRY.caps.pins_through_pruning or interpreting:
        return
    knobs = autotuning_knobs()
    if knobs is None:
        return
    if knobs.listener is not listener:
        REGISTRY.user_listener = knobs.listener
        knobs.listener = listener


def autotuning_knobs():
    try:
        from triton import knobs
    except ImportError:
        return None
    autotuning = getattr(knobs, "autotuning", None)
    return autotuning if autotuning is not None and hasattr(autotuning, "listener") else None


def listener(*, fn, key, best_config, configs_timings, duration, cache_hit, **more):
    """What Triton says about a choice it just made; passed on to the listener that was there."""
    REGISTRY.heard.value = (key, bool(cache_hit), configs_timings)
    if REGISTRY.user_listener is not None:
        REGISTRY.user_listener(fn=fn, key=key, best_config=best_config, configs_timings=configs_timings,
                               duration=duration, cache_hit=cache_hit, **more)


def tell_listener(autotuner, key, config) -> None:
    """A choice the guard made (Triton calls no listener for it): the user's listener hears it as
    Triton's disk-cache hits are told, untimed (``cache_hit=True``, no timings)."""
    if not REGISTRY.caps.pins_through_pruning:
        return
    knobs = autotuning_knobs()
    told = None if knobs is None else knobs.listener
    if told is listener:
        told = REGISTRY.user_listener
    if told is None:
        return
    fn = autotuner.fn
    while type(fn).__name__ != "JITFunction" and hasattr(getattr(fn, "fn", None), "fn"):
        fn = fn.fn
    told(fn=fn, key=key, best_config=config, configs_timings={}, duration=None, cache_hit=True)
