"""Everything that touches ``torch.distributed``: rank, barrier-fired verification, the job's Store.

torch is never imported from here at start-up: each function looks at ``sys.modules`` first, so
a process that never imported torch.distributed pays nothing.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

logger = logging.getLogger("autotune_guard")

_RANK_VARIABLES = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))


def initialized_dist():
    """``torch.distributed`` when a default process group exists, else None."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:
        pass
    return None


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the job's size: the process group when initialized, else
    ``RANK``, ``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK``, else 0 of 1."""
    dist = initialized_dist()
    if dist is not None:
        return dist.get_rank(), dist.get_world_size()
    for rank_var, world_var in _RANK_VARIABLES:
        rank = os.environ.get(rank_var, "")
        if rank.isdigit():
            world = os.environ.get(world_var, "")
            return int(rank), int(world) if world.isdigit() else int(rank) + 1
    return 0, 1


# --- cross-rank verification, fired from torch.distributed.barrier -----------------------------
# A check is a collective, so it may only run where every rank of a group is known to arrive: right
# after a barrier of that group (every N-th, counted per group), or where the program calls
# verify_choices itself.  Never at the moment of choice: ranks reach kernels at different times.
#
# Choices travel once per group.  take_unverified() drains the process-wide list of new choices,
# but a choice that travelled in a subgroup's check has not been compared with the ranks outside
# that subgroup; so every choice taken is appended to ``_taken`` and each group keeps its own
# cursor into it.  A world check therefore still carries what a pipeline-stage check already saw.


class ChoiceMismatchError(RuntimeError):
    """Ranks of one process group ran different configs for one kernel and key
    (raised on every rank of the group with ``AUTOTUNE_VERIFY_STRICT=1``)."""


REPORT_ENTRIES = 5  # offending entries a report spells out; the rest are counted

_taken: list[tuple[str, str]] = []  # (arch|kernel|key, config signature), in the order chosen
_groups = None  # ProcessGroup -> _GroupState (weak keys: a destroyed group takes its state along)
_groups_by_id: dict = {}  # for group objects that cannot be weakly referenced
_state_lock = threading.Lock()
_hook_registered = False


class _GroupState:
    __slots__ = ("barriers", "cursor", "reference", "flag")

    def __init__(self):
        self.barriers = 0  # barrier calls of this group seen by this rank
        self.cursor = 0  # _taken[:cursor] has travelled in this group
        # entry -> (signature, global rank that first reported it): what the group saw first for
        # each entry, so that a rank reaching a key later is compared with the earlier ranks.
        self.reference: dict[str, tuple[str, int]] = {}
        self.flag = None  # the steady-state check's one-element tensor, kept between checks


def wrap_barriers(module=None) -> None:
    """Post-import hook of ``torch.distributed``: wrap ``barrier`` and ``monitored_barrier`` in
    place, whatever the order of imports and of ``install()``; idempotent.

    The wrappers look up the installed policy at every call, so they may be in place long before
    any policy (and cost a dict lookup and a comparison while there is none or no cadence)."""
    try:
        import wrapt

        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        if c10d is None:  # a torch built without distributed support
            return
        for name, hook in (("barrier", _after_barrier), ("monitored_barrier", _after_monitored_barrier)):
            current = getattr(c10d, name, None)
            if current is None:
                continue
            if getattr(current, "_self_wrapper", None) is hook:
                original = current.__wrapped__
            else:
                original = current
                wrapt.wrap_function_wrapper(c10d, name, hook)
            _rebind(name, original, getattr(c10d, name))
    except Exception as exc:  # a post-import hook that raises would fail `import torch` itself
        logger.error("could not wrap torch.distributed barriers (%r): AUTOTUNE_VERIFY_EVERY will not fire", exc)


def _rebind(name: str, original, wrapped) -> None:
    """Point every module-level alias of ``original`` at ``wrapped``: ``torch.distributed`` exports
    the name by ``from .distributed_c10d import *``, and a module that ran ``from torch.distributed
    import barrier`` before the wrapping holds the original.  Only aliases under the same name are
    found (a cheap dict lookup per loaded module); local variables and renamed imports are not."""
    from types import ModuleType

    for module in list(sys.modules.values()):
        if not isinstance(module, ModuleType):
            continue
        # object.__getattribute__: a lazily loaded module must not be loaded by looking at it
        namespace = object.__getattribute__(module, "__dict__")
        if namespace.get(name) is original:
            namespace[name] = wrapped


def reset_cadence() -> None:
    """Forget barrier counts, cursors and what each group agreed on: a new policy starts a new
    choice log.  Called by every ``install()``, which is also where the barriers get wrapped when
    the policy arrives by the API rather than through the environment's import hook."""
    global _taken, _groups, _hook_registered
    with _state_lock:
        _taken = []
        _groups = None
        _groups_by_id.clear()
    if "torch.distributed" in sys.modules:
        wrap_barriers(sys.modules["torch.distributed"])
    elif not _hook_registered:
        import wrapt

        _hook_registered = True
        wrapt.register_post_import_hook(wrap_barriers, "torch.distributed")


def _after_barrier(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    policy = _installed_policy()
    if policy is None or not policy.verify_every:
        return result
    # barrier(group=None, async_op=False, device_ids=None, timeout=None)
    if kwargs.get("async_op", args[1] if len(args) > 1 else False):
        # The barrier has not completed yet and the caller asked not to block: no check, and no
        # count either (every rank of the group makes the same calls, so all skip alike).
        return result
    group = kwargs.get("group", args[0] if args else None)
    device_ids = kwargs.get("device_ids", args[2] if len(args) > 2 else None)
    _count_and_check(group, device_ids, policy.verify_every)
    return result


def _after_monitored_barrier(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    policy = _installed_policy()
    if policy is None or not policy.verify_every:
        return result
    _count_and_check(kwargs.get("group", args[0] if args else None), None, policy.verify_every)
    return result


def _count_and_check(group, device_ids, every: int) -> None:
    dist = initialized_dist()
    if dist is None:
        return
    group = _resolve(dist, group)
    if group is None:  # this rank is not a member: the barrier itself returned at once
        return
    state = _state_for(group)
    with _state_lock:
        state.barriers += 1
        due = state.barriers % every == 0
        count = state.barriers
    if due:
        _check(dist, group, device_ids, f"barrier {count} of this group")


def verify_choices(group=None) -> bool:
    """Compare the autotune choices of the ranks of ``group`` (default: the whole job).

    Call it where every rank of the group arrives, like a barrier.  Only the choices this rank
    made since the group's previous check travel; they are compared with each other and with
    what the group saw before, so once every kernel and key has been seen a check moves an empty
    payload.  A key that some ranks never ran is not a conflict.  Returns True when the ranks
    agree (and without a process group, or on a rank outside ``group``: nothing to compare);
    False after logging the disagreement on the group's first rank; with
    ``AUTOTUNE_VERIFY_STRICT=1`` raises :class:`ChoiceMismatchError` on every rank instead.
    """
    return _check_in(group, "verify_choices()", nothing_to_compare=True)


def maybe_verify_choices(iteration: int, group=None) -> bool | None:
    """:func:`verify_choices` when the policy asks for a check at ``iteration`` (every
    ``AUTOTUNE_VERIFY_EVERY``-th); None when no check ran (no policy, no cadence, not due, no
    process group, a rank outside ``group``), so a caller can tell "agreed" from "not asked"."""
    policy = _installed_policy()
    if policy is None or not policy.verify_every or iteration % policy.verify_every:
        return None
    return _check_in(group, f"iteration {iteration}", nothing_to_compare=None)


def _check_in(group, where: str, nothing_to_compare):
    """A check in ``group`` now; ``nothing_to_compare`` without a process group or on a rank
    outside ``group``."""
    dist = initialized_dist()
    resolved = _resolve(dist, group) if dist is not None else None
    if resolved is None:
        return nothing_to_compare
    return _check(dist, resolved, None, where)


def _installed_policy():
    # A dict lookup, not an import: until interception is loaded (with Triton, or by install())
    # there is no policy, and a torch-only process (torchrun's launcher) never loads it.
    module = sys.modules.get("autotune_guard.interception")
    return module.active_policy() if module is not None else None


def _resolve(dist, group):
    """The group object a barrier of ``group`` ran in, or None when this rank is outside it."""
    if group is None:
        return dist.group.WORLD
    if dist.get_rank(group) < 0:
        return None
    return group


def _state_for(group) -> _GroupState:
    global _groups
    with _state_lock:
        if _groups is None:
            import weakref

            _groups = weakref.WeakKeyDictionary()
        try:
            state = _groups.get(group)
            if state is None:
                state = _groups[group] = _GroupState()
        except TypeError:  # not weakly referenceable
            state = _groups_by_id.setdefault(id(group), _GroupState())
        return state


def _check(dist, group, device_ids, where: str) -> bool:
    """One check in ``group`` (every rank of it calls this at the same point)."""
    from . import evidence

    state = _state_for(group)
    with _state_lock:
        for entry, value in evidence.take_unverified().items():
            _taken.append((entry, value.split(";", 1)[0]))  # the config, not how it was chosen
        end = len(_taken)
        payload = _taken[state.cursor:end]
    size = dist.get_world_size(group)
    if size < 2:  # nobody to disagree with
        _advance(state, end)
        return True
    torch = sys.modules["torch"]
    device, context = _collective_device(dist, group, device_ids)
    with context:
        # One small collective first: in steady state nobody has anything new, and this is all a
        # check costs.  The objects travel only when some rank has new choices.
        most = state.flag
        if most is None or most.device != device:
            most = state.flag = torch.zeros(1, dtype=torch.int64, device=device)
        most.fill_(len(payload))
        dist.all_reduce(most, op=dist.ReduceOp.MAX, group=group)
        if int(most.item()) == 0:
            _advance(state, end)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("verify in group of %d at %s: nothing new", size, where)
            return True
        gathered: list = [None] * size
        dist.all_gather_object(gathered, payload, group=group)
    _advance(state, end)
    ranks = dist.get_process_group_ranks(group)
    with _state_lock:
        conflicts = compare(gathered, ranks, state.reference)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("verify in group of %d at %s: sent %d, received %d, %d conflicts", size, where,
                     len(payload), sum(len(p) for p in gathered), len(conflicts))
    if not conflicts:
        if dist.get_rank(group) == 0:  # the success line; only checks that compared new entries log it
            logger.info("autotune choices agree across the ranks of group %s at %s: %d kernel/key entries checked, "
                        "all agree", _rank_list(ranks), where, len(state.reference))
        return True
    message = report(conflicts, ranks, where)
    if dist.get_rank(group) == 0:
        logger.error("%s", message)
    policy = _installed_policy()
    if policy is not None and policy.verify_strict:
        raise ChoiceMismatchError(message)
    return False


def _advance(state: _GroupState, end: int) -> None:
    with _state_lock:
        state.cursor = max(state.cursor, end)


_CPU = None  # torch.device("cpu"), made on first use (torch is not imported here at start-up)


def _collective_device(dist, group, device_ids):
    """Where the check's tensors live, and a context that makes it the current device.

    Object collectives on NCCL stage their bytes on ``torch.cuda.current_device()``.  The check
    uses the device the barrier itself used (torch's own order: the barrier's ``device_ids``,
    the device bound by ``init_process_group(device_id=...)``, else the current device), so it
    touches no GPU that the rank's own barrier did not."""
    from contextlib import nullcontext

    global _CPU
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    torch = sys.modules["torch"]
    if _CPU is None:
        _CPU = torch.device("cpu")
    try:
        kind = c10d._get_object_coll_device(group)
    except Exception:  # older torch: NCCL is the one backend without CPU tensors
        kind = "cuda" if str(dist.get_backend(group)) == "nccl" else "cpu"
    if kind == "cpu":
        return _CPU, nullcontext()
    index = None
    if device_ids:
        index = int(device_ids[0])
    else:
        bound = getattr(group, "bound_device_id", None)
        if bound is not None:
            index = bound.index
    if kind == "cuda":
        if index is None:
            index = torch.cuda.current_device()
        return torch.device("cuda", index), torch.cuda.device(index)
    return (torch.device(kind, index) if index is not None else torch.device(kind)), nullcontext()


# --- comparing and reporting (plain data) -------------------------------------------------------

def compare(payloads, ranks, reference: dict) -> dict:
    """Compare what the ranks of a group sent in one check.

    ``payloads[i]`` is the list of ``(entry, signature)`` pairs that group rank ``i`` (global rank
    ``ranks[i]``) sent; ``reference`` maps each entry the group saw in earlier checks to
    ``(signature, first rank)`` and is updated in place.  Returns the offending entries:
    entry -> list of ``(signature, ranks, earlier)`` where ``earlier`` marks the group's earlier
    value.  An entry only some ranks sent is compared among those and with the earlier value."""
    arrived: dict[str, dict[str, list[int]]] = {}
    for rank, payload in zip(ranks, payloads):
        for entry, signature in payload or ():
            arrived.setdefault(entry, {}).setdefault(signature, []).append(rank)
    conflicts = {}
    for entry, by_signature in arrived.items():
        known = reference.get(entry)
        if known is None:
            if len(by_signature) > 1:
                conflicts[entry] = [(sig, rs, False) for sig, rs in by_signature.items()]
            # what the group's lowest rank ran is the value later arrivals are compared with
            first_sig, first_ranks = min(by_signature.items(), key=lambda item: min(item[1]))
            reference[entry] = (first_sig, min(first_ranks))
        elif set(by_signature) != {known[0]}:
            earlier = [(known[0], [known[1]], True)]
            conflicts[entry] = earlier + [(sig, rs, False) for sig, rs in by_signature.items() if sig != known[0]] + \
                [(sig, rs, False) for sig, rs in by_signature.items() if sig == known[0]]
    return conflicts


def report(conflicts: dict, ranks, where: str, limit: int = REPORT_ENTRIES) -> str:
    """One message naming each offending kernel and key and what each rank ran (the first
    ``limit`` entries, and a count)."""
    lines = [f"autotune choices differ across the ranks of group {_rank_list(ranks)} at {where}: "
             f"{len(conflicts)} kernel/key entr{'y disagrees' if len(conflicts) == 1 else 'ies disagree'}"]
    for entry in sorted(conflicts)[:limit]:
        arch, _, rest = entry.partition("|")
        kernel, _, key = rest.partition("|")
        values = "; ".join(
            f"{'an earlier check, ' if earlier else ''}rank{'s' if len(rs) > 1 else ''} {_rank_list(rs)}: {sig}"
            for sig, rs, earlier in conflicts[entry]
        )
        lines.append(f"  {kernel} key ({key}) arch {arch}: {values}")
    if len(conflicts) > limit:
        lines.append(f"  ... and {len(conflicts) - limit} more")
    return "\n".join(lines)


def _rank_list(ranks, limit: int = 8) -> str:
    ranks = sorted(ranks)
    text = ",".join(str(r) for r in ranks[:limit])
    return text + (f",... ({len(ranks)} ranks)" if len(ranks) > limit else "")


# --- the job's c10d Store (consensus) ---------------------------------------------------------
# Coordination goes through the Store that torchrun (or init_process_group) already started, never
# through a collective at the moment of choice: ranks reach kernels at different times, and
# pipeline or expert ranks run different kernels, so a collective there would deadlock.

_STORE_PREFIX = "autotune_guard/"
# Waiting polls ``check`` instead of calling ``Store.wait``: a TCPStore client serves one request
# at a time, so a blocking wait would hold up every other user of the same client in this process
# (the process group itself, other threads) for as long as it waits (measured: a set() issued
# during a 2 s wait took 1.8 s), and each timed-out wait logs C++ socket warnings.  A poll is one
# round trip; the interval grows to _POLL_MAX_S, which bounds the extra latency after a publish.
_POLL_MIN_S = 0.002
_POLL_MAX_S = 0.05


class StoreError(RuntimeError):
    """The job's Store failed (unreachable, closed); a timeout is not an error here."""


def _store_key(name: str) -> str:
    # No attempt number in the key: torchrun gives every restart a fresh Store, and a counter
    # per agent may differ between nodes (one that joined later), which would split the job.
    return _STORE_PREFIX + name


def job_store():
    """The default process group's Store, or None when this process is not distributed.

    torch has no public accessor for it (2.13 included), hence ``_get_default_store``.  When the
    group exists but its Store cannot be had, say so: carrying on as if not distributed would let
    ranks choose on their own while the user asked them to agree.
    """
    dist = initialized_dist()
    if dist is None:
        return None
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store()
    except Exception as exc:
        raise StoreError(f"the default process group is initialized but its Store cannot be reached "
                         f"(torch.distributed.distributed_c10d._get_default_store: {exc!r})") from exc


def store_claim(store, name: str, rank: int) -> bool:
    """Atomically claim ``name``; True for exactly one caller in the job (any thread of any rank).

    The winner then names itself under ``name/owner``, so that a rank whose wait runs out can say
    which rank died or hung.
    """
    try:
        won = store.add(_store_key(name + "/claim"), 1) == 1
        if won:
            store.set(_store_key(name + "/owner"), str(rank))
        return won
    except Exception as exc:
        raise StoreError(f"claiming {name}: {exc}") from exc


def store_owner(store, name: str) -> int | None:
    """The rank that claimed ``name``, if it named itself (never blocks)."""
    value = store_get(store, name + "/owner")
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def store_set(store, name: str, value: str) -> None:
    try:
        store.set(_store_key(name), value)
    except Exception as exc:
        raise StoreError(f"publishing {name}: {exc}") from exc


def store_get(store, name: str) -> str | None:
    """The value under ``name`` now, or None when there is none yet (never blocks)."""
    key = _store_key(name)
    try:
        if not store.check([key]):
            return None
        return store.get(key).decode()
    except Exception as exc:
        raise StoreError(f"reading {name}: {exc}") from exc


def store_wait(store, name: str, timeout_s: float) -> str | None:
    """The value published under ``name``, or None when none came within ``timeout_s`` seconds;
    StoreError when the Store itself fails.  Explicit deadline: the Store's own timeout (the
    process group's, often 10 or 30 minutes) plays no part."""
    import time

    deadline = time.monotonic() + timeout_s
    interval = _POLL_MIN_S
    while True:
        value = store_get(store, name)
        if value is not None:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(interval, left))
        interval = min(interval * 1.5, _POLL_MAX_S)
