"""`python -m autotune_guard.report`: show, merge, diff over real files, and every bad input.

The record and choices files here are written by the tests in the real formats (the CLI is plain
code over files); test_record.py drives it on files written by real recording ranks.
"""

import json
import os
import socket
import stat
import subprocess
import sys

import pytest

from support import clean_env

from autotune_guard import report
from autotune_guard.core import schema
from autotune_guard.core.model import signature

K = "pkg.ops.kern"
KEY = "1024,torch.float16"
KEY2 = "2048,torch.float16"


def cfg(block, warps=4, stages=3):
    return {"kwargs": {"BLOCK": block}, "num_warps": warps, "num_stages": stages, "num_ctas": 1}


CANDIDATES = [cfg(16), cfg(32), cfg(64)]  # static cost: 16 < 32 < 64


def entry(winner, medians=None, candidates=CANDIDATES):
    timings = None
    if medians is not None:
        timings = {signature(c): [m, m * 0.9, m * 1.1] for c, m in zip(candidates, medians)}
    return {"config": winner, "signature": signature(winner), "how": "timed" if timings else "reused",
            "timings": timings, "candidates": candidates}


def record(rank, kernels, *, arch="interpret", complete=True, world=2, triton="3.9.0"):
    return {"format": schema.RECORD_FORMAT, "arch": arch, "rank": rank, "world_size": world, "mode": "record",
            "versions": {"triton": triton, "torch": "2.13.0", "python": "3.11.7"}, "packages": {"pkg": "1.2.3"},
            "kernels": kernels, "complete": complete}


def choices(rank, log, world=2):
    return {"format": schema.CHOICES_FORMAT, "rank": rank, "world_size": world, "digest": "0" * 16,
            "count": len(log), "log": log, "complete": True}


def write(path, document):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return str(path)


def run(capsys, *argv):
    """The CLI in this process: (exit status, stdout, stderr)."""
    code = report.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def two_ranks(tmp_path):
    """Two ranks that agree on KEY2 and disagree on KEY; with timings that make min-cost 3x and 2x slower."""
    write(tmp_path / "rec.rank0.json", record(0, {K: {KEY: entry(cfg(64), [3.0, 2.0, 1.0]), KEY2: entry(cfg(32), [5, 1, 9])}}))
    write(tmp_path / "rec.rank1.json", record(1, {K: {KEY: entry(cfg(32), [4.0, 2.0, 8.0]), KEY2: entry(cfg(32), [5, 2, 9])}}))
    return tmp_path


# --- show ---------------------------------------------------------------------------------------

def test_show_marks_disagreements_timings_and_min_cost_slowdown(capsys, two_ranks):
    code, out, err = run(capsys, "show", two_ranks / "rec")
    assert code == 0 and not err
    assert f"key ({KEY}): DISAGREE: 2 configs" in out
    assert f"key ({KEY2}): agree" in out
    assert "min-cost BLOCK=16,num_warps=4,num_stages=3,num_ctas=1: 3.00x on rank 0, 2.00x on rank 1" in out
    assert "fastest..slowest of 3 timed: 1 ms..3 ms" in out
    assert "1 kernel, 2 keys, 1 disagreement" in out

    code, out, _ = run(capsys, "show", "--json", two_ranks / "rec")
    doc = json.loads(out)
    assert doc["disagreements"] == 1
    rows = {r["key"]: r for r in doc["keys"]}
    assert rows[KEY]["agree"] is False and rows[KEY2]["agree"] is True
    by_rank = {c["rank"]: c for c in rows[KEY]["choices"]}
    assert by_rank[0]["winner_ms"] == 1.0 and by_rank[0]["min_cost_ms"] == 3.0 and by_rank[0]["min_cost_slowdown"] == 3.0
    assert by_rank[1]["min_cost_slowdown"] == 2.0
    assert rows[KEY]["winner_ms_range"] == [1.0, 2.0]


def test_show_check_is_a_ci_gate(capsys, two_ranks):
    assert run(capsys, "show", "--check", two_ranks / "rec")[0] == 1
    assert run(capsys, "show", "--check", two_ranks / "rec.rank0.json")[0] == 0  # one rank agrees with itself
    agreeing = write(two_ranks / "other.rank1.json", record(1, {K: {KEY: entry(cfg(64)), KEY2: entry(cfg(32))}}))
    assert run(capsys, "--check", two_ranks / "rec.rank0.json", agreeing)[0] == 0


def test_show_is_the_default_and_reads_choices_files_too(capsys, tmp_path):
    log = {f"interpret|{K}|{KEY}": signature(cfg(32)) + ";timed", f"sm90|{K}|{KEY}": signature(cfg(16)) + ";pinned"}
    write(tmp_path / "ch.rank0.json", choices(0, log))
    write(tmp_path / "ch.rank1.json", choices(1, {f"interpret|{K}|{KEY}": signature(cfg(64)) + ";timed"}))
    code, out, _ = run(capsys, tmp_path / "ch.rank0.json", tmp_path / "ch.rank1.json")  # no command: show
    assert code == 0
    assert f"{K}  [arch interpret]" in out and f"{K}  [arch sm90]" in out  # arches are never mixed up
    assert "DISAGREE" in out and "[pinned]" in out
    doc = json.loads(run(capsys, "--json", str(tmp_path / "ch.rank*.json"))[1])  # a glob
    assert [(r["arch"], r["agree"]) for r in doc["keys"]] == [("interpret", False), ("sm90", True)]


def test_a_signature_holding_a_semicolon_and_a_key_holding_a_bar_survive_a_choices_file(capsys, tmp_path):
    # A string meta-parameter may hold ';' (the signature keeps it; ``how`` never has one), a key text '|'.
    log = {f"interpret|{K}|1024,a|b": "MODE=x;y,num_warps=4;pinned"}
    write(tmp_path / "ch.rank0.json", choices(0, log))
    write(tmp_path / "ch.rank1.json", choices(1, log))
    code, out, err = run(capsys, "show", "--json", "--check", tmp_path / "ch")
    assert code == 0 and not err
    (row,) = json.loads(out)["keys"]
    assert (row["kernel"], row["key"], row["agree"]) == (K, "1024,a|b", True)
    assert {(c["config"], c["how"]) for c in row["choices"]} == {("MODE=x;y,num_warps=4", "pinned")}


def test_the_least_a_valid_record_holds_is_enough(capsys, tmp_path):
    # No signature, candidates, timings, how, versions or packages; a config without kwargs.
    minimal = {"format": schema.RECORD_FORMAT, "arch": "interpret", "rank": 0, "complete": True,
               "kernels": {K: {KEY: {"config": {"num_warps": 4}}}}}
    path = write(tmp_path / "m.rank0.json", minimal)
    for argv in (["show", path], ["show", "--json", path], ["diff", path, path],
                 ["merge", path, "-o", tmp_path / "t.json"], ["merge", "--rule", "fastest", path, "-o", tmp_path / "t.json"]):
        code, out, err = run(capsys, *argv)
        assert code == 0 and not err, (argv, err)
    assert schema.read_document(str(tmp_path / "t.json"))["kernels"] == {K: {KEY: {"kwargs": {}, "num_warps": 4}}}


def test_show_names_partial_records(capsys, tmp_path):
    write(tmp_path / "r.rank0.json", record(0, {K: {KEY: entry(cfg(16))}}, complete=False))
    code, out, _ = run(capsys, tmp_path / "r")
    assert code == 0 and "PARTIAL" in out and "[reused]" in out


# --- merge --------------------------------------------------------------------------------------

def test_merge_vote_writes_a_table_with_provenance(capsys, tmp_path):
    for rank, winner in enumerate([cfg(64), cfg(32), cfg(64)]):
        write(tmp_path / f"rec.rank{rank}.json", record(rank, {K: {KEY: entry(winner)}}, world=3))
    out_path = tmp_path / "tables" / "interpret.json"
    code, out, _ = run(capsys, "merge", tmp_path / "rec", "-o", out_path)
    assert code == 0
    assert "majority 2 of 3" in out
    table = schema.read_document(str(out_path), formats=(schema.TABLE_FORMAT,))
    assert table["kernels"] == {K: {KEY: cfg(64)}}
    assert (table["arch"], table["triton"], table["torch"], table["python"]) == ("interpret", "3.9.0", "2.13.0", "3.11.7")
    assert table["packages"] == {"pkg": "1.2.3"}
    assert table["source"]["rule"] == "vote" and table["source"]["created"]
    assert table["source"]["files"] == [str(tmp_path / f"rec.rank{r}.json") for r in range(3)]
    assert stat.S_IMODE(os.stat(out_path).st_mode) & 0o044  # readable by others, like any file the user writes
    assert sorted(os.listdir(out_path.parent)) == ["interpret.json"]  # atomic: no temp file left
    assert run(capsys, "merge", "--check", tmp_path / "rec", "-o", out_path)[0] == 1  # ranks disagreed


def test_merge_tie_break_is_deterministic(capsys, tmp_path):
    a = write(tmp_path / "a.rank0.json", record(0, {K: {KEY: entry(cfg(64))}}))
    b = write(tmp_path / "b.rank1.json", record(1, {K: {KEY: entry(cfg(32))}}))
    tables = []
    for order in ((a, b), (b, a)):
        out_path = tmp_path / f"t{len(tables)}.json"
        code, out, err = run(capsys, "merge", *order, "-o", out_path)
        assert code == 0 and "no timings: broken by static cost" in out
        assert (f"WARNING: kernel {K} key ({KEY}): a tie between {signature(cfg(32))} and {signature(cfg(64))} with no "
                f"timings to break it; chose {signature(cfg(32))}") in err, err  # said loudly
        tables.append(schema.read_document(str(out_path))["kernels"])
    assert tables[0] == tables[1] == {K: {KEY: cfg(32)}}  # the lower static cost


def test_merge_fastest_takes_the_best_median_across_ranks(capsys, tmp_path):
    # BLOCK 16 wins narrowly on ranks 0 and 1, BLOCK 32 by far on ranks 2 and 3: the vote ties
    # (static cost gives 16); the median across ranks is 5.0 for 16 and 1.05 for 32.
    medians = [(1.0, 1.1, 9.0), (1.0, 1.1, 9.0), (9.0, 1.0, 9.0), (9.0, 1.0, 9.0)]
    for rank, times in enumerate(medians):
        winner = cfg(16) if rank < 2 else cfg(32)
        kernels = {K: {KEY: entry(winner, list(times))}}
        if rank == 3:
            kernels[K][KEY2] = entry(cfg(64))  # recorded without timings
        write(tmp_path / f"r.rank{rank}.json", record(rank, kernels, world=4))
    code, out, _ = run(capsys, "merge", "--rule", "fastest", "--json", tmp_path / "r", "-o", tmp_path / "fast.json")
    assert code == 0
    decisions = {d["key"]: d for d in json.loads(out)["entries"]}
    assert decisions[KEY]["chosen"] == signature(cfg(32)) and decisions[KEY]["median_ms"] == 1.05
    assert decisions[KEY2]["why"] == "no timings: by vote"
    assert schema.read_document(str(tmp_path / "fast.json"))["kernels"][K] == {KEY: cfg(32), KEY2: cfg(64)}
    assert schema.read_document(str(tmp_path / "fast.json"))["source"]["rule"] == "fastest"
    code, out, err = run(capsys, "merge", tmp_path / "r", "-o", tmp_path / "vote.json")
    # each tied config beside its median, in the votes' order (issue 45)
    tie = (f"tie of 2 at 2 votes, broken by the faster median ({signature(cfg(16))} 5 ms, {signature(cfg(32))} 1.05 ms); "
           f"votes: {signature(cfg(16))} x2, {signature(cfg(32))} x2")
    assert code == 0 and tie in out, out
    assert schema.read_document(str(tmp_path / "vote.json"))["kernels"][K][KEY] == cfg(32)  # the vote's tie: timings
    assert "WARNING" not in err


def test_merge_arch_selection(capsys, tmp_path):
    write(tmp_path / "a.rank0.json", record(0, {K: {KEY: entry(cfg(16))}}, arch="sm90"))
    write(tmp_path / "a.rank1.json", record(1, {K: {KEY: entry(cfg(32))}}, arch="sm80"))
    write(tmp_path / "a.rank2.json", record(2, {}, arch="unknown"))  # a rank that chose nothing is no arch
    code, _, err = run(capsys, "merge", tmp_path / "a", "-o", tmp_path / "t.json")
    assert code == 2 and "several archs" in err and "a.rank0.json" in err and "--arch" in err
    code, _, err = run(capsys, "merge", tmp_path / "a", "-o", tmp_path / "t.json", "--arch", "gfx942")
    assert code == 2 and "no record is for arch gfx942" in err and "a.rank1.json" in err
    code, out, _ = run(capsys, "merge", tmp_path / "a", "-o", tmp_path / "sm90.json", "--arch", "sm90")
    assert code == 0 and "skipped" in out and "a.rank1.json" in out
    assert schema.read_document(str(tmp_path / "sm90.json"))["kernels"] == {K: {KEY: cfg(16)}}
    assert not (tmp_path / "t.json").exists()


def test_merge_refuses_tables_choices_and_partial_records(capsys, tmp_path):
    good = write(tmp_path / "rec.rank0.json", record(0, {K: {KEY: entry(cfg(16))}}))
    table = write(tmp_path / "interpret.json", {"format": schema.TABLE_FORMAT, "arch": "interpret", "kernels": {}})
    chosen = write(tmp_path / "ch.rank0.json", choices(0, {f"interpret|{K}|{KEY}": "BLOCK=16;timed"}))
    partial = write(tmp_path / "p.rank1.json", record(1, {K: {KEY: entry(cfg(16))}}, complete=False))
    empty = write(tmp_path / "e.rank1.json", record(1, {}))
    out_path = tmp_path / "out.json"
    for bad, message in ((table, "is a table file; merge reads record files"),
                         (chosen, "is a choices file; merge reads record files"),
                         (partial, "is a partial record"),
                         (empty, None)):
        args = ["merge", good, bad, "-o", out_path] if bad != empty else ["merge", bad, "-o", out_path]
        code, out, err = run(capsys, *args)
        assert code == 2 and err.count("\n") == 1 and bad in err, err
        if message:
            assert message in err
    assert not out_path.exists()
    for target, message in ((tmp_path, "names a directory"), (str(tmp_path) + "/", "names a directory"),
                            (good, "is one of the inputs"), ("/proc/autotune_guard.json", "cannot be written")):
        code, _, err = run(capsys, "merge", good, "-o", target)
        assert code == 2 and message in err and err.count("\n") == 1, err


# --- diff ---------------------------------------------------------------------------------------

def test_diff_same_changed_only_in_one(capsys, tmp_path):
    write(tmp_path / "a" / "rec.rank0.json", record(0, {K: {KEY: entry(cfg(16)), KEY2: entry(cfg(32))}}))
    write(tmp_path / "a" / "rec.rank1.json", record(1, {K: {KEY: entry(cfg(16))}, "pkg.x.only_a": {"1": entry(cfg(16))}}))
    log = {f"interpret|{K}|{KEY}": signature(cfg(16)) + ";pinned", f"interpret|{K}|{KEY2}": signature(cfg(64)) + ";pinned",
           "interpret|pkg.x.only_b|1": signature(cfg(16)) + ";pinned"}
    write(tmp_path / "b" / "ch.rank0.json", choices(0, log))
    code, out, _ = run(capsys, "diff", tmp_path / "a" / "rec", tmp_path / "b" / "ch")
    assert code == 0
    assert f"same     {K} key ({KEY})" in out and f"CHANGED  {K} key ({KEY2})" in out
    assert "only A   pkg.x.only_a" in out and "only B   pkg.x.only_b" in out
    assert "1 same, 1 changed, 1 only in A, 1 only in B" in out
    doc = json.loads(run(capsys, "diff", "--json", tmp_path / "a" / "rec", tmp_path / "b" / "ch.rank0.json")[1])
    assert doc["counts"] == {"same": 1, "changed": 1, "only in A": 1, "only in B": 1}
    assert run(capsys, "diff", "--check", tmp_path / "a" / "rec", tmp_path / "b" / "ch")[0] == 1
    assert run(capsys, "diff", "--check", tmp_path / "a" / "rec.rank1.json", tmp_path / "a" / "rec.rank0.json")[0] == 0


def test_diff_compares_digests_of_choices_files(capsys, tmp_path):
    log = {f"interpret|{K}|{KEY}": signature(cfg(16)) + ";pinned"}
    write(tmp_path / "a.rank0.json", {**choices(0, log), "digest": "1111"})
    write(tmp_path / "a.rank1.json", {**choices(1, log), "digest": "2222"})
    write(tmp_path / "b.rank0.json", {**choices(0, log), "digest": "1111"})
    write(tmp_path / "b.rank1.json", {**choices(1, log), "digest": "3333"})
    code, out, _ = run(capsys, "diff", tmp_path / "a", tmp_path / "b")
    assert "digest rank 0: 1111 == 1111" in out and "digest rank 1: 2222 != 3333" in out
    doc = json.loads(run(capsys, "diff", "--json", tmp_path / "a", tmp_path / "b")[1])
    assert doc["digests"] == {"0": {"a": "1111", "b": "1111", "same": True}, "1": {"a": "2222", "b": "3333", "same": False}}


def test_diff_flags_ranks_that_disagree_inside_one_run(capsys, two_ranks):
    code, out, _ = run(capsys, "diff", "--check", two_ranks / "rec", two_ranks / "rec")
    assert code == 1 and "SAME*" in out and "ranks disagree" in out


# --- bad input ----------------------------------------------------------------------------------

def _good_record_text():
    return json.dumps(record(0, {K: {KEY: entry(cfg(16), [1.0, 2.0, 3.0])}}))


BAD_FILES = {
    "garbage": (lambda p: p.write_text("this is not JSON {{"), "is not valid JSON"),
    "truncated": (lambda p: p.write_text(_good_record_text()[:150]), "truncated or corrupt"),
    "empty": (lambda p: p.write_text(""), "is empty"),
    "whitespace": (lambda p: p.write_text("\n  \n"), "is empty"),
    "not utf-8": (lambda p: p.write_bytes(b"\xff\xfe{\x00"), "is not UTF-8"),
    "wrong format version": (lambda p: p.write_text(_good_record_text().replace("record/1", "record/2")),
                             "is not supported by this autotune_guard"),
    "not an autotune_guard file": (lambda p: p.write_text('{"kernels": {}}'), "has no 'format' field"),
    "a JSON list": (lambda p: p.write_text("[1, 2]"), "has no 'format' field"),
    "a directory": (lambda p: p.mkdir(), "is a directory"),
    "kernels not an object": (lambda p: p.write_text(json.dumps({**record(0, {}), "kernels": []})), "'kernels' must be"),
    "entry without config": (lambda p: p.write_text(json.dumps(record(0, {K: {KEY: {"timings": None}}}))), "needs a 'config'"),
    "bad option type": (lambda p: p.write_text(json.dumps(record(0, {K: {KEY: entry({**cfg(16), "num_warps": "4"})}}))),
                        "'num_warps' must be an integer"),
    "bad timing": (lambda p: p.write_text(json.dumps(record(0, {K: {KEY: {**entry(cfg(16)), "timings": {"x": "fast"}}}}))),
                   "a timing must be a number"),
    "rank not an integer": (lambda p: p.write_text(json.dumps({**record(0, {}), "rank": "0"})), "integer 'rank'"),
    "bad choices log": (lambda p: p.write_text(json.dumps(choices(0, {"no-bars": "x;timed"}))), "log entry"),
    "unreadable (a socket)": (lambda p: _socket(p), "cannot be read"),
}
_sockets = []


def _socket(path):
    # A file that open() refuses even to root (tests run as root, where chmod 000 stops nothing).
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    _sockets.append(sock)


@pytest.mark.parametrize("case", sorted(BAD_FILES))
@pytest.mark.parametrize("command", ["show", "merge", "diff"])
def test_bad_input_is_one_line_naming_the_file(capsys, tmp_path, case, command):
    make, message = BAD_FILES[case]
    good = write(tmp_path / "good.rank0.json", json.loads(_good_record_text()))
    bad = tmp_path / "bad.rank1.json"
    make(bad)
    argv = {"show": ["show", good, bad], "merge": ["merge", good, bad, "-o", tmp_path / "t.json"],
            "diff": ["diff", good, bad]}[command]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("python -m autotune_guard.report: error: ")
    assert str(bad) in err and message in err, err
    assert not out and not (tmp_path / "t.json").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file; the socket case covers unreadable files")
def test_unreadable_permissions(capsys, tmp_path):
    bad = write(tmp_path / "r.rank0.json", json.loads(_good_record_text()))
    os.chmod(bad, 0)
    code, _, err = run(capsys, "show", bad)
    assert code == 2 and "cannot be read (Permission denied)" in err


def test_missing_inputs(capsys, tmp_path):
    code, _, err = run(capsys, "show", tmp_path / "nothing")
    assert code == 2 and f"{tmp_path / 'nothing'}: no such file, and no rank files" in err
    code, _, err = run(capsys, "diff", tmp_path / "nothing*.json", tmp_path / "x")
    assert code == 2 and "no file matches" in err
    assert run(capsys)[0] == 2  # no arguments at all: usage, exit 2


@pytest.mark.slow
def test_as_a_module_bad_input_has_no_traceback(tmp_path):
    bad = tmp_path / "bad.rank0.json"
    bad.write_text(_good_record_text()[:100])
    for argv in (["show", str(bad)], [str(bad)], ["merge", str(bad), "-o", str(tmp_path / "t.json")],
                 ["diff", str(bad), str(bad)], ["merge", str(bad)]):
        proc = subprocess.run([sys.executable, "-m", "autotune_guard.report", *argv], env=clean_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert str(bad) in proc.stderr or "-o" in proc.stderr  # merge without -o: argparse names the option


def test_json_output_is_strict_json_even_with_failed_candidates(capsys, tmp_path):
    failed = entry(cfg(32), [float("inf"), 1.0, 2.0])  # Triton times a config that failed to compile as inf
    write(tmp_path / "r.rank0.json", record(0, {K: {KEY: failed}}))
    assert "Infinity" in (tmp_path / "r.rank0.json").read_text()
    code, out, _ = run(capsys, "show", "--json", tmp_path / "r.rank0.json")
    assert code == 0 and "Infinity" not in out
    choice = json.loads(out)["keys"][0]["choices"][0]
    assert choice["min_cost"] == signature(cfg(16)) and choice["min_cost_failed"] is True
    assert choice["min_cost_ms"] is None and choice["min_cost_slowdown"] is None
    code, out, _ = run(capsys, "show", tmp_path / "r.rank0.json")
    assert f"min-cost {signature(cfg(16))}: failed on rank 0" in out
