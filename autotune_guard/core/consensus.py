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
import socket
import threading
import time
import uuid
from typing import Callable, Sequence

from . import consensus_batch as batch
from .consensus_text import _few, claimer_rank, describe_claimer, store_lost_message, timeout_message
from .errors import ConsensusError, StoreError

logger = logging.getLogger("autotune_guard")

PAYLOAD_FORMAT = "autotune_guard.consensus/2"
NAMESPACE = "consensus/"
STORE_PREFIX = "autotune_guard/"
BEAT_S = 0.5  # a claimer bumps its beat counter this often while it tunes
DEAD_AFTER_S = 5.0  # no beat for this long: the claimer died (or lost the Store) before publishing
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


def encode_death(claimer: str, silent_s: float) -> str:
    """What the watching waiter publishes when the claimer stopped beating: every waiter fails now."""
    return json.dumps({"format": PAYLOAD_FORMAT, "rank": claimer_rank(claimer), "claimer": claimer,
                       "died": round(silent_s, 1)}, sort_keys=True)


# The fields of a published value a reader uses, and the types each may have.
_FIELDS = {"rank": (int, str), "winner": (str,), "candidates_hash": (str,), "error": (str,), "claimer": (str,),
           "died": (int, float), "relayed_by": (int,)}


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
        raise ConsensusError(f"autotune_guard consensus: {what}: {describe_claimer(payload.get('claimer', ''))}, which "
                             f"claimed this tuning, stopped signalling that it is alive ({payload['died']:g} s without "
                             "a heartbeat) before publishing a winner: it died or lost the Store. This rank will not "
                             "pick a config of its own")
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
#   beat        the claimer's heartbeat counter, bumped every BEAT_S while it tunes
#   waiters     add(1) by each waiter; the first one watches the beat, the others block in wait()
#   candidates  the claimer's candidate list (read only on a hash mismatch)
#   result      the winner (or the claimer's error, or the watcher's death notice), set once
# and, per attempt, ``announced``: the names of decided keys, appended by claimers (consensus_batch).
# A waiter makes 4 requests per decision whatever the tuning time (claim, waiters, wait, get), none
# for a key it learned in a batch, and now and then 3 for reading ``announced``;
# only the watching waiter polls, once per BEAT_S.  Where the job's Store comes with a node's
# (``store.node_store``: torchrun's local ranks, ``adapters.distributed.node``), the same protocol
# runs twice: on the node's Store among its ranks, and on the job's by the node's first rank only.


def attempt_scope() -> str:
    """This run and restart in Store names: torchrun's agent keeps its Store across restarts, so
    the names of one attempt must never meet those of the next (a dead claimer's claim included)."""
    return f"{os.environ.get('TORCHELASTIC_RUN_ID', 'none')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def claimer_identity(rank: int) -> str:
    """Unique per claim (two threads of one rank are two claimers), readable in errors."""
    return f"{rank}|{os.getpid()}|{socket.gethostname()}|{uuid.uuid4().hex[:8]}"


def decide(store, what: str, name: str, rank: int, signatures: Sequence[str], tune: Callable, timeout: float,
           *, learn: bool = True):
    """One consensus decision: ``(index, tuned_here, tune_result)``.

    ``store``: the job's c10d Store.  ``what``: how errors name the decision (kernel, key, arch).
    ``name``: the decision's name, the same on every rank (:func:`decision_name`).  ``rank``: this
    process's rank, for errors.  ``signatures``: this rank's candidates after pruning, as
    ``selection.signature`` text, in any order.  ``tune()``: times the candidates here and returns
    the winner's signature, or ``(signature, anything)``; it runs on exactly one thread of one rank
    per decision and attempt; what it raises is published to the waiters and re-raised here.
    ``timeout``: seconds a waiter waits for a live claimer's winner.

    Returns the winner's index in ``signatures`` (None only when ``tune()``'s winner is not one of
    them, which is logged), whether ``tune()`` ran here, and what it returned (None when not).
    Raises :class:`ConsensusError`, never returning a config of this rank's own, when the claimer's
    tuning failed, when the claimer died or lost the Store (within ``DEAD_AFTER_S`` seconds, named),
    when a live claimer publishes nothing within ``timeout``, when the candidate lists differ, or
    when the Store fails.  Nothing here is a collective: ranks may decide in any order, or never.
    ``learn``: winners published ahead of this rank are learned in batches (``core.consensus_batch``).
    """
    node = getattr(store, "node_store", None)
    if node is not None:
        return _for_the_node(store, node, what, name, rank, signatures, tune, timeout)
    prefix = f"{STORE_PREFIX}{attempt_scope()}"
    key = f"{prefix}/{name}"
    known = batch.learned.winner(store, prefix, name) if learn else None
    if known is not None:  # learned in a batch: no request (a differing candidate list asks, to name it)
        payload = decode(known, what, key + "/result")
        if payload.get("candidates_hash") == candidates_hash(signatures):
            return follow(payload, signatures, what), False, None
    me = claimer_identity(rank)
    try:
        holder = _text(store.compare_set(key + "/claim", "", me))
    except Exception as exc:
        raise ConsensusError(store_lost_message(what, exc)) from exc
    if holder == me:
        return _tune_for_the_job(store, what, key, rank, signatures, tune, (prefix, name) if learn else None)
    try:
        asked = time.monotonic()
        published = _wait_for_result(store, what, key, holder, timeout)
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


def _for_the_node(store, node, what, name, rank, signatures, tune, timeout):
    """Node-level fan-in: the node's first rank to reach the decision takes it to the job's Store
    (``store.job``) as one waiter or the claimer; the node's others follow it through the node's
    Store (``node``), where its heartbeat is watched as a claimer's is. They wait as long as it
    does: it began waiting first, so its error, named, reaches them before their own timeout."""

    def for_the_node():
        index, tuned_here, returned = decide(store.job, what, name, rank, signatures, tune, timeout)
        winner = signatures[index] if index is not None else (returned if isinstance(returned, str) else returned[0])
        return winner, (index, tuned_here, returned)

    index, here, returned = decide(node, what, name, rank, signatures, for_the_node, timeout, learn=False)
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
        _beats.stop(key + "/beat")
    if signature not in signatures:
        logger.warning("consensus: %s: the tuner's winner %s is not among the candidates after pruning", what, signature)
        return None, True, returned
    return list(signatures).index(signature), True, returned


def _wait_for_result(store, what, key, holder, timeout):
    """The published value.  The first waiter watches the claimer's heartbeat and, when it stops,
    publishes a death notice that wakes every waiter; the others block in ``wait`` on a clone of
    the Store (a TCPStore client serves one request at a time: a blocking wait on the shared one
    would hold up the process group's own requests)."""
    from datetime import timedelta

    result = key + "/result"
    try:
        arrived = int(store.add(key + "/waiters", 1))
        if arrived == 1:
            return _watch(store, what, key, holder, timeout)
        waiting = _clone(store)
        try:
            waiting.wait([result], timedelta(seconds=timeout))
        except Exception as exc:
            _forget_clone(store)
            if "timeout" in str(exc).lower() and type(exc).__name__ != "DistNetworkError":
                raise ConsensusError(timeout_message(what, holder, timeout)) from exc
            raise StoreError(f"waiting for {result}: {exc}") from exc
        if arrived > SPREAD_FROM:  # thousands of waiters must not read it in one instant
            time.sleep(random.uniform(0, arrived * SPREAD_S))
        return _text(store.get(result))
    except (ConsensusError, StoreError):
        raise
    except Exception as exc:
        raise StoreError(f"waiting for {result}: {exc}") from exc


def _watch(store, what, key, holder, timeout):
    result, beat = key + "/result", key + "/beat"
    start = time.monotonic()
    last_beat, last_change = None, start
    while True:
        if store.check([result]):
            return _text(store.get(result))
        now = time.monotonic()
        count = int(store.add(beat, 0))
        if count != last_beat:
            last_beat, last_change = count, now
        elif now - last_change > DEAD_AFTER_S:
            # compare_set: a winner published at this very moment is not overwritten
            return _text(store.compare_set(result, "", encode_death(holder, now - last_change)))
        if now - start > timeout:
            raise ConsensusError(timeout_message(what, holder, timeout))
        time.sleep(BEAT_S)


class _Beats:
    """One daemon thread per process bumps the beat counter of every decision this process is
    tuning, on a clone of the Store (the tuning thread may hold the shared client)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._keys: dict = {}  # beat key -> store
        self._wake = threading.Event()
        self._thread = None

    def start(self, store, key: str) -> None:
        store.add(key, 1)  # a first beat before tuning starts
        with self._lock:
            self._keys[key] = store
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="autotune_guard-consensus-beat", daemon=True)
                self._thread.start()

    def stop(self, key: str) -> None:
        with self._lock:
            self._keys.pop(key, None)

    def _run(self):
        clones: dict = {}
        while True:
            time.sleep(BEAT_S)
            with self._lock:
                keys = list(self._keys.items())
            for key, store in keys:
                try:
                    beating = clones.get(id(store))
                    if beating is None:
                        beating = clones[id(store)] = _clone_of(store)
                    beating.add(key, 1)
                except Exception as exc:  # the Store is gone: the waiters will see the beat stop
                    logger.debug("consensus: heartbeat %s failed: %s", key, exc)


_beats = _Beats()
_clones = threading.local()


def _clone_of(store):
    clone = getattr(store, "clone", None)
    return clone() if clone is not None else store


def _clone(store):
    cache = _clones.__dict__.setdefault("by_store", {})
    clone = cache.get(id(store))
    if clone is None:
        clone = cache[id(store)] = _clone_of(store)
    return clone


def _forget_clone(store) -> None:
    _clones.__dict__.get("by_store", {}).pop(id(store), None)


def _text(value) -> str:
    # Undecodable bytes are shown, not raised: the reader names the value as one it cannot read.
    return value.decode(errors="backslashreplace") if isinstance(value, (bytes, bytearray)) else str(value)
