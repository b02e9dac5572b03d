"""Eager consensus: the first thread of any rank to claim a (kernel, key) in the job's Store times
the candidates through Triton's own run (that launch is the tuning launch) and publishes the
winner; every other rank, and every other thread, pins it. The protocol is ``deciding.consensus.decide``;
nothing here is a collective, so ranks may meet kernels in any order, or never.

With AUTOTUNE_TABLE_PATH, the claimer pins the key from the table when it holds it (the waiters
follow it through the Store as always, so a table another job grows meanwhile cannot split the
job), and a winner timed here is handed to the table writer (``Guard.tuned_for_job``). A table
entry recorded against another version of the kernel is named, or refused, on every rank as in
pinned mode.

FlagGems' LibTuner (``flaggems``) decides through the same three public steps: ``table_index``,
``tuned_for_job`` and ``settle``."""

from __future__ import annotations

import logging

from ...core import consensus, tables
from ...deciding import consensus as engine
from ...core.model import Choice, ChoiceKey, descriptor, key_text, record_entry, signature, tuned_winner
from ...runtime import current
from . import observe, provenance
from .calls import candidates, swap_run
from .tuner import REGISTRY

logger = logging.getLogger("autotune_guard")


class _Launched:
    """The decision was made by tuning, and that tuning launch already ran the kernel."""

    __slots__ = ("result",)

    def __init__(self, result):
        self.result = result


def first_launch(autotuner, state, key, args, kwargs):
    """A key's first launch in consensus mode: decide it (once per key per process), then run it."""
    REGISTRY.heard.value = None
    with REGISTRY.gate(autotuner, key):
        config = state.selected.get(key)
        if config is None:
            config = _decide(autotuner, state, key, args, kwargs)
    if isinstance(config, _Launched):
        result = config.result
    else:
        with state.lock:
            result = swap_run(autotuner, config, args, kwargs)
    heard = getattr(REGISTRY.heard, "value", None)
    if (heard is None or heard[0] != key) and state.selected.get(key) is not None:
        observe.tell_listener(autotuner, key, state.selected[key])  # Triton told listeners only if it timed
    return result


def _decide(autotuner, state, key, args, kwargs):
    """The config to pin for ``key``, or _Launched when this thread tuned it."""
    guard = current()
    choice_key = ChoiceKey(guard.facts.get("arch"), state.qualified, key_text(key))
    store = guard.job_store(choice_key)
    if store is None:
        return _alone(autotuner, state, key, choice_key, args, kwargs)
    with state.lock:  # pruning sets autotuner.nargs for the call, like Triton's own run does
        live = candidates(autotuner, args, kwargs)
    signatures = [signature(descriptor(c)) for c in live]
    from_table = table_index(autotuner, state, choice_key, live)  # on every rank: a stale entry is refused on each

    def tune():  # on the claimer only, when its table lacks the key (a table's entry goes with the claim)
        return _tune(autotuner, state, key, args, kwargs, live)

    name = consensus.decision_name(choice_key.arch, choice_key.kernel, choice_key.key)
    index, tuned_here, tuned = engine.decide(
        store, choice_key.what(), name, guard.facts.ask("rank_now", (0, 1))[0], signatures, tune,
        state.epoch.policy.consensus_timeout, dead_after=state.epoch.policy.consensus_dead_after,
        from_table=None if from_table is None else signatures[from_table])
    if tuned_here and tuned[1] is not None:
        winner_signature, (result, winner, timings) = tuned
        if index is not None:  # the live object, so that its hooks survive (not a disk-cache copy)
            winner = live[index]
        if len(live) > 1:
            tuned_for_job(autotuner, state, choice_key, winner)
        settle(autotuner, state, key, choice_key, winner, winner_signature, timings, "consensus")
        return _Launched(result)
    # "table": the job followed the entry this rank's table holds too (the claimer pinned it untimed)
    settle(autotuner, state, key, choice_key, live[index], signatures[index], None,
           "table" if index == from_table else "consensus")
    return live[index]


def table_index(autotuner, state, choice_key, live) -> int | None:
    """The live candidate AUTOTUNE_TABLE_PATH's tables hold for this key, matched as pinned mode
    matches it; None without one (an entry that matches no candidate is said once, then tuned).
    An entry recorded against another version of the kernel is named once per kernel, as in
    pinned mode, and refused with AUTOTUNE_ON_MISS=error (``provenance.check_pinned``)."""
    epoch = state.epoch
    if not epoch.policy.table_path:
        return None
    guard = current()
    entry = guard.table_entry(epoch, choice_key.arch, choice_key.kernel, choice_key.key)
    if entry is not None:
        provenance.check_pinned(autotuner, state, choice_key)
    index = tables.table_index(entry, [descriptor(c) for c in live], guard.facts.get("config_defaults") or {})
    if entry is not None and index is None:
        guard.warn_once(f"consensus table miss {choice_key.text()}", f"the table entry for {choice_key.what()} "
                        "matches no live candidate; it is tuned instead")
    return index


def tuned_for_job(autotuner, state, choice_key, winner) -> None:
    """A winner timed here for the job: the table directory in AUTOTUNE_TABLE_PATH grows by it
    (with the kernel's provenance)."""
    if state.epoch.policy.table_path:
        current().tuned_for_job(state.epoch, choice_key, tuned_winner(descriptor(winner), provenance.of(autotuner)))


def _tune(autotuner, state, key, args, kwargs, live):
    """``tune()`` for ``decide``: Triton times the candidates; returns the winner's signature and
    (launch result, winner, Triton's timings)."""
    if len(live) == 1:  # pruning left one: nothing to time (Triton < 3.8 would time it)
        with state.lock:
            result, winner, timings = swap_run(autotuner, live[0], args, kwargs), live[0], None
    else:
        result, winner, timings = _triton_tunes(autotuner, state, key, args, kwargs)
    return signature(descriptor(winner)), (result, winner, timings)


def _alone(autotuner, state, key, choice_key, args, kwargs):
    """No process group at the moment of choice: the table's entry, else Triton tunes for this
    process alone, as in auto (and a job of one process adds its winner to the table)."""
    if state.epoch.policy.table_path:
        with state.lock:
            live = candidates(autotuner, args, kwargs)
        index = table_index(autotuner, state, choice_key, live)
        if index is not None:
            settle(autotuner, state, key, choice_key, live[index], signature(descriptor(live[index])), None, "pinned")
            return live[index]
    world = current().facts.ask("rank_now", (0, 1))[1]
    if world > 1:  # a distributed job that has not initialized its group yet: choices may differ
        message = ("AUTOTUNE_MODE=consensus but torch.distributed is not initialized yet (world size %d from the "
                   "environment): choices made before init_process_group are this rank's own, timed as in auto "
                   "mode" % world)
        current().warn_once("consensus: no process group", message)
    else:
        current().warn_once("consensus: no process group", "AUTOTUNE_MODE=consensus without a torch.distributed "
                            "process group: choices are timed by this process alone, as in auto mode", logging.INFO)
    result, winner, timings = _triton_tunes(autotuner, state, key, args, kwargs)
    if world == 1 and len(autotuner.configs) > 1:
        tuned_for_job(autotuner, state, choice_key, winner)
    settle(autotuner, state, key, choice_key, winner, signature(descriptor(winner)), timings, "timed")
    return _Launched(result)


def _triton_tunes(autotuner, state, key, args, kwargs):
    """Triton's own tuning launch of a new key: (its result, the winner, Triton's timings by
    signature when it timed here). Under the lock: pinned launches of other keys swap ``configs``."""
    with state.lock:
        timings_before = autotuner.__dict__.get("configs_timings")
        result = REGISTRY.original_run(autotuner, *args, **kwargs)
        winner = autotuner.cache.get(key, autotuner.__dict__.get("best_config"))
        timings = autotuner.__dict__.get("configs_timings")
    return result, winner, observe.measured(autotuner, timings, timings_before)


def settle(autotuner, state, key, choice_key, config, winner_signature, timings, how) -> None:
    """The decision on this rank: pinned for later launches, in the choice log, and in the record
    file when AUTOTUNE_RECORD_PATH is set."""
    state.selected[key] = config
    record = None
    if state.epoch.policy.record_path:
        record = record_entry(descriptor(config), winner_signature, how, timings,
                              [descriptor(c) for c in autotuner.configs], provenance.of(autotuner))
    current().note(state.epoch, choice_key, Choice(winner_signature, how), record)
    logger.debug("consensus %s -> %s (%s)", choice_key.what(), winner_signature, how)
