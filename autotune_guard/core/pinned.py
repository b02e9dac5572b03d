"""The pinned rule: which candidate a pinned kernel runs for one key, from plain arguments.

One rule for every adapter (an eager launch, a kernel compiled by Inductor, a template selection),
so they can never pick differently: the table entry, else ``AUTOTUNE_BLOCK_SIZES``, else
``AUTOTUNE_ON_MISS``; then ``AUTOTUNE_CHAOS``. A family with no static cost to rank by (Inductor's
template selection) gives its own deterministic candidate, which a miss takes in place of
``min_cost``/``first`` (the ``deterministic`` variant); ``error`` still refuses.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

from .errors import SelectionError
from .model import OPTION_FIELDS, EXTRA_FIELDS, static_cost


class Pick(NamedTuple):
    """A pinned decision: the candidate's index, why (``table``, ``block_sizes``, the on-miss rule
    or ``chaos``), and a warning when a setting meant for this kernel could not be obeyed."""

    index: int
    why: str
    warning: str | None


def entry_matches(entry: Mapping, desc: Mapping, defaults: Mapping) -> bool:
    """Whether a table entry names this candidate; a field the entry omits takes Triton's default."""
    if dict(entry.get("kwargs", {})) != dict(desc["kwargs"]):
        return False
    for name in OPTION_FIELDS:
        wanted = entry[name] if name in entry else defaults.get(name)
        if wanted != desc.get(name):
            return False
    return all(entry.get(name, default) == desc.get(name, default) for name, default in EXTRA_FIELDS.items())


def block_size_matches(overrides: Sequence[tuple[str, int]], candidates: Sequence[Mapping]) -> list[int] | None:
    """Indices of candidates that obey ``AUTOTUNE_BLOCK_SIZES``; None when it names no
    meta-parameter of this kernel (the override does not apply here)."""
    names = {name for desc in candidates for name in desc["kwargs"]}
    relevant = [(name, value) for name, value in overrides if name in names]
    if not relevant:
        return None
    return [
        i for i, desc in enumerate(candidates)
        if all(desc["kwargs"].get(name) == value for name, value in relevant if name in desc["kwargs"])
    ]


def pick_on_miss(on_miss: str, indices: Sequence[int], candidates: Sequence[Mapping]) -> int:
    """``first``: declaration order; otherwise (``min_cost``, and ``error`` among obeying
    candidates) the lowest static cost."""
    if on_miss == "first":
        return min(indices)
    return min(indices, key=lambda i: static_cost(candidates[i]))


def select(candidates: Sequence[Mapping], *, table_entry: Mapping | None, block_sizes: Sequence[tuple[str, int]],
           on_miss: str, defaults: Mapping, what: str, deterministic: int | None = None,
           called: str = "live candidate") -> Pick:
    """The candidate to run. ``what`` names kernel, key and arch for the errors of ``on_miss=error``;
    ``called``: what the messages call a candidate. ``deterministic``: the family's own choice on a
    miss (why: ``deterministic``), in place of the on-miss rule's ranking."""
    if not candidates:  # whatever the table and on-miss rule say, there is nothing to choose from
        raise SelectionError(f"autotune_guard: {what}: the kernel's own pruning (early_config_prune, or "
                             "perf_model with top_k) left no candidate config; make it keep at least one")
    warning = None
    if table_entry is not None:
        for i, desc in enumerate(candidates):
            if entry_matches(table_entry, desc, defaults):
                return Pick(i, "table", None)
        warning = f"the table entry for {what} matches no {called}"
    if block_sizes:
        obeying = block_size_matches(block_sizes, candidates)
        if obeying:
            return Pick(pick_on_miss(on_miss, obeying, candidates), "block_sizes", warning)
        if obeying is not None:
            if on_miss == "error":
                raise SelectionError(f"autotune_guard: AUTOTUNE_BLOCK_SIZES matches no candidate of {what}")
            warning = f"AUTOTUNE_BLOCK_SIZES matches no candidate of {what}"
    if on_miss == "error":
        reason = f"its table entry matches no {called}" if table_entry is not None else "no table entry"
        raise SelectionError(f"autotune_guard: {what}: {reason} and AUTOTUNE_ON_MISS=error")
    if deterministic is not None:
        return Pick(deterministic, "deterministic", warning)
    return Pick(pick_on_miss(on_miss, range(len(candidates)), candidates), on_miss, warning)


def chaos_shift(index: int, count: int, rank: int) -> int:
    """AUTOTUNE_CHAOS: each rank runs a different candidate on purpose, reproducibly."""
    return (index + rank) % count


def pinned_pick(descriptors: Sequence[Mapping], *, table_entry: Mapping | None, policy, defaults: Mapping,
                what: str, rank: int = 0, deterministic: int | None = None, called: str = "live candidate") -> Pick:
    """The pinned decision under ``policy`` (its block sizes, on-miss rule and chaos setting);
    ``rank`` matters only with ``AUTOTUNE_CHAOS``; ``deterministic`` and ``called`` as in ``select``."""
    pick = select(descriptors, table_entry=table_entry, block_sizes=policy.block_sizes, on_miss=policy.on_miss,
                  defaults=defaults, what=what, deterministic=deterministic, called=called)
    if policy.chaos:
        return Pick(chaos_shift(pick.index, len(descriptors), rank), "chaos", pick.warning)
    return pick
