"""Everything that touches ``torch.distributed``: rank, barrier-fired verification (its rules are
``verification``), the job's Store.

torch is never imported from here at start-up: each function looks at ``sys.modules`` first, so
a process that never imported torch.distributed pays nothing.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from . import state as shared
from .consensus import StoreError  # job_store raises it
# The rules of a check (plain data); ChoiceMismatchError and BUCKETS are also read from here.
from .verification import BUCKETS, ChoiceMismatchError, GroupState, compare, learn, pair_hash as _pair_hash, rank_list, report

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
# Three rules keep a check from ever hanging a job or touching its numbers:
# * The cadence is read from the environment once, when torch.distributed is imported (the
#   post-import hook that wraps the barriers), and barriers are counted from then on, per group,
#   whether or not Triton was imported and whatever install() did later: every rank of a group
#   counts the same barriers, so all of them check at the same one.
# * The check's collectives run on a gloo process group of the guard's own, built from the job's
#   Store for each of the program's groups at its first check (all its members are there), so they
#   never share a sequence with the program's collectives nor touch its GPU or streams.  Should
#   ranks ever disagree on a check anyway, it ends in that group's timeout, named, never in a
#   program collective paired with the guard's.
# * What travels is fixed-size first: one int (how many new choices the rank has), then, only
#   when some rank has any, one all_reduce of per-bucket hashes of what each rank has seen; the
#   entries themselves are gathered only for the buckets whose hashes differ (the rules:
#   ``verification``).

CHECK_TIMEOUT_S = 300.0  # the guard's group gives up (named) when a check does not complete

_taken: list[tuple[str, str]] = []  # (arch|kernel|key, config signature), in the order chosen
_groups = None  # ProcessGroup -> GroupState (weak keys: a destroyed group takes its state along)
_groups_by_id: dict = {}  # for group objects that cannot be weakly referenced
_state_lock = threading.Lock()
_hook_registered = False
_startup = None  # (every, strict, error): the cadence read from the environment, once
last_check: dict = {}  # what the latest check moved (bytes sent/received per rank): benchmarks read it


def startup_cadence() -> tuple[int, bool]:
    """``(AUTOTUNE_VERIFY_EVERY, AUTOTUNE_VERIFY_STRICT)`` as the environment (and
    ``AUTOTUNE_ENV_FILE``) gave them when torch.distributed was first imported; fixed from then on.
    A bad value raises here, naming the variable: at the first barrier that would have counted."""
    global _startup
    if _startup is None:
        from . import policy

        try:
            settings, env_file = policy.settings_from_environment()
            chosen = {k: settings[k] for k in ("AUTOTUNE_VERIFY_EVERY", "AUTOTUNE_VERIFY_STRICT") if k in settings}
            parsed = policy.policy_from_settings({**chosen, "AUTOTUNE_MODE": "auto"}, env_file=env_file)
            _startup = (parsed.verify_every, parsed.verify_strict, None)
        except Exception as exc:  # PolicyError: named by the parser
            _startup = (0, False, exc)
    every, strict, error = _startup
    if error is not None:
        raise error
    return every, strict


def wrap_barriers(module=None) -> None:
    """Post-import hook of ``torch.distributed``: read the cadence and wrap ``barrier`` and
    ``monitored_barrier`` in place, whatever the order of imports and of ``install()``; idempotent.

    From here on barriers are counted per group, with or without a policy or Triton."""
    try:
        import wrapt

        startup_cadence()
    except Exception as exc:  # a post-import hook that raises would fail `import torch` itself
        logger.error("%s", exc)  # and again, raised, at the first barrier
    try:
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
    except Exception as exc:
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


def on_install(policy) -> None:
    """Called by every ``install()``.  Wraps the barriers when the policy arrives by the API rather
    than through the environment's import hook.  Barrier counts and what each group agreed on are
    kept: a rank that installs a policy (alone, or later than the others) must still check at the
    same barriers as the rest of its group.  A cadence given to install() that differs from the
    start-up one is named, not applied."""
    global _hook_registered
    if "torch.distributed" in sys.modules:
        wrap_barriers(sys.modules["torch.distributed"])
    elif not _hook_registered:
        import wrapt

        _hook_registered = True
        wrapt.register_post_import_hook(wrap_barriers, "torch.distributed")
    if policy is not None and _startup is not None and _startup[2] is None and policy.verify_every != _startup[0]:
        logger.warning("AUTOTUNE_VERIFY_EVERY=%d given to install() is not applied: checks follow the value the "
                       "environment gave at start-up (%d), so that every rank counts the same barriers",
                       policy.verify_every, _startup[0])


def _barrier_every() -> int:
    """The start-up cadence (a tuple read on every barrier); the named error of a bad value."""
    startup = _startup
    if startup is None or startup[2] is not None:
        return startup_cadence()[0]
    return startup[0]


def _after_barrier(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    every = _barrier_every()
    if not every:
        return result
    # barrier(group=None, async_op=False, device_ids=None, timeout=None)
    if kwargs.get("async_op", args[1] if len(args) > 1 else False):
        # The barrier has not completed yet and the caller asked not to block: no check, and no
        # count either (every rank of the group makes the same calls, so all skip alike).
        return result
    _count_and_check(kwargs.get("group", args[0] if args else None), every)
    return result


def _after_monitored_barrier(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    every = _barrier_every()
    if every:
        _count_and_check(kwargs.get("group", args[0] if args else None), every)
    return result


def _count_and_check(group, every: int) -> None:
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
        _check(dist, group, f"barrier {count} of this group")


def verify_choices(group=None) -> bool:
    """Compare the autotune choices of the ranks of ``group`` (default: the whole job).

    Call it where every rank of the group arrives, like a barrier.  Only the choices this rank
    made since the group's previous check are compared, with each other and with what the group
    saw before; once every kernel and key has been seen a check is one all_reduce of one int.  A
    key that some ranks never ran is not a conflict.  Returns True when the ranks agree (and
    without a process group, or on a rank outside ``group``: nothing to compare); False after
    logging the disagreement on the group's first rank; with ``AUTOTUNE_VERIFY_STRICT=1`` raises
    :class:`ChoiceMismatchError` on every rank instead.
    """
    return _check_in(group, "verify_choices()", nothing_to_compare=True)


def maybe_verify_choices(iteration: int, group=None) -> bool | None:
    """:func:`verify_choices` at every ``AUTOTUNE_VERIFY_EVERY``-th ``iteration`` (the start-up
    cadence, the same on every rank); None when no check ran (no cadence, not due, no process
    group, a rank outside ``group``), so a caller can tell "agreed" from "not asked"."""
    every = startup_cadence()[0]
    if not every or iteration % every:
        return None
    return _check_in(group, f"iteration {iteration}", nothing_to_compare=None)


def _check_in(group, where: str, nothing_to_compare):
    """A check in ``group`` now; ``nothing_to_compare`` without a process group or on a rank
    outside ``group``."""
    dist = initialized_dist()
    resolved = _resolve(dist, group) if dist is not None else None
    if resolved is None:
        return nothing_to_compare
    return _check(dist, resolved, where)


def _installed_policy():
    return shared.now.policy


def _resolve(dist, group):
    """The group object a barrier of ``group`` ran in, or None when this rank is outside it."""
    if group is None:
        return dist.group.WORLD
    if dist.get_rank(group) < 0:
        return None
    return group


def _state_for(group) -> GroupState:
    global _groups
    with _state_lock:
        if _groups is None:
            import weakref

            _groups = weakref.WeakKeyDictionary()
        try:
            state = _groups.get(group)
            if state is None:
                state = _groups[group] = GroupState()
        except TypeError:  # not weakly referenceable
            state = _groups_by_id.setdefault(id(group), GroupState())
        return state


def _check(dist, group, where: str) -> bool:
    """One check in ``group`` (every rank of it calls this at the same point)."""
    state = _state_for(group)
    with _state_lock:
        for entry, value in shared.take_unverified().items():
            _taken.append((entry, value.split(";", 1)[0]))  # the config, not how it was chosen
        for pair in _taken[state.cursor:]:
            if pair not in state.known:
                state.pending.add(pair)
        state.cursor = len(_taken)
        pending = sorted(state.pending)
    ranks = dist.get_process_group_ranks(group)
    size = len(ranks)
    hashed = {pair: _pair_hash(*pair) for pair in pending}
    if size < 2:  # nobody to disagree with
        with _state_lock:
            for pair in pending:
                learn(state, pair)
                state.reference.setdefault(pair[0], (pair[1], ranks[0] if ranks else 0))
            state.pending.clear()
        return True
    try:
        differ, gathered, moved = exchange(_guard_group(dist, group, state), size, state.digests, hashed)
    except Exception as exc:
        raise RuntimeError(f"autotune_guard: the choice check at {where} in group {rank_list(ranks)} did not complete "
                           f"on every rank ({exc}); the program's own collectives are not affected") from exc
    if differ is None:
        last_check.update(sent=moved[0], received=moved[1], buckets=0, gathered=0)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("verify in group of %d at %s: nothing new", size, where)
        return True
    sent = [pair for pair in pending if hashed[pair][0] in differ]
    with _state_lock:
        # Buckets whose views agree: every rank brought the same new pairs there.
        for pair in pending:
            if hashed[pair][0] not in differ:
                learn(state, pair)
                known = state.reference.get(pair[0])
                if known is None or known[0] != pair[1]:
                    state.reference[pair[0]] = (pair[1], ranks[0])
        state.pending.clear()
        verdict = None
        if differ and dist.get_rank(group) == 0:  # the group's first rank compares and tells the others
            reference = dict(state.reference)
            conflicts = compare(gathered, ranks, reference)
            verdict = {"pairs": sorted({tuple(p) for payload in gathered for p in payload}),
                       "reference": {e: v for e, v in reference.items() if state.reference.get(e) != v},
                       "conflicts": len(conflicts), "report": report(conflicts, ranks, where) if conflicts else None}
    if differ:
        try:
            verdict = _broadcast_verdict(state.guard, verdict, moved)
        except Exception as exc:
            raise RuntimeError(f"autotune_guard: the choice check at {where} in group {rank_list(ranks)} did not "
                               f"complete on every rank ({exc}); the program's own collectives are not affected") from exc
        with _state_lock:
            for entry, (signature, rank) in verdict["reference"].items():
                state.reference[entry] = (signature, rank)
            for pair in verdict["pairs"]:
                learn(state, tuple(pair))
    last_check.update(sent=moved[0], received=moved[1], buckets=len(differ), gathered=len(sent))
    if logger.isEnabledFor(logging.DEBUG):
        if differ:
            logger.debug("verify in group of %d at %s: sent %d, received %d, %d conflicts", size, where,
                         len(sent), len(verdict["pairs"]), verdict["conflicts"])
        else:
            logger.debug("verify in group of %d at %s: %d new entries agreed by their bucket hashes, nothing "
                         "gathered", size, where, len(pending))
    message = verdict and verdict["report"]
    if not message:
        if dist.get_rank(group) == 0:  # the success line: only checks where some rank brought new entries get here
            logger.info("autotune choices agree across the ranks of group %s at %s: %d kernel/key entries checked, "
                        "all agree", rank_list(ranks), where, len({entry for entry, _ in state.known}))
        return True
    if dist.get_rank(group) == 0:
        logger.error("%s", message)
    policy = _installed_policy()
    if startup_cadence()[1] or (policy is not None and policy.verify_strict):
        raise ChoiceMismatchError(message)
    return False


def _guard_group(dist, group, state: GroupState):
    """The guard's own gloo group over the members of ``group``, made at its first check (every
    member is at that check) from the job's Store under a name of the guard's; torch's registry
    of groups, and its group counter, are left alone."""
    if state.guard is None:
        from datetime import timedelta

        from torch.distributed.distributed_c10d import _get_default_store

        from .consensus import attempt_scope

        store = dist.PrefixStore(f"autotune_guard/verify/{attempt_scope()}/{group.group_name}/", _get_default_store())
        state.guard = dist.ProcessGroupGloo(store, dist.get_rank(group), dist.get_world_size(group),
                                            timedelta(seconds=CHECK_TIMEOUT_S))
    return state.guard


def exchange(guard, size: int, digests: list, hashed: dict):
    """The collectives of one check, on the guard's group ``guard`` of ``size`` ranks, every member
    calling it at the same point.  ``digests``: the group's per-bucket hashes of what it knows (the
    same on every member); ``hashed``: this rank's new pairs -> (bucket, hash).

    Returns ``(differ, gathered, moved)``: the buckets whose views differ (None when no rank had
    anything new: one all_reduce of one int was the whole check), on the group's first rank every
    member's new pairs in those buckets (in group-rank order; elsewhere, and when none differ,
    empty), and ``[bytes sent, bytes received]`` by this rank, payloads only.  Fixed-size unless
    some bucket differs; then only the first rank receives more than the group's verdict."""
    import torch

    # One int first: in steady state nobody has anything new, and this is all a check costs.
    most = torch.tensor([len(hashed)], dtype=torch.int64)
    _all_reduce_max(guard, most)
    moved = [8, 8]
    if int(most.item()) == 0:
        return None, [], moved
    # Per-bucket hashes of each rank's view; MAX of (h, -h) gives each bucket's max and min.
    view = list(digests)
    for bucket, value in hashed.values():
        view[bucket] ^= value
    vector = torch.tensor(view + [-v for v in view], dtype=torch.int64)
    _all_reduce_max(guard, vector)
    reduced = vector.tolist()
    differ = {b for b in range(BUCKETS) if reduced[b] != -reduced[BUCKETS + b]}
    moved = [moved[0] + 16 * BUCKETS, moved[1] + 16 * BUCKETS]
    if not differ:
        return differ, [], moved
    sent = sorted(pair for pair, (bucket, _) in hashed.items() if bucket in differ)
    return differ, _to_first_rank(guard, sent, size, moved), moved


def _all_reduce_max(guard, tensor) -> None:
    dist = sys.modules["torch.distributed"]
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.MAX
    guard.allreduce([tensor], options).wait()


def _to_first_rank(guard, pairs, size: int, moved: list) -> list:
    """Every member's ``pairs`` at group rank 0, in group-rank order (elsewhere: []).  Sizes go by
    ``gather``, and only members with something to say send it: nothing is padded, and a member
    receives nothing here."""
    import json

    dist, torch = sys.modules["torch.distributed"], sys.modules["torch"]
    first = guard.rank() == 0
    data = json.dumps(pairs).encode()
    length = torch.tensor([len(pairs) and len(data)], dtype=torch.int64)
    lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(size)] if first else []
    options = dist.GatherOptions()
    options.rootRank = 0
    guard.gather([lengths] if first else [], [length], options).wait()
    moved[0] += 8
    if not first:
        if pairs:
            guard.send([torch.frombuffer(bytearray(data), dtype=torch.uint8)], 0, 0).wait()
            moved[0] += len(data)
        return []
    gathered = [pairs]
    for member in range(1, size):
        count = int(lengths[member].item())
        if not count:
            gathered.append([])
            continue
        buffer = torch.empty(count, dtype=torch.uint8)
        guard.recv([buffer], member, 0).wait()
        gathered.append([tuple(p) for p in json.loads(bytes(buffer.tolist()).decode())])
        moved[1] += count
    moved[1] += 8 * size
    return gathered


def _broadcast_verdict(guard, verdict, moved: list):
    """Group rank 0's ``verdict`` (JSON-able) on every member."""
    import json

    torch = sys.modules["torch"]
    first = guard.rank() == 0
    data = json.dumps(verdict).encode() if first else b""
    length = torch.tensor([len(data)], dtype=torch.int64)
    guard.broadcast([length]).wait()
    buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8) if first else \
        torch.empty(int(length.item()), dtype=torch.uint8)
    guard.broadcast([buffer]).wait()
    moved[0 if first else 1] += 8 + int(length.item())
    return verdict if first else json.loads(bytes(buffer.tolist()).decode())


# --- the job's c10d Store (consensus) ---------------------------------------------------------
# Coordination goes through the Store that torchrun (or init_process_group) already started, never
# through a collective at the moment of choice: ranks reach kernels at different times, and
# pipeline or expert ranks run different kernels, so a collective there would deadlock.  The
# protocol itself is ``consensus.decide``.

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
