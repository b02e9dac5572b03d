"""The rules of the cross-rank check: bucket hashes, what a group knows, comparing, the message.

Plain data: imports neither Triton nor torch.  Where and how a check's collectives run is the
torch.distributed adapter's (``adapters.distributed``); what they carry and what the answer means is here.

Each group keeps the set of (entry, signature) pairs its ranks have agreed to have seen
(``known``, identical on every member) and its per-bucket hashes.  A rank's view of a bucket is
``known`` plus its own new pairs: equal views on every rank mean nothing new disagrees, and a
rank reaching a key late with the group's value adds nothing to its view.
"""

from __future__ import annotations

import hashlib

from .model import ChoiceKey

REPORT_ENTRIES = 5  # offending entries a report spells out; the rest are counted
BUCKETS = 256  # per-bucket hashes in a check with new choices: 2 x 256 int64 = 4 KiB each way
_HASH_MASK = (1 << 62) - 1  # hashes and their negations fit an int64


class GroupState:
    __slots__ = ("barriers", "cursor", "reference", "known", "digests", "pending", "guard", "disputed", "lone")

    def __init__(self):
        self.barriers = 0  # barrier calls of this group seen by this rank
        self.cursor = 0  # _taken[:cursor] has been looked at for this group
        # entry -> (signature, global rank that first reported it): what the group saw first for
        # each entry, so that a report can say what an earlier check found.
        self.reference: dict[ChoiceKey, tuple[str, int]] = {}
        self.known: set = set()  # (entry, signature) pairs the group has seen, the same on every member
        self.digests = [0] * BUCKETS  # XOR of the hashes of ``known`` by bucket
        self.pending: set = set()  # this rank's pairs not in ``known`` yet
        self.guard = None  # the guard's own ProcessGroupGloo for this group
        self.disputed: dict = {}  # entry -> (where found, what each rank ran): on the group's first rank, said later
        self.lone: set = set()  # entries one rank alone has met so far (nothing to compare): on the first rank


def pair_hash(key: ChoiceKey, signature: str) -> tuple[int, int]:
    """(bucket, hash) of one choice: the bucket by the key alone, so that two values of one
    kernel/key always meet in one bucket."""
    entry = key.text()
    bucket = int.from_bytes(hashlib.blake2b(entry.encode(), digest_size=4).digest(), "little") % BUCKETS
    value = int.from_bytes(hashlib.blake2b(f"{entry}\0{signature}".encode(), digest_size=8).digest(), "little")
    return bucket, value & _HASH_MASK


def learn(state: GroupState, pair) -> None:
    if pair not in state.known:
        state.known.add(pair)
        bucket, value = pair_hash(*pair)
        state.digests[bucket] ^= value


def compare(payloads, ranks, reference: dict) -> dict:
    """Compare what the ranks of a group sent in one check.

    ``payloads[i]`` is the list of ``(entry, signature)`` pairs that group rank ``i`` (global rank
    ``ranks[i]``) sent; ``reference`` maps each entry the group saw in earlier checks to
    ``(signature, first rank)`` and is updated in place.  Returns the offending entries:
    entry -> list of ``(signature, ranks, earlier)`` where ``earlier`` marks the group's earlier
    value.  An entry only some ranks sent is compared among those and with the earlier value."""
    arrived: dict = {}
    for rank, payload in zip(ranks, payloads):
        for entry, signature in payload or ():
            arrived.setdefault(entry, {}).setdefault(signature, set()).add(rank)
    return compare_arrived(arrived, reference)


def merge_arrived(ours: dict, theirs: dict) -> dict:
    """Two parts of a group's ``arrived`` (entry -> signature -> set of ranks) as one; ``ours`` is
    updated in place and returned."""
    for entry, values in theirs.items():
        mine = ours.setdefault(entry, {})
        for signature, ranks in values.items():
            mine.setdefault(signature, set()).update(ranks)
    return ours


def compare_arrived(arrived: dict, reference: dict) -> dict:
    """:func:`compare` on what arrived, merged: entry -> signature -> the ranks that sent it."""
    conflicts = {}
    for entry, found in arrived.items():
        by_signature = {signature: sorted(ranks) for signature, ranks in found.items()}
        known = reference.get(entry)
        if known is None:
            if len(by_signature) > 1:
                conflicts[entry] = [(sig, rs, False) for sig, rs in sorted(by_signature.items(), key=_lowest)]
            # what the group's lowest rank ran is the value later arrivals are compared with
            first_sig, first_ranks = min(by_signature.items(), key=_lowest)
            reference[entry] = (first_sig, first_ranks[0])
        elif set(by_signature) != {known[0]}:
            earlier = [(known[0], [known[1]], True)]
            ordered = sorted(by_signature.items(), key=_lowest)
            conflicts[entry] = earlier + [(sig, rs, False) for sig, rs in ordered if sig != known[0]] + \
                [(sig, rs, False) for sig, rs in ordered if sig == known[0]]
    return conflicts


def _lowest(item) -> int:
    return item[1][0]


def report(conflicts: dict, ranks, where: str, limit: int = REPORT_ENTRIES) -> str:
    """One message naming each offending kernel and key and what each rank ran (the first
    ``limit`` entries, and a count)."""
    lines = [f"autotune choices differ across the ranks of group {rank_list(ranks)} at {where}: "
             f"{len(conflicts)} kernel/key entr{'y disagrees' if len(conflicts) == 1 else 'ies disagree'}"]
    for entry in sorted(conflicts)[:limit]:
        arch, kernel, key = entry
        values = "; ".join(
            f"{'an earlier check, ' if earlier else ''}rank{'s' if len(rs) > 1 else ''} {rank_list(rs)}: {sig}"
            for sig, rs, earlier in conflicts[entry]
        )
        lines.append(f"  {kernel} key ({key}) arch {arch}: {values}")
    if len(conflicts) > limit:
        lines.append(f"  ... and {len(conflicts) - limit} more")
    return "\n".join(lines)


def rank_list(ranks, limit: int = 8) -> str:
    ranks = sorted(ranks)
    text = ",".join(str(r) for r in ranks[:limit])
    return text + (f",... ({len(ranks)} ranks)" if len(ranks) > limit else "")
