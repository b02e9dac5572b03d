"""The collectives of a check: the guard's own tree per program group (``tree``), and the wire protocol.

Fixed-size first: one int (how many new choices the most loaded rank has), then, only when some
rank has any, one all_reduce of per-bucket hashes; entries travel only for the buckets whose hashes
differ, merged on their way up the same tree (an entry's value once, with the ranks that ran it),
and the first rank's verdict comes back down it. On connections of the guard's own, so a check
never shares a sequence with the program's collectives nor touches its GPU or streams.
On the wire a pair is ``[[arch, kernel, key], signature]`` and what ranks ran is
``[[arch, kernel, key], signature, [[first, last], ...]]`` (JSON).
"""

from __future__ import annotations

import os
import sys

from ...core.agreement import BUCKETS, merge_arrived
from ...core.consensus import attempt_scope
from ...core.errors import StoreError
from ...core.model import ChoiceKey
from .store import job_store
from .tree import Tree

CHECK_TIMEOUT_S = 300.0  # the guard's connections give up (named) when a check does not complete


def guard_group(dist, group, state):
    """This rank's place in the guard's tree over the members of ``group``, made at its first
    check (every member is there); its edges connect through the job's Store under names of the
    guard's, at their first use (``store.job_store``: the one way to it, consensus's too). torch's
    group registry and counter are left alone."""
    if state.guard is None:
        job = job_store(node=False)
        if job is None:  # a check runs inside a group, so this is a group torch reports as gone
            raise StoreError("the default process group is not initialized: no Store to connect the check's tree")
        store = dist.PrefixStore(f"autotune_guard/verify/{attempt_scope(os.environ)}/{group.group_name}/", job)
        state.guard = Tree(dist, store, dist.get_rank(group), dist.get_world_size(group), CHECK_TIMEOUT_S)
    return state.guard


def exchange(tree, ranks, digests: list, hashed: dict):
    """One check's hash exchange on ``tree`` (the group's global ``ranks``, all calling it at the
    same point). ``digests``: the group's per-bucket hashes (equal on every member); ``hashed``:
    this rank's new pairs -> (bucket, hash).

    Returns ``(differ, arrived, moved)``: the buckets whose views differ (None when no rank had
    anything new), on the first rank what every member brought in those buckets (entry ->
    signature -> set of global ranks; elsewhere None), and ``[bytes sent, bytes received]`` by
    this rank, payloads only."""
    torch = sys.modules["torch"]
    moved = [0, 0]
    most = tree.all_reduce_max(torch.tensor([len(hashed)], dtype=torch.int64), moved)
    if int(most.item()) == 0:  # steady state: this one int is the whole check
        return None, None, moved
    view = list(digests)
    for bucket, value in hashed.values():
        view[bucket] ^= value
    vector = torch.tensor(view + [-v for v in view], dtype=torch.int64)  # MAX of (h, -h): max and min
    reduced = tree.all_reduce_max(vector, moved).tolist()
    differ = {b for b in range(BUCKETS) if reduced[b] != -reduced[BUCKETS + b]}
    if not differ:
        return differ, None, moved
    me = ranks[tree.rank]
    mine: dict = {}
    for (key, signature), (bucket, _) in hashed.items():
        if bucket in differ:
            mine.setdefault(key, {})[signature] = {me}
    return differ, tree.merge_up(mine, merge_arrived, encode_arrived, decode_arrived, moved), moved


def encode_pairs(pairs) -> list:
    return [[list(key), signature] for key, signature in pairs]


def decode_pairs(items) -> list[tuple[ChoiceKey, str]]:
    return [(ChoiceKey(*key), signature) for key, signature in items]


def encode_arrived(arrived: dict) -> list:
    """entry -> signature -> ranks, with each rank set as inclusive ranges (a node, a block of
    ranks, the whole group: a few numbers whatever its size)."""
    return [[list(key), signature, _ranges(ranks)] for key, values in sorted(arrived.items())
            for signature, ranks in sorted(values.items())]


def decode_arrived(items) -> dict:
    arrived: dict = {}
    for key, signature, ranges in items:
        arrived.setdefault(ChoiceKey(*key), {})[signature] = {r for first, last in ranges for r in range(first, last + 1)}
    return arrived


def _ranges(ranks) -> list:
    found: list = []
    for rank in sorted(ranks):
        if found and found[-1][1] == rank - 1:
            found[-1][1] = rank
        else:
            found.append([rank, rank])
    return found
