"""Observing Triton's own choices (auto, record).

A new ``cache`` entry is Triton's winner, noted (and recorded) through the decision engine with how
Triton chose it: ``timed``, ``cache hit`` (its disk cache), ``pruned to one``. ``ObservedCache``
notes it as Triton stores it, so that every launch after is Triton's own run with nothing of the
guard around it; the label is read from the Triton frame that stored it (``seam.how_stored``). A
library subclass's run is observed around its launch (``observe``), where Triton 3.8+'s listener
says which (not under TRITON_INTERPRET=1), else the label is inferred from Triton's timings.
"""

from __future__ import annotations

from ... import _patching
from ...deciding import selected
from .eager import TritonChoice, note_winner
from .seam import cache_of, caller_frame, how_chosen, how_stored, timing_in
from .registry import registry
from .tuner import MISSING, STATE_ATTR

OBSERVED_MODES = ("auto", "record")
CACHE_PATCH_ATTR = "_autotune_guard_cache_patch"  # the Patch that put the ObservedCache in place


class ObservedCache(dict):
    """Triton's tuning ``cache`` of an autotuner observed in auto or record mode: reading it is
    dict's own (Triton's cached path costs what it costs without the guard); storing a winner
    notes it. Outside those modes (or another policy not launched yet) it is a plain dict."""

    __slots__ = ("autotuner",)

    def __setitem__(self, key, config):
        dict.__setitem__(self, key, config)
        state = self.autotuner.__dict__.get(STATE_ATTR)
        if state is not None and state.mode in OBSERVED_MODES and key not in state.seen and state.is_current():
            stored(self.autotuner, state, key, config, caller_frame())


def observe_cache(autotuner):
    """The autotuner's ``cache`` as an ``ObservedCache`` (the same entries), once; its Patch is
    kept on the autotuner, so that it can be undone."""
    cache = cache_of(autotuner)
    if type(cache) is not ObservedCache:
        observed = ObservedCache(cache)
        observed.autotuner = autotuner
        autotuner.__dict__[CACHE_PATCH_ATTR] = _patching.shadow(autotuner, "cache", observed)
    return cache_of(autotuner)


def stored(autotuner, state, key, config, frame) -> None:
    """Note the winner Triton just stored for ``key``, labelled by the Triton frame that stored it.
    Under record, what Triton timed is the first pass of a selection worth freezing: its finalists
    are timed again before Triton launches, and the verdict replaces Triton's pick (``reselect``)."""
    how, timings = how_stored(autotuner, config, frame)
    measured = None
    if how == "timed" and timings and state.mode == "record":
        config, measured = reselect(autotuner, state, key, frame, config)
    if note_winner(autotuner, state, key, config, how, timings, measured=measured):
        state.seen.add(key)


def reselect(autotuner, state, key, frame, config) -> tuple:
    """(the config to launch and keep, what was measured) for a key Triton just timed in one pass:
    the finalists timed again in rounds (``deciding.selected``, Triton's timings as the first pass),
    the verdict written into ``cache`` where Triton reads it for its launch. Triton's pick stands
    where the rounds are off, or nothing in the frame says what was timed."""
    timing = timing_in(frame)
    if timing is None or state.epoch.policy.retime_rounds <= 0 or len(timing[0]) < 2:
        return config, None
    triton_timings, args, kwargs = timing
    live = list(triton_timings)
    known = dict(enumerate(triton_timings.values()))  # the first pass, by index (as_sample reads each)
    choice = TritonChoice(autotuner, state, key, (args, kwargs), live=live)
    tuned = selected(state.epoch, choice, "timed", known=(known, None))
    winner = live[choice.descriptors.index(tuned.winner)]
    dict.__setitem__(cache_of(autotuner), key, winner)
    return winner, tuned.measured


def observe(autotuner, state, timings_before) -> None:
    """Note the winners Triton chose that are not accounted for: the one this launch added (the
    newest entry) and any chosen before this epoch (``timings_before`` is MISSING: no launch)."""
    cache = cache_of(autotuner)
    heard = getattr(registry().heard, "value", None)
    registry().heard.value = None
    newest = next(reversed(cache), None) if cache and timings_before is not MISSING else MISSING
    for key, config in list(cache.items()):
        if key in state.seen:
            continue
        if key == newest:
            how, timings = how_chosen(autotuner, key, heard, timings_before)
            done = note_winner(autotuner, state, key, config, how, timings)
        else:  # chosen before this epoch: logged as timed, recorded as reused
            done = note_winner(autotuner, state, key, config, "timed", recorded_as="reused")
        if not done:
            return
        state.seen.add(key)
