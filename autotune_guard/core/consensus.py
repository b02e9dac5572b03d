"""Consensus: one rank tunes a (kernel, key) for the whole job and the others follow, through the
job's c10d Store.  :func:`decide` is the whole protocol; it knows nothing of Triton's ``Autotuner``
(the Triton and Inductor adapters call it, and any other tuner can: it takes the
candidates' signatures and a ``tune()`` callable).

Nothing here imports torch or Triton: the Store is any object with the c10d ``Store`` methods
(``compare_set``, ``add``, ``set``, ``get``, ``check``, ``wait``, ``clone``), and the tests drive
the rules directly.

A decision is one (arch, kernel, tuning key).  Its Store name deliberately leaves the candidate
list out: ranks whose candidate lists differ for the same key must meet under the same name, so
that the waiter sees the claimer's list hash in the published value and refuses, instead of both
tuning under different names and silently running different configs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import threading
import time
from datetime import timedelta
from typing import Callable, Sequence

from . import consensus_batch as batch
from .consensus_liveness import Beats, Watch, alive_here, claimer_identity, clone_of
from .consensus_text import _few, claimer_rank, death_message, describe_claimer, store_lost_message, timeout_message
from .errors import ConsensusError, StoreError
from .settings import DEFAULT_CONSENSUS_DEAD_AFTER_S

logger = logging.getLogger("autotune_guard")

PAYLOAD_FORMAT = "autotune_guard.consensus/2"
NAMESPACE = "consensus/"
STORE_PREFIX = "autotune_guard/"
FOREVER = timedelta(days=3650)  # a wait with no limit: the watch thread ends it if the claimer dies
SPREAD_FROM = 32  # waiters of one decision beyond this many wake spread out, not in one instant
SPREAD_S = 25e-6  # the n-th waiter reads the winner within n x this after it was published


def decision_name(arch: str, qualified: str, key_text: str) -> str:
    """The Store name of one decision.  Hashed: tuning keys can be long and contain anything."""
    digest = hashlib.sha256(f"{arch}|{qualified}|{key_text}".encode()).hexdigest()[:32]
    return NAMESPACE + digest


def candidates_hash(signatures: Sequence[str]) -> str:
    """Identity of a candidate list after pruning.  Order-insensitive: which configs are on offer
    is what matters to a waiter that pins the winner by signature; duplicates count once."""
    text = "\n".join(sorted(set(signatures)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode_winner(rank: int, signature: str, signatures: Sequence[str]) -> str:
    """What a claimer publishes after tuning: the winner and the hash of its candidate list; the
    list itself goes under a key of its own, read only by a rank whose hash differs."""
    return json.dumps({"format": PAYLOAD_FORMAT, "rank": rank, "winner": signature,
                       "candidates_hash": candidates_hash(signatures)}, sort_keys=True)


def encode_failure(rank: int, error: str, relayed: bool = False) -> str:
    """What a claimer publishes when its tuning raised: waiters fail now, not at the timeout.
    ``relayed``: the error is the job's decision's, which this rank asked for its node."""
    payload = {"format": PAYLOAD_FORMAT, "rank": rank, "error": error}
    if relayed:
        payload["relayed_by"] = rank
    return json.dumps(payload, sort_keys=True)


def encode_death(claimer: str, silent_s: float, seen: str = "heartbeat") -> str:
    """What a waiter publishes when the claimer died: every waiter fails now.  ``seen``:
    ``process`` (its process is gone, seen on its machine) or ``heartbeat`` (silent ``silent_s``)."""
    return json.dumps({"format": PAYLOAD_FORMAT, "rank": claimer_rank(claimer), "claimer": claimer,
                       "died": round(silent_s, 1), "seen": seen}, sort_keys=True)


# The fields of a published value a reader uses, and the types each may have.
_FIELDS = {"rank": (int, str), "winner": (str,), "candidates_hash": (str,), "error": (str,), "claimer": (str,),
           "died": (int, float), "relayed_by": (int,), "seen": (str,)}


def decode(text: str, what: str, key: str = "") -> dict:
    """A published value (``key``: its Store key, for errors); ConsensusError when it is not one
    this version understands, naming the key and what was found."""
    where = f"the job's Store holds at {key or 'its key'}"
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or payload.get("format") != PAYLOAD_FORMAT:
        raise ConsensusError(f"autotune_guard consensus: {what}: {where} a value this version cannot read "
                             f"({text[:120]!r}); are all ranks running the same autotune_guard?")
    for field, types in _FIELDS.items():
        value = payload.get(field)
        if field in payload and (not isinstance(value, types) or isinstance(value, bool) or
                                 (isinstance(value, float) and not math.isfinite(value))):
            raise ConsensusError(f"autotune_guard consensus: {what}: {where} a value whose {field!r} is "
                                 f"{_found(value)}, not {' or '.join(t.__name__ for t in types)}; are all ranks "
                                 "running the same autotune_guard, and is anything else writing to the Store?")
    if not any(field in payload for field in ("winner", "error", "died")):
        raise ConsensusError(f"autotune_guard consensus: {what}: {where} a value with no winner, error or death "
                             f"notice ({text[:120]!r}); are all ranks running the same autotune_guard?")
    return payload


def decode_candidates(text: str, what: str, key: str) -> list[str]:
    """The claimer's published candidate list; ConsensusError naming the key when it is not one."""
    try:
        found = json.loads(text)
    except ValueError:
        found = text[:120]
    if not isinstance(found, list) or not all(isinstance(item, str) for item in found):
        raise ConsensusError(f"autotune_guard consensus: {what}: the job's Store holds at {key} {_found(found)}, not "
                             "a list of config signatures; are all ranks running the same autotune_guard?")
    return found


def _found(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def follow(payload: dict, signatures: Sequence[str], what: str, theirs: Sequence[str] | None = None) -> int:
    """Index (into ``signatures``, this rank's live candidates after pruning) of the published
    winner; raises ConsensusError when the claimer failed or died, or the candidate lists differ
    (``theirs``: the claimer's list, when it could be read, to name the differences)."""
    claimer = payload.get("rank", "?")
    if "died" in payload:
        raise ConsensusError(death_message(what, payload))
    if "error" in payload and "relayed_by" in payload:
        raise ConsensusError(f"{payload['error']} (as rank {claimer} learned it from the job for this node)")
    if "error" in payload:
        raise ConsensusError(f"autotune_guard consensus: {what}: rank {claimer}, which claimed this tuning, failed "
                             f"while timing ({payload['error']}); this rank will not pick a config of its own")
    mine = candidates_hash(signatures)
    if payload.get("candidates_hash") != mine:
        theirs = set(theirs or ())
        ours = set(signatures)
        raise ConsensusError(
            f"autotune_guard consensus: {what}: this rank's candidates after pruning differ from those rank "
            f"{claimer} tuned (hash {mine} vs {payload.get('candidates_hash')}); only here: "
            f"{_few(ours - theirs)}; only on rank {claimer}: {_few(theirs - ours)}. The kernel's pruning "
            "(early_config_prune, perf_model/top_k) or its configs must not depend on the rank")
    winner = payload.get("winner")
    if winner not in signatures:  # equal hashes make this unreachable short of a hash collision
        raise ConsensusError(f"autotune_guard consensus: {what}: rank {claimer}'s winner {winner} is not a "
                             "candidate on this rank")
    return list(signatures).index(winner)


# --- the protocol over the job's Store ----------------------------------------------------------
# Per decision, under STORE_PREFIX + the attempt + the decision name:
#   claim       compare_set from "" to the claimer's identity: claiming and naming are one request
#   beat        the claimer's heartbeat counter, bumped every BEAT_S while it tunes (consensus_liveness)
#   waiters     add(1) by each waiter, which then blocks in wait() while a thread of its process
#               looks at the claimer every BEAT_S (consensus_liveness.Watch)
#   candidates  the claimer's candidate list (read only on a hash mismatch)
#   result      the winner (or the claimer's error, or a waiter's death notice), set once
# and, per attempt, ``announced``: the names of decided keys, appended by claimers (consensus_batch).
# A waiter makes 4 requests per decision whatever the tuning time (claim, waiters, wait, get), its
# watch thread one beat read per BEAT_S where the claimer is on another machine (none on this one),
# none for a key it learned in a batch, and now and then 3 for reading ``announced``.
# Where the job's Store comes with a node's
# (``store.node_store``: torchrun's local ranks, ``adapters.distributed.node``), the same protocol
# runs twice: on the node's Store among its ranks, and on the job's by the node's first rank only.


def attempt_scope() -> str:
    """This run and restart in Store names: torchrun's agent keeps its Store across restarts, so
    the names of one attempt must never meet those of the next (a dead claimer's claim included)."""
    return f"{os.environ.get('TORCHELASTIC_RUN_ID', 'none')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def decide(store, what: str, name: str, rank: int, signatures: Sequence[str], tune: Callable,
           timeout: float | None = None, *, learn: bool = True, dead_after: float = DEFAULT_CONSENSUS_DEAD_AFTER_S,
           from_table: str | None = None):
    """One consensus decision: ``(index, tuned_here, tune_result)``.

    ``store``: the job's c10d Store.  ``what``: how errors name the decision (kernel, key, arch).
    ``name``: the decision's name, the same on every rank (:func:`decision_name`).  ``rank``: this
    process's rank, for errors.  ``signatures``: this rank's candidates after pruning, as
    ``selection.signature`` text, in any order.  ``tune()``: times the candidates here and returns
    the winner's signature, or ``(signature, anything)``; it runs on exactly one thread of one rank
    per decision and attempt; what it raises is published to the waiters and re-raised here.
    ``timeout``: seconds a waiter waits for a live claimer's winner; None: as long as it lives.
    ``dead_after``: seconds of heartbeat silence after which a claimer on another machine is dead.

    Returns the winner's index in ``signatures`` (None only when ``tune()``'s winner is not one of
    them, which is logged), whether ``tune()`` ran here, and what it returned (None when not).
    Raises :class:`ConsensusError`, never returning a config of this rank's own, when the claimer's
    tuning failed, when the claimer died (``core.consensus_liveness``: named within ``BEAT_S`` on its
    machine, ``dead_after`` + ``BEAT_S`` elsewhere),
    when a live claimer publishes nothing within ``timeout``, when the candidate lists differ, or
    when the Store fails.  Nothing here is a collective: ranks may decide in any order, or never.
    ``learn``: winners published ahead of this rank are learned in batches (``core.consensus_batch``).
    ``from_table``: the winner this rank's table holds for the key.  It goes with the claim, in the
    claim's one request, and decides for the job untimed; a rank that finds such a claim follows
    it at once (a key the table holds costs one request, as near pinned's none as the job's
    agreement allows).  A rank whose table lacks the key still waits for one that tunes it.
    """
    node = getattr(store, "node_store", None)
    if node is not None and from_table is None:
        return _for_the_node(store, node, what, name, rank, signatures, tune, timeout, dead_after)
    if node is not None:  # a table's claim waits for nobody: straight to the job's Store (the node's polls)
        store = store.job
    prefix = f"{STORE_PREFIX}{attempt_scope()}"
    key = f"{prefix}/{name}"
    known = batch.learned.winner(store, prefix, name) if learn else None
    if known is not None:  # learned in a batch: no request (a differing candidate list asks, to name it)
        payload = decode(known, what, key + "/result")
        if payload.get("candidates_hash") == candidates_hash(signatures):
            return follow(payload, signatures, what), False, None
    me = claimer_identity(rank)
    if from_table is not None:  # the claim carries the winner: "identity\npayload"
        me += "\n" + encode_winner(rank, from_table, signatures)
    try:
        holder = _text(store.compare_set(key + "/claim", "", me))
    except Exception as exc:
        raise ConsensusError(store_lost_message(what, exc)) from exc
    if holder == me and from_table is not None:
        return list(signatures).index(from_table), False, None
    if holder == me:
        return _tune_for_the_job(store, what, key, rank, signatures, tune, (prefix, name) if learn else None)
    holder, _, carried = holder.partition("\n")
    if carried:  # the claimer's table decided it with the claim
        return follow(decode(carried, what, key + "/claim"), signatures, what), False, None
    try:
        asked = time.monotonic()
        published = _wait_for_result(store, what, key, holder, timeout, dead_after)
        ahead = time.monotonic() - asked < batch.AHEAD_S  # published before this rank asked
        payload = decode(published, what, key + "/result")
        theirs = None
        if "winner" in payload and payload.get("candidates_hash") != candidates_hash(signatures):
            theirs = decode_candidates(_text(store.get(key + "/candidates")), what, key + "/candidates")
        elif learn and "winner" in payload:
            batch.learned.learn_after(store, prefix, name, published, ahead)
    except StoreError as exc:
        raise ConsensusError(store_lost_message(what, exc)) from exc
    except Exception as exc:
        if isinstance(exc, ConsensusError):
            raise
        raise ConsensusError(store_lost_message(what, exc)) from exc
    return follow(payload, signatures, what, theirs), False, None


def _for_the_node(store, node, what, name, rank, signatures, tune, timeout, dead_after):
    """Node-level fan-in: the node's first rank to reach the decision takes it to the job's Store
    (``store.job``) as one waiter or the claimer; the node's others follow it through the node's
    Store (``node``), where its heartbeat is watched as a claimer's is. They wait as long as it
    does: it began waiting first, so its error, named, reaches them before their own timeout.
    A rank whose table holds the key skips this level: its claim, on the job's Store, waits for
    nobody, where the node's FileStore would poll (10 ms a wait)."""

    def for_the_node():
        index, tuned_here, returned = decide(store.job, what, name, rank, signatures, tune, timeout, dead_after=dead_after)
        winner = signatures[index] if index is not None else (returned if isinstance(returned, str) else returned[0])
        return winner, (index, tuned_here, returned)

    index, here, returned = decide(node, what, name, rank, signatures, for_the_node, timeout, learn=False,
                                   dead_after=dead_after)
    return returned[1] if here else (index, False, None)


def _tune_for_the_job(store, what, key, rank, signatures, tune, announced):
    try:
        _beats.start(store, key + "/beat")
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
        try:
            store.set(key + "/candidates", json.dumps(sorted(set(signatures))))
            store.set(key + "/result", encode_winner(rank, signature, signatures))
            if announced:
                batch.announce(store, *announced)
        except Exception as exc:
            raise ConsensusError(f"autotune_guard consensus: {what}: tuned here but could not publish the winner: "
                                 f"{exc}") from exc
    finally:
        _beats.stop(store, key + "/beat")
    if signature not in signatures:
        logger.warning("consensus: %s: the tuner's winner %s is not among the candidates after pruning", what, signature)
        return None, True, returned
    return list(signatures).index(signature), True, returned


def _wait_for_result(store, what, key, holder, timeout, dead_after):
    """The published value.  The waiter blocks in ``wait`` on a clone of the Store (a TCPStore
    client serves one request at a time: a blocking wait on the shared one would hold up the
    process group's own requests) while this process's watch thread looks at the claimer every
    ``BEAT_S`` and, should it die, publishes a death notice, which wakes every waiter."""
    result = key + "/result"
    try:
        arrived = int(store.add(key + "/waiters", 1))
        with _watch.watching(store, key, holder, dead_after, encode_death):
            try:
                _clone(store).wait([result], FOREVER if timeout is None else timedelta(seconds=timeout))
            except Exception as exc:
                if "timeout" in str(exc).lower() and type(exc).__name__ != "DistNetworkError":
                    raise ConsensusError(timeout_message(what, holder, timeout, alive_here(holder))) from exc
                raise StoreError(f"waiting for {result}: {exc}") from exc
        if arrived > SPREAD_FROM:  # thousands of waiters must not read it in one instant
            time.sleep(random.uniform(0, arrived * SPREAD_S))
        return _text(store.get(result))
    except (ConsensusError, StoreError):
        raise
    except Exception as exc:
        raise StoreError(f"waiting for {result}: {exc}") from exc


_beats = Beats()
_watch = Watch()
_clones = threading.local()


def _clone(store):
    cache = _clones.__dict__.setdefault("by_store", {})
    entry = cache.get(id(store))
    if entry is None or entry[0] is not store:
        entry = cache[id(store)] = (store, clone_of(store))
    return entry[1]


def _text(value) -> str:
    # Undecodable bytes are shown, not raised: the reader names the value as one it cannot read.
    return value.decode(errors="backslashreplace") if isinstance(value, (bytes, bytearray)) else str(value)
