"""The consensus engine: :func:`decide` carries out ``core.consensus``'s rules over the job's c10d
Store. One rank tunes a (kernel, key) for the whole job and the others follow; it knows nothing of
any tuner (the decision engine calls it, and any other tuner can: it takes the candidates'
signatures and a ``tune()`` callable).

Nothing here imports torch: the Store is any object with the c10d ``Store`` methods
(``compare_set``, ``add``, ``set``, ``get``, ``check``, ``wait``, ``clone``). What the engine keeps
for the process (the claimer's heartbeats, the waiters' watch, each thread's Store clones, the
winners learned in batches) is one :class:`ConsensusState` held by the Guard, renewed in a forked
child by the Guard's one fork hook.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from datetime import timedelta
from typing import Callable, Sequence

from ..core.consensus import (SETTINGS, attempt_prefix, candidates_hash, claim_value, decision_key, decode,
                              decode_candidates, encode_death, encode_failure, encode_settings, encode_winner, follow,
                              parse_claim, settings_mismatch, spread_bound, text)
from ..core.consensus_text import store_lost_message, timeout_message
from ..core.errors import ConsensusError, StoreError
from ..core.settings import DEFAULT_CONSENSUS_DEAD_AFTER_S
from ..runtime import current
from . import batch
from .liveness import Beats, Watch, alive_here, claimer_identity
from .stores import Clones

logger = logging.getLogger("autotune_guard")

FOREVER = timedelta(days=3650)  # a wait with no limit: the watch thread ends it if the claimer dies
HELD_AS = "deciding.consensus"  # the state's name among the Guard's held objects


class ConsensusState:
    """The process's consensus state: the claimer's heartbeats, the waiters' watch, each thread's
    clone of each Store it waits on, and the winners learned in batches."""

    def __init__(self):
        self.beats = Beats()
        self.watch = Watch()
        self.clones = Clones()
        self.learned = batch.Learned()
        self.agreed: set[str] = set()  # attempts whose protocol settings this process compared

    def after_fork(self) -> None:
        """In a forked child: none of the parent's threads, claims, waits or connections; what it
        learned stays learned (a winner published in this attempt stays its winner)."""
        self.beats.after_fork()
        self.watch.after_fork()
        self.clones.after_fork()
        self.learned.after_fork()


def state() -> ConsensusState:
    """This process's consensus state (the Guard's)."""
    return current().held(HELD_AS, ConsensusState)


def agree_settings(store, rank: int, split: bool) -> None:
    """This rank's protocol settings against the attempt's (``core.consensus.SETTINGS``): one
    compare_set per process and attempt; ConsensusError naming the setting where they differ."""
    key = f"{attempt_prefix(os.environ)}/{SETTINGS}"
    agreed = state().agreed
    if key in agreed:
        return
    mine = encode_settings(rank, split)
    try:
        node = getattr(store, "node_store", None)
        # With the node's fan-in, the node's first rank agrees with the job and the others with it:
        # the node's other ranks make no request of the job's Store.
        first_here = node is None or text(node.compare_set(key, "", mine)) == mine
        theirs = text((store.job if node is not None else store).compare_set(key, "", mine)) if first_here else \
            text(node.get(key))
    except Exception as exc:  # what the Store's client raised
        raise ConsensusError(store_lost_message("the job's consensus settings", exc)) from exc
    message = settings_mismatch(mine, theirs, key)
    if message:
        raise ConsensusError(message)
    agreed.add(key)


def decide(store, what: str, name: str, rank: int, signatures: Sequence[str], tune: Callable,
           timeout: float | None = None, *, learn: bool = True, dead_after: float = DEFAULT_CONSENSUS_DEAD_AFTER_S,
           from_table: str | None = None, open_search=None):
    """One consensus decision: ``(index, tuned_here, tune_result)``.

    ``store``: the job's c10d Store.  ``what``: how errors name the decision (kernel, key, arch).
    ``name``: the decision's name, the same on every rank (``core.consensus.decision_name``).
    ``rank``: this process's rank, for errors.  ``signatures``: this rank's candidates after
    pruning, as ``selection.signature`` text, in any order.  ``tune()``: times the candidates here
    and returns the winner's signature, or ``(signature, anything)``; it runs on exactly one thread
    of one rank per decision and attempt; what it raises is published to the waiters and re-raised
    here.  ``timeout``: seconds a waiter waits for a live claimer's winner; None: as long as it
    lives.  ``dead_after``: seconds of heartbeat silence after which a claimer on another machine
    is dead.

    Returns the winner's index in ``signatures`` (None only when ``tune()``'s winner is not one of
    them, which is logged), whether ``tune()`` ran here, and what it returned (None when not).
    Raises :class:`ConsensusError`, never returning a config of this rank's own, when the claimer's
    tuning failed, when the claimer died (``deciding.liveness``: named within ``BEAT_S`` on its
    machine, ``dead_after`` + ``BEAT_S`` elsewhere), when a live claimer publishes nothing within
    ``timeout``, when the candidate lists differ, or when the Store fails.  Nothing here is a
    collective: ranks may decide in any order, or never.
    ``learn``: winners published ahead of this rank are learned in batches (``deciding.batch``).
    ``from_table``: the winner this rank's table holds for the key.  It goes with the claim, in the
    claim's one request, and decides for the job untimed; a rank that finds such a claim follows
    it at once (a key the table holds costs one request, as near pinned's none as the job's
    agreement allows).  A rank whose table lacks the key still waits for one that tunes it.
    ``open_search``: where the tuner searches beyond ``signatures`` (Helion's full search), an object
    with ``config_of(signature)`` (the config of a winner found here or adopted, published with it)
    and ``adopt(config, signature)`` (a published winner made a candidate here; its index).
    """
    node = getattr(store, "node_store", None)
    if node is not None and from_table is None:
        return _for_the_node(store, node, what, name, rank, signatures, tune, timeout, dead_after, open_search)
    if node is not None:  # a table's claim waits for nobody: straight to the job's Store (the node's polls)
        store = store.job
    held = state()
    prefix = attempt_prefix(os.environ)
    key = decision_key(prefix, name)
    known = held.learned.winner(store, prefix, name) if learn else None
    if known is not None:  # learned in a batch: no request (a differing candidate list asks, to name it)
        payload = decode(known, what, key + "/result")
        if payload.get("candidates_hash") == candidates_hash(signatures):
            return follow(payload, signatures, what, adopt=_adopter(open_search)), False, None
    me = claim_value(claimer_identity(rank), None if from_table is None else encode_winner(rank, from_table, signatures))
    try:
        holder = text(store.compare_set(key + "/claim", "", me))
    except Exception as exc:
        raise ConsensusError(store_lost_message(what, exc)) from exc
    if holder == me and from_table is not None:
        return list(signatures).index(from_table), False, None
    if holder == me:
        return _tune_for_the_job(held, store, what, key, rank, signatures, tune, (prefix, name) if learn else None,
                                 open_search)
    holder, carried = parse_claim(holder)
    if carried:  # the claimer's table decided it with the claim
        return follow(decode(carried, what, key + "/claim"), signatures, what, adopt=_adopter(open_search)), False, None
    return _follow_the_claimer(held, store, what, (prefix, name, key), holder, signatures, learn, timeout, dead_after,
                               open_search)


def _adopter(open_search):
    return open_search.adopt if open_search is not None else None


def _follow_the_claimer(held, store, what, where, holder, signatures, learn, timeout, dead_after, open_search=None):
    """A waiter: the claimer's published value, followed; learned winners read in a batch when
    it was published before this rank asked."""
    prefix, name, key = where
    try:
        asked = time.monotonic()
        published = _wait_for_result(held, store, what, key, holder, timeout, dead_after)
        ahead = time.monotonic() - asked < batch.AHEAD_S  # published before this rank asked
        payload = decode(published, what, key + "/result")
        theirs = None
        if "winner" in payload and payload.get("candidates_hash") != candidates_hash(signatures):
            theirs = decode_candidates(text(store.get(key + "/candidates")), what, key + "/candidates")
        elif learn and "winner" in payload:
            held.learned.learn_after(store, prefix, name, published, ahead)
    except ConsensusError:
        raise
    except Exception as exc:  # StoreError, or what the Store's client raised
        raise ConsensusError(store_lost_message(what, exc)) from exc
    return follow(payload, signatures, what, theirs, _adopter(open_search)), False, None


def _for_the_node(store, node, what, name, rank, signatures, tune, timeout, dead_after, open_search=None):
    """Node-level fan-in: the node's first rank to reach the decision takes it to the job's Store
    (``store.job``) as one waiter or the claimer; the node's others follow it through the node's
    Store (``node``), where its heartbeat is watched as a claimer's is. They wait as long as it
    does: it began waiting first, so its error, named, reaches them before their own timeout.
    A rank whose table holds the key skips this level: its claim, on the job's Store, waits for
    nobody, where the node's FileStore would poll (10 ms a wait)."""

    def for_the_node():
        index, tuned_here, returned = decide(store.job, what, name, rank, signatures, tune, timeout, dead_after=dead_after,
                                             open_search=open_search)
        if index is not None and index < len(signatures):
            winner = signatures[index]
        elif index is not None:  # adopted from the job's claimer: published to the node with its config
            winner = open_search.signature_at(index)
        else:
            winner = returned if isinstance(returned, str) else returned[0]
        return winner, (index, tuned_here, returned)

    index, here, returned = decide(node, what, name, rank, signatures, for_the_node, timeout, learn=False,
                                   dead_after=dead_after, open_search=open_search)
    return returned[1] if here else (index, False, None)


def _tune_for_the_job(held, store, what, key, rank, signatures, tune, announced, open_search=None):
    try:
        held.beats.start(store, key + "/beat")
    except Exception as exc:
        raise ConsensusError(store_lost_message(what, exc)) from exc
    try:
        try:
            returned = tune()
        except BaseException as exc:
            try:  # the waiters fail now, with the reason, rather than at the timeout
                relayed = isinstance(exc, ConsensusError)
                store.set(key + "/result", encode_failure(rank, str(exc) if relayed else repr(exc)[:500], relayed))
            except Exception as publish_error:
                logger.error("consensus: %s: could not tell the other ranks that tuning failed: %s", what, publish_error)
            raise
        signature = returned if isinstance(returned, str) else returned[0]
        found = open_search.config_of(signature) if open_search is not None and signature not in signatures else None
        try:
            store.set(key + "/candidates", json.dumps(sorted(set(signatures))))
            store.set(key + "/result", encode_winner(rank, signature, signatures, found))
            if announced:
                batch.announce(store, *announced)
        except Exception as exc:
            raise ConsensusError(f"autotune_guard consensus: {what}: tuned here but could not publish the winner: "
                                 f"{exc}") from exc
    finally:
        held.beats.stop(store, key + "/beat")
    if signature not in signatures:
        if found is None:
            logger.warning("consensus: %s: the tuner's winner %s is not among the candidates after pruning", what,
                           signature)
        return None, True, returned
    return list(signatures).index(signature), True, returned


def _wait_for_result(held, store, what, key, holder, timeout, dead_after):
    """The published value.  The waiter blocks in ``wait`` on its thread's clone of the Store (a
    TCPStore client serves one request at a time: a blocking wait on the shared one would hold up
    the process group's own requests) while this process's watch thread looks at the claimer every
    ``BEAT_S`` and, should it die, publishes a death notice, which wakes every waiter."""
    result = key + "/result"
    try:
        arrived = int(store.add(key + "/waiters", 1))
        with held.watch.watching(store, key, holder, dead_after, encode_death):
            try:
                held.clones.of(store).wait([result], FOREVER if timeout is None else timedelta(seconds=timeout))
            except Exception as exc:
                if "timeout" in str(exc).lower() and type(exc).__name__ != "DistNetworkError":
                    raise ConsensusError(timeout_message(what, holder, timeout, alive_here(holder))) from exc
                raise StoreError(f"waiting for {result}: {exc}") from exc
        spread = spread_bound(arrived)
        if spread:  # thousands of waiters must not read it in one instant
            time.sleep(random.uniform(0, spread))
        return text(store.get(result))
    except (ConsensusError, StoreError):
        raise
    except Exception as exc:
        raise StoreError(f"waiting for {result}: {exc}") from exc
