"""Consensus mode as plain data: what a decision is called in the job's Store, what is published
under that name, and the errors a rank raises when it cannot follow the job's decision.

Nothing here imports torch or Triton: ``interception`` (Triton) and ``distributed`` (the Store)
use these functions, and the tests drive them directly.

A decision is one (arch, kernel, tuning key).  Its Store name deliberately leaves the candidate
list out: ranks whose candidate lists differ for the same key must meet under the same name, so
that the waiter sees the claimer's list hash in the published value and refuses, instead of both
tuning under different names and silently running different configs.
"""

from __future__ import annotations

import hashlib
import json
from typing import Sequence

PAYLOAD_FORMAT = "autotune_guard.consensus/1"
NAMESPACE = "consensus/"


class ConsensusError(RuntimeError):
    """This rank cannot run the job's agreed config (claimer dead or hung, claimer failed,
    candidate lists differ, the Store is gone).  It never falls back to a config of its own."""


def decision_name(arch: str, qualified: str, key_text: str) -> str:
    """The Store name of one decision.  Hashed: tuning keys can be long and contain anything."""
    digest = hashlib.sha256(f"{arch}|{qualified}|{key_text}".encode()).hexdigest()[:32]
    return NAMESPACE + digest


def candidates_hash(signatures: Sequence[str]) -> str:
    """Identity of a candidate list after pruning.  Order-insensitive: which configs are on offer
    is what matters to a waiter that pins the winner by signature; duplicates count once."""
    text = "\n".join(sorted(set(signatures)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode_winner(rank: int, signature: str, config: dict, signatures: Sequence[str], timed: bool) -> str:
    """What a claimer publishes after tuning.  The candidate list goes along so that a rank whose
    list differs can say which candidates differ."""
    return json.dumps({
        "format": PAYLOAD_FORMAT, "rank": rank, "winner": signature, "config": config,
        "candidates_hash": candidates_hash(signatures), "candidates": sorted(set(signatures)), "timed": timed,
    }, sort_keys=True)


def encode_failure(rank: int, error: str) -> str:
    """What a claimer publishes when its tuning raised: waiters fail now, not at the timeout."""
    return json.dumps({"format": PAYLOAD_FORMAT, "rank": rank, "error": error}, sort_keys=True)


def decode(text: str, what: str) -> dict:
    """A published value; ConsensusError when it is not one this version understands."""
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or payload.get("format") != PAYLOAD_FORMAT:
        raise ConsensusError(f"autotune_guard consensus: {what}: the job's Store holds a value this version "
                             f"cannot read ({text[:120]!r}); are all ranks running the same autotune_guard?")
    return payload


def follow(payload: dict, signatures: Sequence[str], what: str) -> int:
    """Index (into ``signatures``, this rank's live candidates after pruning) of the published
    winner; raises ConsensusError when the claimer failed or the candidate lists differ."""
    claimer = payload.get("rank", "?")
    if "error" in payload:
        raise ConsensusError(f"autotune_guard consensus: {what}: rank {claimer}, which claimed this tuning, failed "
                             f"while timing ({payload['error']}); this rank will not pick a config of its own")
    mine = candidates_hash(signatures)
    if payload.get("candidates_hash") != mine:
        theirs = set(payload.get("candidates") or ())
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


def timeout_message(what: str, claimer: int | None, timeout_s: float) -> str:
    who = f"rank {claimer}" if claimer is not None else "a rank that died before naming itself"
    return (f"autotune_guard consensus: {what}: {who} claimed this tuning but published no winner within "
            f"{timeout_s:g} s (AUTOTUNE_CONSENSUS_TIMEOUT); it died or hung. This rank will not pick a config "
            "of its own")


def store_lost_message(what: str, error: BaseException) -> str:
    return (f"autotune_guard consensus: {what}: the job's Store failed ({error}); the process hosting it "
            "(rank 0, or torchrun's agent) may have died. This rank will not pick a config of its own")


def _few(items, limit: int = 4) -> str:
    items = sorted(items)
    if not items:
        return "none"
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
