"""The collectives of a check: the guard's own gloo group per program group, and the wire protocol.

Fixed-size first: one int (how many new choices the most loaded rank has), then, only when some
rank has any, one all_reduce of per-bucket hashes; entries travel (to the group's first rank,
then its verdict to all) only for the buckets whose hashes differ. On a group of the guard's own,
so a check never shares a sequence with the program's collectives nor touches its GPU or streams.
On the wire a pair is ``[[arch, kernel, key], signature]`` (JSON).
"""

from __future__ import annotations

import json
import sys

from ...core.agreement import BUCKETS
from ...core.consensus import attempt_scope
from ...core.model import ChoiceKey

CHECK_TIMEOUT_S = 300.0  # the guard's group gives up (named) when a check does not complete


def guard_group(dist, group, state):
    """The guard's gloo group over the members of ``group``, made at its first check (every member
    is there) from the job's Store under a name of the guard's; torch's group registry and counter
    are left alone."""
    if state.guard is None:
        from datetime import timedelta

        from torch.distributed.distributed_c10d import _get_default_store

        store = dist.PrefixStore(f"autotune_guard/verify/{attempt_scope()}/{group.group_name}/", _get_default_store())
        state.guard = dist.ProcessGroupGloo(store, dist.get_rank(group), dist.get_world_size(group),
                                            timedelta(seconds=CHECK_TIMEOUT_S))
    return state.guard


def exchange(guard, size: int, digests: list, hashed: dict):
    """One check's hash exchange on ``guard`` (``size`` ranks, all calling it at the same point).
    ``digests``: the group's per-bucket hashes (equal on every member); ``hashed``: this rank's new
    pairs -> (bucket, hash).

    Returns ``(differ, gathered, moved)``: the buckets whose views differ (None when no rank had
    anything new), on the first rank every member's new pairs in those buckets in group-rank order
    (elsewhere []), and ``[bytes sent, bytes received]`` by this rank, payloads only."""
    import torch

    most = torch.tensor([len(hashed)], dtype=torch.int64)
    _all_reduce_max(guard, most)
    moved = [8, 8]
    if int(most.item()) == 0:  # steady state: this one int is the whole check
        return None, [], moved
    view = list(digests)
    for bucket, value in hashed.values():
        view[bucket] ^= value
    vector = torch.tensor(view + [-v for v in view], dtype=torch.int64)  # MAX of (h, -h): max and min
    _all_reduce_max(guard, vector)
    reduced = vector.tolist()
    differ = {b for b in range(BUCKETS) if reduced[b] != -reduced[BUCKETS + b]}
    moved = [moved[0] + 16 * BUCKETS, moved[1] + 16 * BUCKETS]
    if not differ:
        return differ, [], moved
    sent = sorted(pair for pair, (bucket, _) in hashed.items() if bucket in differ)
    return differ, to_first_rank(guard, sent, size, moved), moved


def _all_reduce_max(guard, tensor) -> None:
    dist = sys.modules["torch.distributed"]
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.MAX
    guard.allreduce([tensor], options).wait()


def encode_pairs(pairs) -> list:
    return [[list(key), signature] for key, signature in pairs]


def decode_pairs(items) -> list[tuple[ChoiceKey, str]]:
    return [(ChoiceKey(*key), signature) for key, signature in items]


def to_first_rank(guard, pairs, size: int, moved: list) -> list:
    """Every member's ``pairs`` at group rank 0, in group-rank order (elsewhere []). Sizes go by
    ``gather``; only members with something to say send it, so nothing is padded."""
    dist, torch = sys.modules["torch.distributed"], sys.modules["torch"]
    first = guard.rank() == 0
    data = json.dumps(encode_pairs(pairs)).encode()
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
    gathered = [list(pairs)]
    for member in range(1, size):
        count = int(lengths[member].item())
        if not count:
            gathered.append([])
            continue
        buffer = torch.empty(count, dtype=torch.uint8)
        guard.recv([buffer], member, 0).wait()
        gathered.append(decode_pairs(json.loads(bytes(buffer.tolist()).decode())))
        moved[1] += count
    moved[1] += 8 * size
    return gathered


def broadcast_verdict(guard, verdict, moved: list):
    """Group rank 0's ``verdict`` (JSON-able) on every member, decoded from the wire on each (the
    first rank's too, so all hold the same)."""
    torch = sys.modules["torch"]
    first = guard.rank() == 0
    data = json.dumps(verdict).encode() if first else b""
    length = torch.tensor([len(data)], dtype=torch.int64)
    guard.broadcast([length]).wait()
    buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8) if first else \
        torch.empty(int(length.item()), dtype=torch.uint8)
    guard.broadcast([buffer]).wait()
    moved[0 if first else 1] += 8 + int(length.item())
    return json.loads(data.decode() if first else bytes(buffer.tolist()).decode())
