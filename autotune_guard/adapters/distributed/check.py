"""One check in one group, by phase: gather what is new, exchange it, settle what the group knows.

A check is a collective: every member of the group runs it at the same point (after a counted
barrier, or where the program calls ``verify_choices``). The rules are ``core.agreement``; the
collectives ``exchange``.
"""

from __future__ import annotations

import logging

from ... import runtime
from ...core.agreement import GroupState, compare_arrived, learn, pair_hash, rank_list, report
from ...core.errors import ChoiceMismatchError, VerificationError
from ...core.model import ChoiceKey
from . import cadence, exchange
from .state import adapter_state

logger = logging.getLogger("autotune_guard")


def run_check(dist, group, where: str) -> bool:
    """One check in ``group``: True when its ranks agree; False after a report (on the group's
    first rank), or ChoiceMismatchError on every rank when strict."""
    state = adapter_state().group_state(group)
    pending = _gather_new(state)
    ranks = dist.get_process_group_ranks(group)
    if len(ranks) < 2:
        return _alone(state, pending, group, ranks, where)
    hashed = {pair: pair_hash(*pair) for pair in pending}
    differ, arrived, moved = _collective(where, ranks, lambda: exchange.exchange(
        exchange.guard_group(dist, group, state), ranks, state.digests, hashed))
    if differ is None:
        _record(where, group, ranks, moved, 0, 0)
        logger.debug("verify in group of %d at %s: nothing new", len(ranks), where)
        return True
    first = dist.get_rank(group) == 0
    _learn_agreed(state, pending, hashed, differ, ranks)
    verdict = None
    if differ:
        mine = _verdict(state, arrived, ranks, where) if first else None
        verdict = _collective(where, ranks, lambda: state.guard.broadcast_down(mine, moved))
        _apply(state, verdict)
    sent = sum(hashed[pair][0] in differ for pair in pending)
    _record(where, group, ranks, moved, len(differ), sent)
    _log_check(len(ranks), where, differ, sent, verdict, len(pending))
    return _conclude(state, ranks, where, first, verdict and verdict["report"])


def _gather_new(state: GroupState) -> list:
    """This rank's (key, signature) pairs the group has not seen, taken from the epoch's log."""
    taken = runtime.current().epoch.log.take_unverified()
    adapter = adapter_state()
    with adapter.lock:
        for key, choice in taken.items():
            adapter.taken.append((key, choice.signature))  # the config, not how it was chosen
        for pair in adapter.taken[state.cursor:]:
            if pair not in state.known:
                state.pending.add(pair)
        state.cursor = len(adapter.taken)
        return sorted(state.pending)


def _alone(state: GroupState, pending: list, group, ranks, where: str) -> bool:
    """A group of one: nobody to disagree with; what it brought is what the group knows."""
    with adapter_state().lock:
        for pair in pending:
            learn(state, pair)
            state.reference.setdefault(pair[0], (pair[1], ranks[0] if ranks else 0))
        state.pending.clear()
    _record(where, group, ranks, [0, 0], 0, 0)
    logger.debug("verify in group of %d at %s: nobody to compare with", len(ranks), where)
    return True


def _collective(where: str, ranks, call):
    """``call()``, a check's collectives; a failure is named as the check's, never the program's."""
    try:
        return call()
    except Exception as exc:
        raise VerificationError(f"autotune_guard: the choice check at {where} in group {rank_list(ranks)} did not "
                                f"complete on every rank ({exc}); the program's own collectives are not affected",
                                where=where, ranks=list(ranks)) from exc


def _learn_agreed(state: GroupState, pending: list, hashed: dict, differ: set, ranks) -> None:
    """Pairs in buckets whose views agree: every rank brought the same new pairs there."""
    with adapter_state().lock:
        for pair in pending:
            if hashed[pair][0] not in differ:
                learn(state, pair)
                known = state.reference.get(pair[0])
                if known is None or known[0] != pair[1]:
                    state.reference[pair[0]] = (pair[1], ranks[0])
        state.pending.clear()


def _verdict(state: GroupState, arrived: dict, ranks, where: str) -> dict:
    """On the group's first rank: what every member learns from what arrived (wire form)."""
    with adapter_state().lock:
        before = dict(state.reference)
    reference = dict(before)
    conflicts = compare_arrived(arrived, reference)
    for entry, found in arrived.items():  # an expert's key one rank meets is not compared: said apart
        if entry not in before and len({rank for ranks in found.values() for rank in ranks}) == 1:
            state.lone.add(entry)
        else:
            state.lone.discard(entry)
    for entry, values in conflicts.items():  # kept, so that a later all-clear never hides it
        state.disputed.setdefault(entry, (where, "; ".join(
            f"{'an earlier check, ' if earlier else ''}rank{'s' * (len(rs) > 1)} {rank_list(rs)}: {sig}"
            for sig, rs, earlier in values)))
    changed = [[list(key), value[0], value[1]] for key, value in reference.items() if before.get(key) != value]
    return {"pairs": exchange.encode_pairs(sorted((key, sig) for key, values in arrived.items() for sig in values)),
            "reference": changed, "conflicts": len(conflicts),
            "report": report(conflicts, ranks, where) if conflicts else None}


def _apply(state: GroupState, verdict: dict) -> None:
    with adapter_state().lock:
        for key, signature, rank in verdict["reference"]:
            state.reference[ChoiceKey(*key)] = (signature, rank)
        for pair in exchange.decode_pairs(verdict["pairs"]):
            learn(state, pair)


def _record(where: str, group, ranks, moved, buckets: int, gathered: int) -> None:
    """``last_check``: what the latest check moved (bytes sent/received by this rank, payloads) and
    the connections this rank holds for the group's checks."""
    adapter = adapter_state()
    count = adapter.last_check.get("count", 0) + 1
    tree = adapter.group_state(group).guard
    adapter.last_check.update(where=where, group=getattr(group, "group_name", None), size=len(ranks), sent=moved[0],
                              received=moved[1], buckets=buckets, gathered=gathered, count=count,
                              connections=len(tree.edges) if tree is not None else 0)


def _log_check(size: int, where: str, differ: set, sent: int, verdict, new: int) -> None:
    if not logger.isEnabledFor(logging.DEBUG):
        return
    if differ:
        logger.debug("verify in group of %d at %s: sent %d, received %d, %d conflicts", size, where, sent,
                     len(verdict["pairs"]), verdict["conflicts"])
    else:
        logger.debug("verify in group of %d at %s: %d new entries agreed by their bucket hashes, nothing gathered",
                     size, where, new)


def _conclude(state: GroupState, ranks, where: str, first: bool, message) -> bool:
    """The check's outcome: the success line or the report on the first rank; strict raises everywhere."""
    if not message:
        if first:  # only checks where some rank brought new entries get here
            _say_agreed(state, ranks, where)
        return True
    if first:
        logger.error("%s", message)
    if cadence.strict():
        raise ChoiceMismatchError(message)
    return False


STANDING_SHOWN = 3  # standing disagreements an all-clear names; the rest are counted


def _say_agreed(state: GroupState, ranks, where: str) -> None:
    """The success line; a disagreement an earlier check found still stands (no rank changes its
    choice), so the line names it instead of reading as an all-clear."""
    lone = len(state.lone)
    checked = len({key for key, _ in state.known}) - lone
    standing = sorted(state.disputed.items())
    if not standing:
        logger.info("autotune choices agree across the ranks of group %s at %s: %d kernel/key entries checked, "
                    "all agree%s", rank_list(ranks), where, checked,
                    f" ({lone} more met by one rank alone: nothing to compare them with)" if lone else "")
        return
    named = "; ".join(f"{key.kernel} key ({key.key}) arch {key.arch}, found at {found}: {values}"
                      for key, (found, values) in standing[:STANDING_SHOWN])
    more = f"; and {len(standing) - STANDING_SHOWN} more" if len(standing) > STANDING_SHOWN else ""
    logger.warning("autotune choices across the ranks of group %s at %s: %d kernel/key entries checked, the new ones "
                   "agree, but %d disagreement%s found earlier still stand%s (each rank runs what it chose): %s%s",
                   rank_list(ranks), where, checked, len(standing), "s" * (len(standing) != 1),
                   "s" * (len(standing) == 1), named, more)
