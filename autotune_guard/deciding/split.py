"""Split tuning (``AUTOTUNE_CONSENSUS_SPLIT=1``): a key's candidates divided among the ranks that
reach it, each timing its share on its own device, the winner the best over all shares.

:func:`decide` carries out ``core.consensus``'s split rules over the job's c10d Store (the layout
is written down there, by ``SPLIT``). The first rank to reach a decision opens it; the ranks that
arrive before its join window closes (``JOIN_S``, or sooner when the whole job has arrived) take a
share each; a rank that arrives later takes none and reads the shares. Every share's timings are
published under the decision's keys; once all are in, they are the first pass of one selection:
the finalists are timed again by one rank (``_final``: slot 1, or a live rank in its place), whose
winner every rank reads (``deciding.retime``; timings of different devices are never compared). The holder of a share that dies (its process gone, seen on its machine within a
poll; elsewhere its heartbeat silent ``dead_after`` seconds) has its share taken over by the first
live rank that sees it, which times it and publishes it in its place (first publication wins).

Like ``deciding.consensus``, nothing here imports torch or knows a tuner: ``time_share(indices)``
times candidates of this rank's list and returns ``{index: milliseconds}``.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, Sequence

from ..core.consensus import (SPLIT, attempt_prefix, candidates_hash, decision_key, decode_split, encode_final,
                              encode_roster, encode_share, final_winner, share_timer, share_timings, split_shares,
                              text)
from ..core.consensus_text import store_lost_message
from ..core.selection import Sample, as_sample
from ..core.errors import ConsensusError
from ..runtime import current
from . import consensus
from .liveness import alive_here, claimer_identity

logger = logging.getLogger("autotune_guard")

JOIN_S = 1.0  # the join window: ranks that reach a decision this long after the first take shares
GRACE_S = 2.0  # a rank that is not the first closes the window itself this much later (the first died)
POLL_S = 0.25  # the longest pause between two looks at the shares
STRAGGLER_S = 0.1  # once as many ranks as came last time are in, how long the window waits for more
TABLE_FINAL = "table"  # a final's measured how where a rank's table entry decided, untimed


class _Present:
    """How many ranks this process saw come to its last split window that closed at its end (held
    on the Guard): a rank that never comes (it runs other work) then costs later keys no window."""

    def __init__(self):
        self.ranks: int | None = None

    def after_fork(self) -> None:
        self.ranks = None


def _present(guard) -> _Present:
    return guard.held("deciding.split", _Present)


def decide(store, what: str, name: str, rank: int, world: int, signatures: Sequence[str], time_share: Callable,
           timeout: float | None, dead_after: float, finals: Callable) -> tuple[int, int, dict, dict | None, bool]:
    """One split decision: (the winner's index in ``signatures``, how many candidates were timed
    here, every share's timings by signature: what a record keeps, what the finalists' re-timing
    measured, whether this rank published the winner). ``world``: how many ranks may reach it (the window closes as soon as they all have).
    ``finals(known)``: the finalists of the shares' timings (by index) timed again on this rank,
    ``(winner index, measured)``: run by one rank only (slot 1, or whoever takes over when it dies),
    since timings of different devices are never compared with each other.
    Raises ConsensusError when a share's timing failed, the candidate lists differ, a live holder
    publishes nothing within ``timeout`` (None: as long as it lives), or the Store fails."""
    key = decision_key(attempt_prefix(os.environ), name) + SPLIT
    me = claimer_identity(rank)
    try:
        if store.check([key + "/final"]):  # decided before this rank came (a rank's table held it): nothing to time
            return list(signatures).index(_published(store, key, signatures, what)), 0, {}, None, False
        slot = int(store.add(key + "/arrivals", 1))
        store.set(f"{key}/member/{slot}", me)
        roster = _roster(store, key, slot, world, signatures, what)
        shares = split_shares(name, roster.get("candidates") or [], int(roster.get("members", 0)))
        if roster.get("candidates_hash") != candidates_hash(signatures):
            message = (f"autotune_guard consensus: {what}: rank {rank}'s candidates after pruning differ from those "
                       f"the job split (hash {candidates_hash(signatures)} vs {roster.get('candidates_hash')}). The "
                       "kernel's pruning (early_config_prune, perf_model/top_k) must not depend on the rank")
            if slot in shares:  # the others must not wait for a share this rank will not time
                store.compare_set(f"{key}/share/{slot}", "", encode_share(slot, rank, None, message))
            raise ConsensusError(message)
        timed = 0
        if slot in shares:
            timed += _time_and_publish(store, key, slot, rank, shares[slot], signatures, time_share)
        timings, more, timers = _collect(store, key, shares, (rank, me), signatures, time_share,
                                         (what, timeout, dead_after))
        known = {signatures.index(sig): Sample(t, None, timers[sig]) if sig in timers else t
                 for sig, t in timings.items() if sig in signatures}
        winner, measured, finalist = _final(store, key, slot, (rank, me), signatures, lambda: finals(known),
                                  (what, timeout, dead_after))
    except ConsensusError:
        raise
    except _OwnFailure as own:  # this rank's own timing raised: its error, as the one-claimer protocol's claimer
        raise own.args[0] from None
    except Exception as exc:  # what the Store's client raised
        raise ConsensusError(store_lost_message(what, exc)) from exc
    logger.debug("consensus split %s: slot %d of %d, timed %d here -> %s", what, slot, len(shares), timed + more, winner)
    return list(signatures).index(winner), timed + more, timings, measured, finalist


def from_table(store, what: str, name: str, rank: int, signatures: Sequence[str], entry: str) -> int:
    """A rank whose table holds the key, under split tuning: its ``entry`` is published as the split's
    final winner, untimed, unless the split ranks published theirs first (first publication wins),
    so that ranks with and without the entry (a warm node beside a cold one) run one config.
    Returns the job's winner's index in ``signatures``."""
    key = decision_key(attempt_prefix(os.environ), name) + SPLIT
    try:
        store.compare_set(key + "/final", "", encode_final(rank, entry, {"how": TABLE_FINAL}))
        return list(signatures).index(_published(store, key, signatures, what))
    except ConsensusError:
        raise
    except Exception as exc:  # what the Store's client raised
        raise ConsensusError(store_lost_message(what, exc)) from exc


def _published(store, key: str, signatures: Sequence[str], what: str) -> str:
    """The split's final winner, published (by the finalists' rank or by a table's entry)."""
    final_key = key + "/final"
    payload = decode_split(text(store.get(final_key)), what, final_key, "winner")
    return final_winner(payload, list(signatures), what, final_key)


def _time_finals(store, key, rank, signatures, finals) -> None:
    """Time the finalists again here, heartbeat going (as a share's holder beats), and publish the
    winner (first publication wins); a failure is published as the final's error and raised here."""
    beats = consensus.state().beats
    beats.start(store, f"{key}/beat/1")
    try:
        try:
            index, measured = finals()
        except Exception as exc:
            store.compare_set(key + "/final", "", encode_share(1, rank, None, repr(exc)[:500]))
            raise _OwnFailure(exc) from None
        store.compare_set(key + "/final", "", encode_final(rank, signatures[index], measured))
    finally:
        beats.stop(store, f"{key}/beat/1")


def _final(store, key, slot, who, signatures, finals, limits) -> tuple[str, dict | None, bool]:
    """The winner over every share: the finalists timed again by slot 1's rank alone (by a live rank
    in its place when it dies), published once; every other rank reads it. With what they measured,
    and whether this rank published it (it grows the table: rank 0 may never meet the key)."""
    rank, me = who
    what, timeout, dead_after = limits
    final_key, holder, started, pause = key + "/final", _Holder(), time.monotonic(), 0.02
    mine = slot == 1
    while True:
        if mine and not store.check([final_key]):  # a table's entry may have decided meanwhile
            _time_finals(store, key, rank, signatures, finals)
        if store.check([final_key]):
            payload = decode_split(text(store.get(final_key)), what, final_key, "winner")
            return final_winner(payload, list(signatures), what, final_key), payload.get("measured"), \
                payload.get("rank") == rank
        if _died(store, key, 1, holder, dead_after):
            taken = text(store.compare_set(f"{final_key}/holder/{holder.takeovers + 1}", "", me))
            holder.moved_to(taken)
            mine = taken == me
            if mine:
                logger.warning("consensus: %s: the rank timing the finalists again died; rank %d times them", what, rank)
            continue
        if timeout is not None and time.monotonic() - started > timeout:
            raise ConsensusError(f"autotune_guard consensus: {what}: the finalists' timing was not published within "
                                 f"AUTOTUNE_CONSENSUS_TIMEOUT={timeout:g} s; this rank will not pick a config of its own")
        time.sleep(pause)
        pause = min(pause * 1.5, POLL_S)


def _roster(store, key, slot, world, signatures, what) -> dict:
    """The roster, once the join window closed: closed by the first rank after ``JOIN_S`` or as
    soon as the whole job arrived, by any other rank ``GRACE_S`` later (the first may have died).
    Where a window of this process closed at its end short of the job, its next windows close
    ``STRAGGLER_S`` after as many ranks have come (a later rank takes no share: it reads them)."""
    guard = current()
    roster_key, present = key + "/roster", _present(guard)
    closes_at = time.monotonic() + JOIN_S + (0 if slot == 1 else GRACE_S)
    pause = 0.01
    while not store.check([roster_key]):
        arrived = int(store.add(key + "/arrivals", 0))
        if present.ranks is not None and arrived >= present.ranks:
            closes_at = min(closes_at, time.monotonic() + STRAGGLER_S)
        if arrived >= world or time.monotonic() >= closes_at:
            store.compare_set(roster_key, "", encode_roster(arrived, signatures))
            break
        time.sleep(pause)
        pause = min(pause * 1.5, 0.1)
    roster = decode_split(text(store.get(roster_key)), what, roster_key, "members")
    members = roster.get("members")
    if isinstance(members, int) and 0 < members < world and (present.ranks is None or members > present.ranks):
        present.ranks = members
        guard.warn_once("split join window", (
            f"consensus split: {what}: {members} of {world} ranks came to the key's join window ({JOIN_S:g} s); "
            f"the others take no share of it. Later keys wait {STRAGGLER_S:g} s, not {JOIN_S:g} s, once "
            f"{members} ranks are in (a rank that comes later reads the shares)"), logging.INFO, scope="process",
            name="split-join-window")
    elif isinstance(members, int) and members >= world:
        present.ranks = None
    return roster


def _time_and_publish(store, key, slot, rank, share, signatures, time_share) -> int:
    """Time ``share`` here, heartbeat going, and publish it (first publication wins); a failure is
    published as the share's error (every rank names it) and raised here."""
    beat = f"{key}/beat/{slot}"
    beats = consensus.state().beats
    beats.start(store, beat)
    failed = None
    try:
        try:
            timed = {signatures[index]: as_sample(ms) for index, ms in
                     time_share([list(signatures).index(sig) for sig in share]).items()}
            timer = next((sample.timer for sample in timed.values() if sample.timer), None)
            value = encode_share(slot, rank, {sig: sample.median for sig, sample in timed.items()}, timer=timer)
        except Exception as exc:
            failed, value = exc, encode_share(slot, rank, None, repr(exc)[:500])
        store.compare_set(f"{key}/share/{slot}", "", value)
    finally:
        beats.stop(store, beat)
    if failed is not None:
        raise _OwnFailure(failed)
    return len(share)


class _OwnFailure(Exception):
    """The error this rank's timing raised (published to the others as its share's error)."""


class _Holder:
    """Who times one share now, as one waiter watches it: the slot's rank, then whoever took it over."""

    def __init__(self):
        self.takeovers, self.identity, self.since = 0, None, time.monotonic()
        self.beat, self.beat_changed, self.beat_next = None, time.monotonic(), 0.0

    def moved_to(self, identity: str) -> None:
        self.takeovers += 1
        self.identity, self.since, self.beat, self.beat_changed = identity, time.monotonic(), None, time.monotonic()


def _collect(store, key, shares, who, signatures, time_share, limits):
    """Every share's timings, taking over the share of a holder that died: (timings, timed here,
    the timer each candidate's share named)."""
    what, timeout, dead_after = limits
    timings, timers, timed, started = {}, {}, 0, time.monotonic()
    holders = {slot: _Holder() for slot in shares}
    pending, pause = set(shares), 0.02
    while pending:
        for slot in sorted(pending):
            share_key = f"{key}/share/{slot}"
            if store.check([share_key]):
                payload = decode_split(text(store.get(share_key)), what, share_key, "timings")
                timings.update(share_timings(payload, what, share_key, shares[slot]))
                if share_timer(payload):  # the finals' measurement names the timer that took them
                    timers.update(dict.fromkeys(shares[slot], share_timer(payload)))
                pending.discard(slot)
            elif _died(store, key, slot, holders[slot], dead_after):
                timed += _take_over(store, key, slot, holders[slot], who, shares[slot], signatures, time_share, what)
                pause = 0.02
        if pending and timeout is not None and time.monotonic() - started > timeout:
            raise ConsensusError(f"autotune_guard consensus: {what}: the shares of slots {sorted(pending)} were not "
                                 f"published within AUTOTUNE_CONSENSUS_TIMEOUT={timeout:g} s; this rank will not pick "
                                 "a config of its own")
        if pending:
            time.sleep(pause)
            pause = min(pause * 1.5, POLL_S)
    return timings, timed, timers


def _died(store, key, slot, holder: _Holder, dead_after: float) -> bool:
    """Whether the share's holder died (``deciding.liveness``'s two rules, by polling)."""
    if holder.identity is None:
        member = f"{key}/member/{slot}"
        if not store.check([member]):
            return time.monotonic() - holder.since > GRACE_S  # it took a slot and died before naming itself
        holder.identity = text(store.get(member))
    alive = alive_here(holder.identity)
    if alive is not None:
        return not alive
    now = time.monotonic()
    if now >= holder.beat_next:
        count = int(store.add(f"{key}/beat/{slot}", 0))
        holder.beat_next = now + dead_after / 8
        if count != holder.beat:
            holder.beat, holder.beat_changed = count, now
    return now - holder.beat_changed > dead_after


def _take_over(store, key, slot, holder: _Holder, who, share, signatures, time_share, what) -> int:
    """The holder died: the first live rank to claim the share times it; the others watch that one."""
    rank, me = who
    dead = holder.identity
    taken = text(store.compare_set(f"{key}/holder/{slot}/{holder.takeovers + 1}", "", me))
    holder.moved_to(taken)
    if taken != me:
        return 0
    logger.warning("consensus: %s: %s, which held a share of the split tuning (slot %d), died; rank %d times its "
                   "%d candidates in its place", what, _named(dead), slot, rank, len(share))
    return _time_and_publish(store, key, slot, rank, share, signatures, time_share)


def _named(identity: str | None) -> str:
    if not identity:
        return "a rank that never named itself"
    parts = identity.split("|")
    return f"rank {parts[0]} (pid {parts[1]} on {parts[2]})" if len(parts) > 2 else identity
