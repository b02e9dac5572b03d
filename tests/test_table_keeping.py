"""Tables that keep what they know (issue 57): a retune on purpose times one key again and keeps the
entry it replaces beside the new one; a table file that cannot grow is not pooled; a malformed
measurement never stops a table from growing; two pooling runs at once pool over both. Cold runs of
one process (a job of one grows its table) drive the real ``kernels/winners.py`` kernel under the
interpreter, its timer's true costs known."""

import json
import logging

import pytest

from kernels import winners

ORDER = list(winners.COSTS)
KERNEL = "kernels.winners.tagged_kernel"


def _run(guard, table_path, sizes=(1000,), seed=0, bias=None, **settings):
    """One cold process of a consensus job alone: its choice log, and the blocks it timed."""
    from autotune_guard import choice_log
    from autotune_guard.evidence import table_growth

    winners.RANDOM.seed(seed)
    winners.BIAS.clear()
    winners.BIAS.update(bias or {})
    try:
        guard({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": str(table_path), **settings})
        winners.CALLS.clear()
        kernel = winners.make(ORDER)
        for n in sizes:
            winners.launch(kernel, n)
        table_growth.flush()
    finally:
        winners.BIAS.clear()
    return choice_log(), list(winners.CALLS)


def _table(tmp_path):
    return json.loads((tmp_path / "interpret.json").read_text())


def _key(table, n):
    (key,) = [k for k in table["kernels"][KERNEL] if k.startswith(f"{n},")]
    return key


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_report_retune_times_one_key_again_and_keeps_the_entry_it_replaces(guard, tmp_path, capsys, ag_log):
    from autotune_guard.report import cli

    # Run 1 draws a process that times 32 and 64 slow: it freezes BLOCK=16 for both keys.
    _run(guard, tmp_path, (1000, 2000), bias={32: 1.05, 64: 1.05})
    table = _table(tmp_path)
    old = {n: table["kernels"][KERNEL][_key(table, n)]["kwargs"]["BLOCK"] for n in (1000, 2000)}
    assert old == {1000: 16, 2000: 16}
    assert cli.main(["retune", str(tmp_path), "--kernel", KERNEL, "--key", _key(table, 1000)]) == 0
    assert "the next consensus run times it again" in capsys.readouterr().out
    # Pinned runs go on pinning the entry until then.
    pinned, calls = _run(guard, tmp_path, (1000, 2000), AUTOTUNE_MODE="pinned")
    assert calls == [] and all("BLOCK=16," in text for text in pinned.values())
    log, calls = _run(guard, tmp_path, (1000, 2000), seed=1)
    assert calls and all(winners.CALLS) and len(set(calls)) == len(ORDER)  # one key's candidates, timed once each pass
    assert sum(text.endswith(";timed") for text in log.values()) == 1, log  # the other key is the table's
    table = _table(tmp_path)
    key = _key(table, 1000)
    assert table["kernels"][KERNEL][key]["kwargs"]["BLOCK"] == 32 and "retune" not in table
    (replaced,) = [m["replaced"] for m in table["measured"][KERNEL][key]["earlier"] if "replaced" in m]
    assert replaced["entry"]["kwargs"]["BLOCK"] == 16 and replaced["why"] == "retune"
    assert replaced["added"]["run_id"]  # who had added the entry it replaced, kept
    assert any("now holds BLOCK=32" in m and "kept beside it" in m for m in ag_log.messages())
    again, calls = _run(guard, tmp_path, (1000, 2000), seed=2)
    assert calls == []  # the request was for one run


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_retune_of_a_kernel_marks_every_key_and_a_wrong_key_is_one_line(guard, tmp_path, capsys):
    from autotune_guard.report import cli

    _run(guard, tmp_path, (1000, 2000))
    assert cli.main(["retune", str(tmp_path / "interpret.json"), "--kernel", KERNEL, "--dry-run"]) == 0
    assert capsys.readouterr().out.count("would mark") == 2 and "retune" not in _table(tmp_path)
    assert cli.main(["retune", str(tmp_path), "--kernel", KERNEL]) == 0
    assert len(_table(tmp_path)["retune"][KERNEL]) == 2
    assert cli.main(["retune", str(tmp_path), "--kernel", KERNEL, "--undo"]) == 0
    assert "retune" not in _table(tmp_path)
    capsys.readouterr()
    assert cli.main(["retune", str(tmp_path), "--kernel", KERNEL, "--key", "7,nope"]) == 2
    err = capsys.readouterr().err
    assert "has no entry for key(s) 7,nope" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["retune", str(tmp_path), "--kernel", "no.such"]) == 2


def test_pooling_over_a_table_file_is_said_once_and_times_nothing(guard, tmp_path, ag_log):
    """Issue 57: a table file (not a directory) under AUTOTUNE_POOL_RUNS=3 was timed again by every run
    ("the table's winner is now ..."), and nothing was added: run N+1 never came."""
    _run(guard, tmp_path)
    for run in (2, 3):
        log, calls = _run(guard, tmp_path / "interpret.json", seed=run, AUTOTUNE_POOL_RUNS="3")
        assert calls == [] and all(text.endswith(";table") for text in log.values()), log
    said = [m for m in ag_log.messages() if "names table files only" in m and "AUTOTUNE_POOL_RUNS=3" in m]
    assert len(said) == 2 and "no key is pooled" in said[0]  # once in each run


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_a_malformed_measurement_is_named_and_the_table_still_grows(guard, tmp_path, ag_log):
    """Issue 57: a malformed ``measured`` part made every later run fail to add to the table with
    Python's words ('int' object is not iterable): the table never grew again."""
    _run(guard, tmp_path, (1000,))
    table = _table(tmp_path)
    key = _key(table, 1000)
    table["measured"][KERNEL][key]["earlier"] = 7
    table["measured"][KERNEL][key]["candidates"]["BLOCK=16,num_warps=1,num_stages=3,num_ctas=1"] = "fast"
    table["measured"][KERNEL]["junk"] = [1, 2]
    (tmp_path / "interpret.json").write_text(json.dumps(table))
    log, calls = _run(guard, tmp_path, (1000, 3000), seed=1)
    assert calls and sorted(text.rpartition(";")[2] for text in log.values()) == ["table", "timed"], log
    grown = _table(tmp_path)
    assert _key(grown, 3000) in grown["kernels"][KERNEL]  # the new key was added
    warned = " ".join(m for m in ag_log.messages(logging.WARNING) if "measured part" in m)
    assert f"key ({key})" in warned and "earlier" in warned and "candidate timing" in warned, warned
    assert "not iterable" not in " ".join(ag_log.messages())


def test_two_pooling_runs_at_once_pool_over_both():
    """Issue 57: two pool runs that read the table before either wrote each pooled over 2 runs; the
    table then held 3 and the verdict said 2. The second write pools again over all the table holds."""
    from autotune_guard.core import table_writes
    from autotune_guard.core.model import tuned_winner

    sigs = [f"BLOCK={b},num_warps=1" for b in (16, 32)]
    descs = {sig: {"kwargs": {"BLOCK": b}, "num_warps": 1} for sig, b in zip(sigs, (16, 32))}
    run = lambda a, b: {"arch": "interpret", "winner": sigs[a > b], "candidates": {
        sigs[0]: {"median": a}, sigs[1]: {"median": b}}}
    first = table_writes.grow_table(None, "interpret", {"m.k": {"1": tuned_winner(descs[sigs[0]], None, run(1.0, 1.02))}},
                                    {"run_id": "r1"}, {}).document
    pooled = lambda measured, n: tuned_winner(descs[sigs[1]], None, {**measured, "pooled": {"runs": n}}, extends=True,
                                              choices=descs)
    after_a = table_writes.grow_table(first, "interpret", {"m.k": {"1": pooled(run(1.02, 1.0), 2)}},
                                      {"run_id": "a"}, {}).document
    grown = table_writes.grow_table(after_a, "interpret", {"m.k": {"1": pooled(run(1.03, 1.0), 2)}},
                                    {"run_id": "b"}, {})
    measured = grown.document["measured"]["m.k"]["1"]
    assert measured["pooled"]["runs"] == 3 and measured["pooled"]["timed_by"] == {sigs[0]: 3, sigs[1]: 3}
    assert grown.document["kernels"]["m.k"]["1"]["kwargs"]["BLOCK"] == 32
    assert [m["replaced"]["added"]["run_id"] for m in measured["earlier"]] == ["r1", "a"]  # who added each, kept


# The README's two recipes in order, in one folder: the README's command grows tables/interpret.json,
# then a record run is merged into the same file (issue 57: the merge replaced the grown table without
# a word, who added each entry and every kept measurement gone). Cold processes of the real package.
RECIPE = """
import json, os
from kernels import winners
winners.RANDOM.seed(int(os.environ["SEED"]))
winners.BIAS.update({int(k): v for k, v in json.loads(os.environ["BIAS"]).items()})
kernel = winners.make(list(winners.COSTS))
for n in (1000, 2000):
    winners.launch(kernel, n)
"""


def _process(tmp_path, seed, bias, **settings):
    from support import clean_env, run_python

    env = clean_env(SEED=seed, BIAS=json.dumps(bias), AUTOTUNE_RETIME_ROUNDS=10, **settings)
    return run_python(RECIPE, env=env, cwd=tmp_path)


@pytest.mark.slow
def test_the_readmes_recipes_in_order_lose_no_entry(tmp_path, capsys):
    from autotune_guard.report import cli

    tables = tmp_path / "tables"
    tables.mkdir()
    _process(tmp_path, 0, {32: 1.05, 64: 1.05}, AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=tables)
    grown = (tables / "interpret.json").read_bytes()
    added = json.loads(grown)["added"][KERNEL]
    # A record that decides alike: merged in, the grown entries and who added them kept, its timings beside.
    _process(tmp_path, 1, {32: 1.05, 64: 1.05}, AUTOTUNE_RECORD_PATH=tmp_path / "same" / "rec")
    assert cli.main(["merge", str(tmp_path / "same" / "rec"), "-o", str(tables / "interpret.json")]) == 0
    table = _table(tables)
    assert table["added"][KERNEL] == added and table["kernels"] == json.loads(grown)["kernels"]
    assert all(len(m["earlier"]) == 1 for m in table["measured"][KERNEL].values())  # the record's, kept beside
    before = (tables / "interpret.json").read_bytes()
    # A record that decides otherwise (this process times 16 slow): refused in one line, nothing written.
    _process(tmp_path, 2, {16: 1.05}, AUTOTUNE_RECORD_PATH=tmp_path / "other" / "rec")
    capsys.readouterr()
    assert cli.main(["merge", str(tmp_path / "other" / "rec"), "-o", str(tables / "interpret.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "decide 2 entries otherwise" in err and "--replace" in err, err
    assert (tables / "interpret.json").read_bytes() == before
    # --replace: replaced and said, each old entry kept in its history with who had added it.
    assert cli.main(["merge", str(tmp_path / "other" / "rec"), "-o", str(tables / "interpret.json"), "--replace"]) == 0
    assert capsys.readouterr().out.count("the old entry kept in its history") == 2
    table = _table(tables)
    for key, entry in table["kernels"][KERNEL].items():
        assert entry["kwargs"]["BLOCK"] == 32 and table["added"][KERNEL][key]["run_id"].startswith("report merge")
        (replaced,) = [m["replaced"] for m in table["measured"][KERNEL][key]["earlier"] if "replaced" in m]
        assert replaced["entry"]["kwargs"]["BLOCK"] == 16 and replaced["added"] == added[key]


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_report_merge_pooled_never_mixes_versions_and_leaves_malformed_measurements_out(guard, tmp_path, capsys):
    """Issue 57: ``--rule pooled`` pooled a Triton 3.3.1 rank's timings with 3.9.0's."""
    import glob

    from autotune_guard import evidence
    from autotune_guard.report import cli

    prefixes = []
    for run in range(4):
        winners.RANDOM.seed(run)
        guard({"AUTOTUNE_MODE": "record", "AUTOTUNE_RECORD_PATH": str(tmp_path / f"rec-{run}" / "run")})
        winners.launch(winners.make(ORDER))
        evidence.write_files()
        prefixes.append(str(tmp_path / f"rec-{run}" / "run"))
    (other,) = glob.glob(str(tmp_path / "rec-0" / "run.rank*.json"))
    record = json.loads(open(other).read())
    (entry,) = record["kernels"][KERNEL].values()
    entry["measured"]["triton"] = "0.0.1"  # a rank of another Triton
    open(other, "w").write(json.dumps(record))
    (broken,) = glob.glob(str(tmp_path / "rec-1" / "run.rank*.json"))
    record = json.loads(open(broken).read())
    (entry,) = record["kernels"][KERNEL].values()
    entry["measured"]["candidates"] = 5  # malformed
    open(broken, "w").write(json.dumps(record))
    capsys.readouterr()
    assert cli.main(["merge", "--allow-partial", "--rule", "pooled", *prefixes, "-o", str(tmp_path / "t.json")]) == 0
    said = capsys.readouterr().out
    (measured,) = json.loads((tmp_path / "t.json").read_text())["measured"][KERNEL].values()
    assert measured["pooled"]["runs"] == 2, measured["pooled"]
    assert "1 malformed measurement(s)" in said and "1 of other versions (triton 0.0.1" in said, said
