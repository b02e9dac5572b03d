"""``torch.distributed.barrier`` and ``monitored_barrier`` wrapped: each call counted per group,
and a check run at every ``AUTOTUNE_VERIFY_EVERY``-th one (the start-up cadence).

Counting starts when torch.distributed is imported, policy or not, Triton or not: every rank of a
group counts the same barriers, so all of them check at the same one. An async barrier has not
completed when it returns, so it is neither checked nor counted (every rank skips it alike).
"""

from __future__ import annotations

import logging
import sys

from ... import runtime
from ... import _patching
from . import cadence
from .check import run_check
from .state import adapter_state
from .store import initialized_dist, rank_and_world

logger = logging.getLogger("autotune_guard")

BARRIERS = ("barrier", "monitored_barrier")


def wrap_barriers(module=None) -> None:
    """Post-import hook of ``torch.distributed``: read the start-up cadence and wrap the barriers
    in place, aliases taken before included; idempotent, whatever the order of imports and installs."""
    try:
        cadence.startup()
    except Exception as exc:  # a post-import hook that raises would fail `import torch` itself
        logger.error("%s", exc)  # and again, raised, at the first barrier that would count
    try:
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        if c10d is None:  # a torch built without distributed support
            return
        for name in BARRIERS:
            if getattr(c10d, name, None) is not None:
                _wrap(c10d, name)
    except Exception as exc:
        logger.error("could not wrap torch.distributed barriers (%r): AUTOTUNE_VERIFY_EVERY will not fire", exc)


def _wrap(c10d, name: str) -> None:
    """One barrier: a wrapt FunctionWrapper put in place by the patching idiom (one wrapper per
    original, so a re-wrap after an undo rebinds the same object)."""
    import wrapt

    found = _patching.patched(c10d, name)
    if found is None:
        original = getattr(c10d, name)
        wrappers = adapter_state().wrappers
        wrapper = wrappers.get(name)
        if wrapper is None or wrapper.__wrapped__ is not original:
            hook = _after_barrier if name == "barrier" else _after_monitored_barrier
            wrapper = wrappers[name] = wrapt.FunctionWrapper(original, hook)
        found = _patching.patch(c10d, name, wrapper)
    _patching.rebind_aliases(name, found.original, found.replacement)


def _every() -> int:
    """The start-up cadence; raises the named error of a bad value."""
    return cadence.startup().verify_every


def _after_barrier(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    every = _every()
    # barrier(group=None, async_op=False, device_ids=None, timeout=None)
    if every and not kwargs.get("async_op", args[1] if len(args) > 1 else False):
        count_and_check(kwargs.get("group", args[0] if args else None), every)
    return result


def _after_monitored_barrier(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    every = _every()
    if every:  # monitored_barrier(group=None, timeout=None, wait_all_ranks=False)
        count_and_check(kwargs.get("group", args[0] if args else None), every)
    return result


def count_and_check(group, every: int) -> None:
    """Count one barrier of ``group``; check at every ``every``-th."""
    dist = initialized_dist()
    if dist is None:
        return
    group = resolve(dist, group)
    if group is None:  # this rank is not a member: the barrier itself returned at once
        return
    adapter = adapter_state()
    state = adapter.group_state(group)
    with adapter.lock:
        state.barriers += 1
        count = state.barriers
        adapter.barriers_counted += 1
    if count % every == 0:
        run_check(dist, group, f"barrier {count} of this group")


def resolve(dist, group):
    """The group object a barrier of ``group`` ran in, or None when this rank is outside it."""
    if group is None:
        return dist.group.WORLD
    if dist.get_rank(group) < 0:
        return None
    return group


def register_hook() -> None:
    """Wrap the barriers now, or when torch.distributed is imported (the Guard's registry of
    post-import hooks registers this once)."""
    if "torch.distributed" in sys.modules:
        wrap_barriers(sys.modules["torch.distributed"])
    else:
        runtime.current().when_imported("torch.distributed", wrap_barriers)


def say_unchecked_cadence() -> bool:
    """At exit: name a cadence that never fired (on rank 0; on every rank when strict, each of
    which then fails). True when the process must exit with status 1."""
    found = unchecked_cadence()
    if found is None:
        return False
    line, strict = found
    if strict:
        logger.error("%s", line)
    elif rank_and_world()[0] == 0:
        logger.warning("%s", line)
    return strict


def unchecked_cadence() -> tuple[str, bool] | None:
    """At exit: (the line, strict) when ``AUTOTUNE_VERIFY_EVERY`` was set in a distributed job and no
    check ever ran in this process (its barriers too few, or none: a job that synchronizes with
    collectives only), else None. The cadence is the same on every rank, so each rank says the same."""
    try:
        every, strict = cadence.startup().verify_every, cadence.strict()
    except Exception:  # a bad start-up value was reported already
        return None
    if not every or adapter_state().last_check.get("count", 0) or rank_and_world()[1] < 2 or _helper_process():
        return None
    barriers = adapter_state().barriers_counted
    line = (f"AUTOTUNE_VERIFY_EVERY={every} but no check ran: the program called torch.distributed.barrier "
            f"{barriers} time{'s' * (barriers != 1)} (checks run after barrier {every}, {2 * every}, ...), so the ranks' choices "
            "were never compared; lower AUTOTUNE_VERIFY_EVERY, or call autotune_guard.maybe_verify_choices(step) "
            "where every rank arrives")
    if strict:
        line += "; AUTOTUNE_VERIFY_STRICT=1 makes this an error: exit status 1"
    return line, strict


def _helper_process() -> bool:
    """A multiprocessing child without a process group (a data-loader worker): it inherits the
    rank's variables but is no rank, and takes part in no check."""
    mp = sys.modules.get("multiprocessing")
    try:
        return mp is not None and mp.parent_process() is not None and initialized_dist() is None
    except Exception:
        return False
