"""Split tuning's rules (``core.consensus``): plain functions of their inputs, the same on every rank."""

import math

import pytest

from autotune_guard.core import consensus as rules
from autotune_guard.core.errors import ConsensusError

SIGS = [f"BLOCK={b},num_warps={w}" for b in (32, 64, 128, 256) for w in (1, 2)]


def test_shares_cover_every_candidate_once_whatever_the_order_and_depend_on_name_list_and_arrivals():
    for members in (1, 2, 3, 4, 8, 9):
        shares = rules.split_shares("consensus/x", SIGS, members)
        assert sorted(shares) == list(range(1, members + 1))
        dealt = [s for share in shares.values() for s in share]
        assert sorted(dealt) == sorted(SIGS) and len(dealt) == len(SIGS)
        assert max(map(len, shares.values())) - min(map(len, shares.values())) <= 1
        assert rules.split_shares("consensus/x", SIGS[::-1] + SIGS[:2], members) == shares  # order, duplicates
    starts = {tuple(rules.split_shares(f"consensus/{n}", SIGS, 3)[1]) for n in range(20)}
    assert len(starts) > 1  # the name picks which slot is dealt first


def test_rosters_and_shares_round_trip_and_garbage_is_named():
    roster = rules.decode_split(rules.encode_roster(3, SIGS[::-1]), "k", "r", "members")
    assert roster["members"] == 3 and roster["candidates"] == sorted(SIGS)
    assert roster["candidates_hash"] == rules.candidates_hash(SIGS)
    share = rules.decode_split(rules.encode_share(2, 5, {"a": 1.5, "b": math.inf}), "k", "s", "timings")
    assert rules.share_timings(share, "k", "s") == {"a": 1.5, "b": math.inf}
    failed = rules.decode_split(rules.encode_share(2, 5, None, "RuntimeError('oom')"), "k", "s", "timings")
    with pytest.raises(ConsensusError, match=r"rank 5 failed while timing its share .*oom"):
        rules.share_timings(failed, "k", "s")
    for garbage in ("not json", "[]", '{"format": "other"}', '{"format": "autotune_guard.split/1"}'):
        with pytest.raises(ConsensusError, match="holds at the/key a value this version cannot read"):
            rules.decode_split(garbage, "k", "the/key", "timings")
    bad = '{"format": "autotune_guard.split/1", "timings": {"a": "fast"}}'
    with pytest.raises(ConsensusError, match="not numbers"):
        rules.share_timings(rules.decode_split(bad, "k", "s", "timings"), "k", "s")
