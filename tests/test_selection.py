"""The choice model, the pinned rule and the table lookup, as plain functions over plain data.

No Triton here: candidates are descriptors (``core.model``'s plain-data form of a Config) and
tables are real JSON files in a temporary directory.
"""

import json
import random

import pytest

from autotune_guard.core import model, pinned, schema, tables
from autotune_guard.core.errors import GuardError, SelectionError
from autotune_guard.core.model import Choice, ChoiceKey

DEFAULTS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
WHAT = "kernel pkg.mod.k key (1024,torch.float16) arch sm90"


def desc(num_warps=4, num_stages=3, **kwargs):
    return {"kwargs": kwargs, "num_warps": num_warps, "num_stages": num_stages, "num_ctas": 1, "maxnreg": None}


def select(candidates, *, entry=None, block_sizes=(), on_miss="min_cost"):
    return pinned.select(candidates, table_entry=entry, block_sizes=block_sizes, on_miss=on_miss,
                            defaults=DEFAULTS, what=WHAT)


# --- descriptors ------------------------------------------------------------------------------

def test_signature_is_canonical():
    a = {"kwargs": {"BLOCK_N": 32, "BLOCK_M": 64}, "num_warps": 2, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
    b = {"maxnreg": None, "num_ctas": 1, "num_stages": 3, "num_warps": 2, "kwargs": {"BLOCK_M": 64, "BLOCK_N": 32}}
    assert model.signature(a) == model.signature(b) == "BLOCK_M=64,BLOCK_N=32,num_warps=2,num_stages=3,num_ctas=1"
    assert model.signature(dict(a, maxnreg=128)).endswith(",maxnreg=128")


def test_static_cost_prefers_the_smallest_tile_then_fewer_warps_and_stages():
    small, wide, big = desc(BLOCK_M=32, BLOCK_N=32), desc(BLOCK_M=16, BLOCK_N=128), desc(BLOCK_M=64, BLOCK_N=64)
    assert sorted([big, wide, small], key=model.static_cost) == [small, wide, big]
    assert model.static_cost(desc(num_warps=2, B=64)) < model.static_cost(desc(num_warps=4, B=64))
    assert model.static_cost(desc(num_stages=2, B=64)) < model.static_cost(desc(num_stages=4, B=64))


def test_min_cost_does_not_depend_on_declaration_order():
    # Same tile (32*64 == 64*32), same options: only the signature can break the tie.
    candidates = [desc(BLOCK_M=32, BLOCK_N=64), desc(BLOCK_M=64, BLOCK_N=32), desc(BLOCK_M=128, BLOCK_N=32)]
    winners = set()
    rng = random.Random(7)
    for _ in range(20):
        shuffled = candidates[:]
        rng.shuffle(shuffled)
        index, why, warning = select(shuffled)
        winners.add(model.signature(shuffled[index]))
        assert (why, warning) == ("min_cost", None)
    assert winners == {"BLOCK_M=32,BLOCK_N=64,num_warps=4,num_stages=3,num_ctas=1"}


def test_entry_matches_uses_defaults_for_omitted_fields():
    candidate = desc(BLOCK=64)  # num_warps 4 and num_stages 3: Triton's defaults
    assert pinned.entry_matches({"kwargs": {"BLOCK": 64}}, candidate, DEFAULTS)
    assert pinned.entry_matches({"kwargs": {"BLOCK": 64}, "num_warps": 4}, candidate, DEFAULTS)
    assert not pinned.entry_matches({"kwargs": {"BLOCK": 64}, "num_warps": 8}, candidate, DEFAULTS)
    assert not pinned.entry_matches({"kwargs": {"BLOCK": 32}}, candidate, DEFAULTS)
    assert not pinned.entry_matches({"kwargs": {"BLOCK": 64, "EXTRA": 1}}, candidate, DEFAULTS)
    # An omitted field means the default, not "anything": num_warps=2 is not the default 4.
    assert not pinned.entry_matches({"kwargs": {"BLOCK": 64}}, desc(num_warps=2, BLOCK=64), DEFAULTS)


# --- the order of select(): table, block sizes, on_miss ----------------------------------------

CANDIDATES = [desc(BLOCK=128), desc(BLOCK=16), desc(BLOCK=64), desc(num_warps=2, BLOCK=64), desc(BLOCK=32)]


def test_on_miss_first_picks_declaration_order_and_min_cost_the_smallest_tile():
    assert select(CANDIDATES, on_miss="first") == (0, "first", None)
    assert select(CANDIDATES, on_miss="min_cost") == (1, "min_cost", None)


def test_on_miss_error_names_kernel_key_and_arch():
    with pytest.raises(SelectionError) as info:
        select(CANDIDATES, on_miss="error")
    message = str(info.value)
    assert "pkg.mod.k" in message and "1024,torch.float16" in message and "sm90" in message
    assert "AUTOTUNE_ON_MISS=error" in message


def test_a_table_entry_wins_over_block_sizes_and_on_miss():
    entry = {"kwargs": {"BLOCK": 64}, "num_warps": 2}
    for on_miss in ("first", "min_cost", "error"):
        assert select(CANDIDATES, entry=entry, block_sizes=[("BLOCK", 32)], on_miss=on_miss) == (3, "table", None)
    # Omitted num_warps is the default 4: the other BLOCK=64 candidate.
    assert select(CANDIDATES, entry={"kwargs": {"BLOCK": 64}}) == (2, "table", None)


def test_an_entry_matching_no_live_candidate_is_a_miss():
    entry = {"kwargs": {"BLOCK": 48}}
    index, why, warning = select(CANDIDATES, entry=entry, block_sizes=[("BLOCK", 64)])
    assert (index, why) == (3, "block_sizes")  # falls through to the override, min_cost among obeying
    assert "table entry" in warning and "no live candidate" in warning and "pkg.mod.k" in warning
    index, why, warning = select(CANDIDATES, entry=entry, on_miss="first")
    assert (index, why) == (0, "first") and "no live candidate" in warning
    with pytest.raises(SelectionError, match="table entry matches no live candidate"):
        select(CANDIDATES, entry=entry, on_miss="error")


def test_block_sizes_override_is_obeyed_with_on_miss_among_obeying_candidates():
    assert select(CANDIDATES, block_sizes=[("BLOCK", 64)]) == (3, "block_sizes", None)  # fewer warps
    assert select(CANDIDATES, block_sizes=[("BLOCK", 64)], on_miss="first") == (2, "block_sizes", None)
    # on_miss=error does not refuse when the override is obeyed.
    assert select(CANDIDATES, block_sizes=[("BLOCK", 64)], on_miss="error") == (3, "block_sizes", None)


def test_block_sizes_that_match_nothing_warn_or_refuse():
    index, why, warning = select(CANDIDATES, block_sizes=[("BLOCK", 48)])
    assert (index, why) == (1, "min_cost")
    assert "AUTOTUNE_BLOCK_SIZES matches no candidate" in warning and "pkg.mod.k" in warning
    with pytest.raises(SelectionError) as info:
        select(CANDIDATES, block_sizes=[("BLOCK", 48)], on_miss="error")
    assert "AUTOTUNE_BLOCK_SIZES" in str(info.value) and "1024,torch.float16" in str(info.value)


def test_block_sizes_for_other_kernels_do_not_apply_here():
    # BLOCK_M is not a meta-parameter of these candidates: no warning, plain on_miss.
    assert select(CANDIDATES, block_sizes=[("BLOCK_M", 64)]) == (1, "min_cost", None)
    # A kernel with BLOCK_M and BLOCK_N obeys the names it has.
    two_d = [desc(BLOCK_M=64, BLOCK_N=64), desc(BLOCK_M=32, BLOCK_N=128), desc(BLOCK_M=32, BLOCK_N=32)]
    assert pinned.block_size_matches([("BLOCK_M", 32), ("OTHER", 8)], two_d) == [1, 2]
    assert select(two_d, block_sizes=[("BLOCK_M", 32), ("OTHER", 8)]) == (2, "block_sizes", None)
    assert pinned.block_size_matches([("BLOCK_M", 16)], two_d) == []
    assert pinned.block_size_matches([("OTHER", 16)], two_d) is None


def test_chaos_shift_gives_each_rank_a_different_candidate():
    assert [pinned.chaos_shift(1, 4, rank) for rank in range(4)] == [1, 2, 3, 0]


# --- tables: lookup and loading ----------------------------------------------------------------

def table(arch="interpret", kernels=None, **extra):
    return {"format": schema.TABLE_FORMAT, "arch": arch, "kernels": kernels or {}, **extra}


def write(path, document):
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return str(path)


def test_table_entry_prefers_the_key_then_star_then_the_bare_name():
    a, b, c = {"kwargs": {"B": 1}}, {"kwargs": {"B": 2}}, {"kwargs": {"B": 3}}
    held = {"pkg.mod.k": {"1024": a, "*": b}, "k": {"*": c}, "other": {"*": a}}
    assert tables.table_entry(held, "pkg.mod.k", "1024") is a
    assert tables.table_entry(held, "pkg.mod.k", "2048") is b
    assert tables.table_entry(held, "elsewhere.k", "1024") is c  # bare function name
    assert tables.table_entry(held, "pkg.mod.missing", "1024") is None
    assert tables.table_entry({"pkg.mod.k": {"1024": a}}, "pkg.mod.k", "2048") is None


def test_an_entry_that_omits_every_field_is_still_the_keys_own_entry():
    # {} is a real entry (no meta-parameters, Triton's default options), not "no entry".
    own, star = {}, {"kwargs": {}, "num_warps": 8}
    assert tables.table_entry({"pkg.k": {"7": own, "*": star}}, "pkg.k", "7") is own


def load(table_path, arch, versions):
    """The tables, asserting that loading them warned of nothing."""
    loaded, warnings = tables.load_tables(table_path, arch, versions)
    assert warnings == []
    return loaded


def test_table_path_as_directory_and_as_file(tmp_path):
    directory = tmp_path / "tables"
    directory.mkdir()
    write(directory / "interpret.json", table(kernels={"pkg.k": {"*": {"kwargs": {"B": 1}}}}))
    write(directory / "sm90.json", table("sm90", {"pkg.k": {"*": {"kwargs": {"B": 9}}}}))
    single = write(tmp_path / "my-table.json", table(kernels={"pkg.k": {"*": {"kwargs": {"B": 2}}}, "pkg.j": {"*": {}}}))
    versions = {"triton": None, "torch": None}
    assert load((str(directory),), "interpret", versions) == {"pkg.k": {"*": {"kwargs": {"B": 1}}}}
    assert load((str(directory),), "sm90", versions) == {"pkg.k": {"*": {"kwargs": {"B": 9}}}}
    # Earlier entries of the path win, per kernel and key.
    merged = load((str(directory), single), "interpret", versions)
    assert merged == {"pkg.k": {"*": {"kwargs": {"B": 1}}}, "pkg.j": {"*": {}}}
    merged = load((single, str(directory)), "interpret", versions)
    assert merged["pkg.k"] == {"*": {"kwargs": {"B": 2}}}


def test_unusable_tables_are_skipped_with_a_warning_naming_them(tmp_path):
    corrupt = write(tmp_path / "corrupt.json", '{"format": "autotune_guard.table/1", "arch": ')
    other_arch = write(tmp_path / "other.json", table("gfx942", {"pkg.k": {"*": {}}}))
    stale = write(tmp_path / "stale.json", table(kernels={"pkg.k": {"*": {"kwargs": {"B": 4}}}}, triton="0.0.1"))
    merged, warnings = tables.load_tables((corrupt, other_arch, stale), "interpret", {"triton": "3.9.0"})
    assert merged == {"pkg.k": {"*": {"kwargs": {"B": 4}}}}
    assert len(warnings) == 3, warnings  # returned, one line each: the caller says each once
    assert corrupt in warnings[0] and "not valid JSON" in warnings[0]
    assert other_arch in warnings[1] and "gfx942" in warnings[1]
    assert stale in warnings[2] and "0.0.1" in warnings[2] and "stale" in warnings[2]


# --- the model: keys and choices as text --------------------------------------------------------

def test_a_key_value_holding_a_comma_does_not_spell_like_two_values():
    assert model.key_text((1024, "torch.float16")) == "1024,torch.float16"  # the common key is unchanged
    assert model.key_text(("a,b",)) != model.key_text(("a", "b"))
    assert model.key_text(("a,b",)) == '"a,b"'
    # A part that starts with a quote is quoted too, so a quoted part can't be faked by a plain one.
    assert model.key_text(('"a,b"',)) != model.key_text(("a,b",))
    assert len({model.key_text(k) for k in [("a,b", "c"), ("a", "b,c"), ("a", "b", "c"), ('"a', 'b"', "c")]}) == 4


def test_choice_key_and_choice_round_trip_through_their_text():
    key = ChoiceKey("sm90", "pkg.mod.k", "1024,a|b,torch.float16")  # a key text may hold '|'
    assert key.text() == "sm90|pkg.mod.k|1024,a|b,torch.float16"
    assert ChoiceKey.parse(key.text()) == key
    # A string meta-parameter may hold ';': the signature keeps it, ``how`` never has one.
    choice = Choice("MODE=a;b,num_warps=4", "pinned")
    assert choice.text() == "MODE=a;b,num_warps=4;pinned"
    assert Choice.parse(choice.text()) == choice
    assert Choice.parse("BLOCK=64,num_warps=4;cache hit") == ("BLOCK=64,num_warps=4", "cache hit")


def test_errors_share_one_base():
    assert issubclass(SelectionError, GuardError) and issubclass(SelectionError, RuntimeError)
    with pytest.raises(GuardError):
        select(CANDIDATES, on_miss="error")


# --- a candidate out of the race after the first pass (issue 59: a 20 s timing repeated for nothing) ----

def test_a_runner_up_out_of_the_race_is_not_confirmed_and_a_close_one_is():
    from autotune_guard.core import selection

    band = 0.03
    assert selection.out_of_race({0: 1.0, 1: 10.0}, 1, band) and selection.to_confirm({0: 1.0, 1: 10.0}, [0], band) == []
    # one slowed 2x by another process could be the best: confirmed, as before
    assert not selection.out_of_race({0: 1.0, 1: 2.0}, 1, band)
    assert selection.to_confirm({0: 1.0, 1: 2.0, 2: 9.0}, [0], band) == [0, 1]
    assert selection.out_of_race({0: 1.0, 1: float("inf")}, 1, band)  # it cannot run


def _fake_select(costs, rounds=10):
    from autotune_guard.deciding import retime

    calls = []

    def time_each(indices):
        calls.extend(indices)
        return {i: costs[i] for i in indices}

    return retime.select(time_each, range(len(costs)), 0.03, rounds), calls


def test_the_selection_times_a_far_slower_candidate_once_and_keeps_close_winners():
    found, calls = _fake_select([1.0, 20.0])
    assert calls.count(1) == 1 and found.verdict.winner == 0 and found.timed == 2, calls
    found, calls = _fake_select([20.0, 1.0, 25.0])
    assert calls == [0, 1, 2] and found.verdict.winner == 1 and found.verdict.how == "one finalist"
    found, calls = _fake_select([1.0, 1.5, 20.0])  # a close runner-up is still confirmed
    assert calls == [0, 1, 2, 1, 0] and found.verdict.winner == 0


def test_winners_stay_as_they_were_and_only_far_candidates_lose_timings(monkeypatch):
    import math

    from autotune_guard.core import selection
    from autotune_guard.deciding import retime

    def run(costs, seed):
        rng, calls = random.Random(seed), []

        def time_each(indices):
            calls.extend(indices)
            return {i: costs[i] * math.exp(rng.gauss(0, 0.05)) for i in indices}

        return retime.select(time_each, range(len(costs)), 0.03, 10).verdict.winner, calls

    saved = 0
    for seed in range(200):
        shape = random.Random(seed)
        costs = [shape.choice([1.0, 1.0 + shape.random(), 2.5 + 40 * shape.random()]) for _ in range(shape.randint(2, 5))]
        now = run(costs, seed)
        with monkeypatch.context() as before:  # the rule before: every runner-up confirmed
            before.setattr(selection, "out_of_race", lambda first, index, band: False)
            then = run(costs, seed)
        assert now[0] == then[0], (costs, now, then)
        assert now[1] == then[1] or len(now[1]) == len(then[1]) - 2, (costs, now, then)
        saved += len(then[1]) - len(now[1])
    assert saved > 0


def test_a_timer_that_names_itself_is_named_in_the_measurement():
    from autotune_guard.deciding import retime

    class Named(list):
        timer = "wall-clock"

    named = retime.select(lambda indices: {i: Named([1.0 + i, 0.9, 1.1]) for i in indices}, [0, 1], 0.03, 0)
    plain = retime.select(lambda indices: {i: [1.0 + i, 0.9, 1.1] for i in indices}, [0, 1], 0.03, 0)
    assert retime.summary(named, ["a", "b"], 0.03, {})["timer"] == "wall-clock"
    assert "timer" not in retime.summary(plain, ["a", "b"], 0.03, {})
    kept = retime.known_timings({"timer": "wall-clock", "candidates": {"a": {"median": 1.0}}}, ["a", "b"], {})
    assert kept[0].timer == "wall-clock"  # kept timings say what timed them too
