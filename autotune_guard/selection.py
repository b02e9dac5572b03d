"""Which candidate a pinned autotuner runs: plain functions over plain config descriptions.

A *descriptor* is a dict ``{"kwargs": {...}, "num_warps": 4, "num_stages": 3, "num_ctas": 1,
"maxnreg": None}``: what a table stores and what ``descriptor`` makes of a live ``triton.Config``
(by reading its attributes: Triton itself is never imported here).  A field of ``EXTRA_FIELDS`` is present only when the config sets it away from
its default, so the signature of every config that leaves them alone is the same text as before
those fields were known.  Nothing here knows about Triton, so every rule is testable on its own.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

# Launch options of a Config besides its meta-parameters, in signature order.
OPTION_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# Further fields Triton's Config compares (``all_kwargs``, hence ``__eq__``/``__hash__`` on 3.4+,
# and the compile options), with the default at which a descriptor leaves them out: the
# warp-specialisation fields of 3.2/3.3 and ``ir_override`` of 3.4+.
EXTRA_FIELDS = {
    "num_buffers_warp_spec": 0,
    "num_consumer_groups": 0,
    "reg_dec_producer": 0,
    "reg_inc_consumer": 0,
    "ir_override": None,
}


class SelectionError(RuntimeError):
    """A pinned autotuner could not be given a config (``AUTOTUNE_ON_MISS=error``)."""


def signature(desc: Mapping) -> str:
    """A canonical, version-independent text for a config: ``BLOCK=64,num_warps=4,...``."""
    parts = [f"{name}={value}" for name, value in sorted(desc["kwargs"].items())]
    parts += [f"{name}={desc[name]}" for name in OPTION_FIELDS if desc.get(name) is not None]
    parts += [f"{name}={desc[name]}" for name, default in EXTRA_FIELDS.items() if desc.get(name, default) != default]
    return ",".join(parts)


def static_cost(desc: Mapping) -> tuple:
    """Cost without timing: smallest tile first (product of integer meta-parameters), then fewer
    warps, stages and CTAs; the signature breaks ties, so declaration order never matters."""
    tile = math.prod(v for v in desc["kwargs"].values() if isinstance(v, int) and not isinstance(v, bool))
    return (tile, desc.get("num_warps") or 0, desc.get("num_stages") or 0, desc.get("num_ctas") or 0, signature(desc))


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


def select(
    candidates: Sequence[Mapping],
    *,
    table_entry: Mapping | None,
    block_sizes: Sequence[tuple[str, int]],
    on_miss: str,
    defaults: Mapping,
    what: str,
) -> tuple[int, str, str | None]:
    """Index of the candidate to run, why (``table``, ``block_sizes``, ``min_cost`` or ``first``),
    and a warning when a setting meant for this kernel could not be obeyed.

    ``what`` names kernel, key and arch for the errors of ``on_miss=error``.
    """
    warning = None
    if table_entry is not None:
        for i, desc in enumerate(candidates):
            if entry_matches(table_entry, desc, defaults):
                return i, "table", None
        warning = f"the table entry for {what} matches no live candidate"
    if block_sizes:
        obeying = block_size_matches(block_sizes, candidates)
        if obeying:
            return pick_on_miss(on_miss, obeying, candidates), "block_sizes", warning
        if obeying is not None:
            if on_miss == "error":
                raise SelectionError(f"autotune_guard: AUTOTUNE_BLOCK_SIZES matches no candidate of {what}")
            warning = f"AUTOTUNE_BLOCK_SIZES matches no candidate of {what}"
    if on_miss == "error":
        reason = "its table entry matches no live candidate" if table_entry is not None else "no table entry"
        raise SelectionError(f"autotune_guard: {what}: {reason} and AUTOTUNE_ON_MISS=error")
    return pick_on_miss(on_miss, range(len(candidates)), candidates), on_miss, warning


def chaos_shift(index: int, count: int, rank: int) -> int:
    """AUTOTUNE_CHAOS: each rank runs a different candidate on purpose, reproducibly."""
    return (index + rank) % count


def descriptor(config) -> dict:
    """A live ``triton.Config`` as plain data: every field Triton's Config compares in the running
    release; ``EXTRA_FIELDS`` only when set off their default."""
    desc = {
        "kwargs": dict(config.kwargs),
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "num_ctas": getattr(config, "num_ctas", 1),
        "maxnreg": getattr(config, "maxnreg", None),
    }
    for name, default in EXTRA_FIELDS.items():
        value = getattr(config, name, default)
        if value != default:
            desc[name] = value
    return desc


def compact(desc: dict) -> dict:
    """A descriptor as files store it (unset maxnreg left out)."""
    return {k: v for k, v in desc.items() if v is not None}


def key_text(key: tuple) -> str:
    """A tuning key as tables and logs spell it: ``1024,torch.float16``."""
    return ",".join(str(part) for part in key)
