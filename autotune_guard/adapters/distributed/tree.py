"""The check's transport: a binomial tree over the members of a group, one two-member gloo group
per tree edge, each made at its first use.

Group rank ``r``'s parent is ``r`` with its lowest set bit cleared; its children are ``r + 2**k``
for every ``2**k`` below that bit. A rank holds at most ``ceil(log2 N) + 1`` connections (N - 1
edges in all, where a full-mesh group has N(N-1)/2), and a reduce or a broadcast is
``ceil(log2 N)`` hops deep. torchrun numbers the ranks of a node consecutively, so the low levels
of the tree stay on the node. An edge is made when the data first flows along it (a parent waits
for its children before its own parent), so making them can never deadlock.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta


def parent_of(rank: int) -> int | None:
    return rank & (rank - 1) if rank else None


def children_of(rank: int, size: int) -> list[int]:
    """The children in the order a reduce receives from them (the smallest subtree first)."""
    found, step = [], 1
    while rank + step < size and (rank == 0 or step < (rank & -rank)):
        found.append(rank + step)
        step <<= 1
    return found


def depth(size: int) -> int:
    return max(0, (size - 1).bit_length())


class Tree:
    """This rank's place in the tree of one group: its edges, made lazily under ``store``."""

    def __init__(self, dist, store, rank: int, size: int, timeout_s: float):
        self.dist, self.store, self.rank, self.size = dist, store, rank, size
        self.timeout = timedelta(seconds=timeout_s)
        self.parent = parent_of(rank)
        self.children = children_of(rank, size)
        self.edges: dict[int, object] = {}  # peer group rank -> its two-member ProcessGroupGloo

    def _edge(self, peer: int):
        edge = self.edges.get(peer)
        if edge is None:
            low, high = min(peer, self.rank), max(peer, self.rank)
            prefix = self.dist.PrefixStore(f"edge/{low}-{high}/", self.store)
            edge = self.edges[peer] = self.dist.ProcessGroupGloo(prefix, int(self.rank == high), 2, self.timeout)
        return edge

    def _send(self, peer: int, tensor) -> None:
        self._edge(peer).send([tensor], 1 - int(self.rank > peer), 0).wait()

    def _recv(self, peer: int, tensor) -> None:
        self._edge(peer).recv([tensor], 1 - int(self.rank > peer), 0).wait()

    def send_bytes(self, peer: int, data: bytes, moved: list) -> None:
        torch = sys.modules["torch"]
        self._send(peer, torch.tensor([len(data)], dtype=torch.int64))
        if data:
            self._send(peer, torch.frombuffer(bytearray(data), dtype=torch.uint8))
        moved[0] += 8 + len(data)

    def recv_bytes(self, peer: int, moved: list) -> bytes:
        torch = sys.modules["torch"]
        length = torch.zeros(1, dtype=torch.int64)
        self._recv(peer, length)
        count = int(length.item())
        moved[1] += 8 + count
        if not count:
            return b""
        buffer = torch.empty(count, dtype=torch.uint8)
        self._recv(peer, buffer)
        return bytes(buffer.numpy().tobytes())

    def all_reduce_max(self, tensor, moved: list):
        """``tensor`` (int64) reduced by elementwise MAX up the tree, then the result down it; in place."""
        torch = sys.modules["torch"]
        width = 8 * tensor.numel()
        for child in self.children:
            theirs = torch.empty_like(tensor)
            self._recv(child, theirs)
            torch.maximum(tensor, theirs, out=tensor)
            moved[1] += width
        if self.parent is not None:
            self._send(self.parent, tensor)
            self._recv(self.parent, tensor)
            moved[0] += width
            moved[1] += width
        for child in self.children:
            self._send(child, tensor)
            moved[0] += width
        return tensor

    def merge_up(self, mine, merge, encode, decode, moved: list):
        """Every member's ``mine`` combined by ``merge(a, b)`` up the tree: the whole on group rank 0,
        None elsewhere. ``encode``/``decode`` give and read the JSON-able wire form."""
        for child in self.children:
            mine = merge(mine, decode(json.loads(self.recv_bytes(child, moved).decode())))
        if self.parent is None:
            return mine
        self.send_bytes(self.parent, json.dumps(encode(mine)).encode(), moved)
        return None

    def broadcast_down(self, value, moved: list):
        """Group rank 0's JSON-able ``value`` on every member, decoded from the wire on each (the
        root's too, so that all hold the same)."""
        data = json.dumps(value).encode() if self.parent is None else self.recv_bytes(self.parent, moved)
        for child in self.children:
            self.send_bytes(child, data, moved)
        return json.loads(data.decode())
