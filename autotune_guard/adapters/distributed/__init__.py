"""The torch.distributed adapter: rank and the job's Store (``store``), barrier-fired cross-rank
checks of the autotune choices (``barriers``, ``check``, ``exchange``; the rules are
``core.agreement``).

A check runs only where every rank of a group is known to arrive: after every N-th barrier of
that group, or where the program calls ``verify_choices``. It never hangs a job (its collectives
run on connections of the guard's own, a tree of two-member gloo groups, with a timeout) and
never touches the program's.
"""

from __future__ import annotations

from .barriers import count_and_check, register_hook, resolve, wrap_barriers
from .cadence import read_startup, startup
from .check import run_check
from .state import adapter_state
from .store import initialized_dist, job_store, process_rank, rank_and_world

__all__ = ["wrap_barriers", "on_install", "verify_choices", "maybe_verify_choices", "provide_facts", "last_check",
           "initialized_dist", "rank_and_world", "job_store"]

last_check: dict = adapter_state().last_check  # what the latest check moved: where, group, size, bytes, count


def provide_facts(guard) -> None:
    """The facts only this adapter can read: the fixed rank, the rank now, the job's Store."""
    guard.facts.provide("rank_world", process_rank)
    guard.facts.provide("rank_now", rank_and_world)
    guard.facts.provide("job_store", job_store)
    # the job's Store without the node's beside it: one counter per job for what is said once
    guard.facts.provide("job_store_alone", lambda: job_store(node=False))


def on_install(policy) -> None:
    """At every ``install()``: wrap the barriers (now, or when torch.distributed is imported) for a
    policy that arrives by the API. Barrier counts and what each group agreed on are kept, so a
    rank installing alone, or late, still checks at the same barriers as its group. The start-up
    settings are read here at the process's first activation, if torch.distributed did not first."""
    read_startup()
    register_hook()


def verify_choices(group=None) -> bool:
    """Compare the autotune choices of the ranks of ``group`` (default: the whole job).

    Call it where every rank of the group arrives, like a barrier. Only the choices made since the
    group's previous check travel; a key some ranks never ran is not a conflict. True when the ranks
    agree (and without a process group, or on a rank outside ``group``); False after logging the
    disagreement on the group's first rank; with ``AUTOTUNE_VERIFY_STRICT=1`` raises
    :class:`ChoiceMismatchError` on every rank instead."""
    return _check_in(group, "verify_choices()", nothing_to_compare=True)


def maybe_verify_choices(iteration: int, group=None) -> bool | None:
    """:func:`verify_choices` at every ``AUTOTUNE_VERIFY_EVERY``-th ``iteration`` (the start-up
    cadence, the same on every rank); None when no check ran (no cadence, not due, no process
    group, a rank outside ``group``), so a caller can tell "agreed" from "not asked"."""
    every = startup().verify_every
    if not every or iteration % every:
        return None
    return _check_in(group, f"iteration {iteration}", nothing_to_compare=None)


def _check_in(group, where: str, nothing_to_compare):
    dist = initialized_dist()
    resolved = resolve(dist, group) if dist is not None else None
    if resolved is None:
        return nothing_to_compare
    return run_check(dist, resolved, where)
