"""The last test of the session (hence the name): the consensus job that conftest.py's
``long_claimer`` started with the session, whose claimer tunes one key for 10 minutes (4
candidates of 150 s, and the GIL held for 30 s inside a C call before the first). Every rank
waits for it, however long, and none is declared dead; the job agrees and times each candidate once.
"""

import pytest

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)


def test_a_claimer_that_tunes_one_key_for_10_minutes_is_waited_for(long_claimer):
    if long_claimer is None:
        pytest.skip("GUARD_LONG=1 starts it (scripts/test.sh does, for its first Triton)")
    ranks = long_claimer.wait(timeout=1500).passed(4)
    assert sum(r["timed"] for r in ranks) == 4 and len({r["hash"] for r in ranks}) == 1, ranks
    assert long_claimer.seconds >= 600 and min(r["wall_s"] for r in ranks) >= 600, ranks
