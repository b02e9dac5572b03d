"""The words of consensus's errors: who claimed, what timed out, what the Store did (``core.consensus``,
``deciding.consensus``)."""

from __future__ import annotations


def claimer_rank(identity: str):
    head = identity.split("|", 1)[0]
    return int(head) if head.lstrip("-").isdigit() else head


def describe_claimer(identity: str) -> str:
    parts = identity.split("|")
    if len(parts) < 3:
        return f"rank {identity or '?'}"
    return f"rank {parts[0]} (pid {parts[1]} on {parts[2]})"


def timeout_message(what: str, claimer, timeout_s: float, alive=None) -> str:
    """``alive``: whether the claimer's process was seen alive on this machine (None: not known)."""
    if isinstance(claimer, str):
        who = describe_claimer(claimer)
    else:
        who = f"rank {claimer}" if claimer is not None else "a rank that died before naming itself"
    state = {True: "it is alive: it hung, or its tuning takes longer than that",
             False: "it has died"}.get(alive, "it hung, or its tuning takes longer than that")
    return (f"autotune_guard consensus: {what}: {who} claimed this tuning but published no winner within "
            f"{timeout_s:g} s (AUTOTUNE_CONSENSUS_TIMEOUT={timeout_s:g}; unset, a waiter waits as long as the "
            f"claimer lives); {state}. This rank will not pick a config of its own")


def store_lost_message(what: str, error: BaseException) -> str:
    return (f"autotune_guard consensus: {what}: the job's Store failed ({error}); the process hosting it "
            "(rank 0, or torchrun's agent) may have died. This rank will not pick a config of its own")


def _few(items, limit: int = 4) -> str:
    items = sorted(items)
    if not items:
        return "none"
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def death_message(what: str, payload: dict) -> str:
    """A waiter's error for a claimer that died before publishing (``consensus.encode_death``)."""
    who = describe_claimer(payload.get("claimer", ""))
    if payload.get("seen") == "process":
        how = "ended (its process is gone, seen on its machine)"
    else:
        how = (f"stopped signalling that it is alive ({payload['died']:g} s without a heartbeat, "
               "AUTOTUNE_CONSENSUS_DEAD_AFTER): it died, lost its host or lost the Store")
    return (f"autotune_guard consensus: {what}: {who}, which claimed this tuning, {how} before publishing a winner. "
            "This rank will not pick a config of its own")
