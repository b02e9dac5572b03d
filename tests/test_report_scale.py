"""The report over many rank files: ``show``, ``diff``, ``merge`` and the HTML page reduce each
file to compact per-key rows as it is read (on worker processes, or in one), and their results
equal those of the whole-file path (``whole_files``: every file read whole and grouped) on the
same files on disk; what they keep is bounded per key; ``-o`` writes whole or not at all; a
corrupt file among many is named."""

import io
import json
import os
import time
from collections import Counter
from functools import partial

import pytest
import whole_files

from autotune_guard import report
from autotune_guard.core import jsonfile, schema
from autotune_guard.core.model import signature
from autotune_guard.core.tables import PROVENANCE, added_by, verdict_text
from autotune_guard.report import (configs, html, html_model, html_tables, output, readers, reading, rows as rows_module,
                                   show)
from autotune_guard.report.diff import compare
from autotune_guard.report.timings import median_of

CANDIDATES = [{"kwargs": {"BLOCK": b}, "num_warps": w, "num_stages": 3, "num_ctas": 1} for b in (16, 32, 64) for w in (4, 8)]
KEYS = 24


def cfg_of(i):
    return CANDIDATES[i % len(CANDIDATES)]


def rec_entry(rank, i, winner):
    """Entries of every shape the report meets: timed, reused (no timings), a failed candidate,
    a winner that is none of the candidates, a config without kwargs, the library's own choice."""
    timings = {signature(c): [0.01 * (1 + (rank * 7 + i * 3 + n) % 11)] * 3 for n, c in enumerate(CANDIDATES)}
    if i % 6 == 1:
        timings[signature(CANDIDATES[0])] = [None, None, None]  # failed while timed
    entry = {"config": winner, "how": "timed", "timings": timings, "candidates": CANDIDATES}
    if i % 5 == 2:
        entry.update(how="reused", timings=None)
    if i % 9 == 4 and rank % 2:  # its winner none of this file's candidates, yet of the kernel's
        entry["candidates"] = CANDIDATES[2:]
    if i % 11 == 5:
        entry["how"] = "library"
    if i % 8 == 3:
        entry[PROVENANCE] = {"source": f"sha-{i % 2}", "candidates": "c1"}
    return entry


def record(rank, world, *, run_id="run2", pid=None, keys=KEYS, shift=0):
    kernels = {}
    for i in range(keys):
        winner = cfg_of(i + (1 if rank % 7 == 3 and i % 4 == 0 else 0) + shift)
        if i == 7:
            winner = {"num_warps": 4, "num_stages": 2}  # no kwargs: read as empty ones
        entry = kernels.setdefault(f"pkg.ops.k{i % 3}", {})[f"{i},torch.float16"] = rec_entry(rank, i, winner)
        if i == 7:
            entry["candidates"] = CANDIDATES + [winner]
    return {"format": schema.RECORD_FORMAT, "arch": "sm90", "rank": rank, "world_size": world, "mode": "record",
            "versions": {"triton": "3.9.0", "torch": "2.13.0", "python": "3.11.7"}, "packages": {"pkg": "1.0"},
            "run_id": run_id, "attempt": 0, "pid": pid if pid is not None else 100 + rank, "host": "node",
            "kernels": kernels, "complete": True}


def write(path, document):
    path.write_text(json.dumps(document, indent=1))
    return str(path)


@pytest.fixture
def many(tmp_path):
    """40 ranks' records; rank 5 left two processes' files (the child's untimed, one key chosen
    otherwise); a table beside them; and an older run's files in the same prefix, left out."""
    d = tmp_path / "run"
    d.mkdir()
    old = time.time() - 3600
    for rank in range(3):
        path = write(d / f"rec.rank{rank}.node-{900 + rank}.json", record(rank, 3, run_id="run1", shift=1))
        os.utime(path, (old, old))
    for rank in range(40):
        write(d / f"rec.rank{rank}.node-{100 + rank}.json", record(rank, 40))
    child = record(5, 40, pid=77)
    for i, (kernel, entries) in enumerate(sorted(child["kernels"].items())):
        for key, entry in entries.items():
            entry["timings"] = None
        if i == 0:
            next(iter(entries.values()))["config"] = CANDIDATES[-1]
    write(d / "rec.rank5.node-077.json", child)  # read before the parent: its untimed copies give way
    table = {"format": schema.TABLE_FORMAT, "arch": "sm90", "kernels": {"pkg.ops.k0": {"0,torch.float16": CANDIDATES[1]}},
             PROVENANCE: {"pkg.ops.k0": {"source": "sha-t"}},
             "added": {"pkg.ops.k0": {"0,torch.float16": {"run_id": "r", "rank": 0, "host": "h", "time": "t"}}}}
    write(tmp_path / "sm90.json", table)
    return tmp_path


def run(capsys, *argv):
    code = report.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def whole(args, accept=("record", "choices", "table"), command="show"):
    """The whole-file path: every file read whole (no fold), its entries counted as a fold would."""
    sources = reading.read_sources(args, accept, command)
    for s in sources:
        s.entries = len(s.document["log"]) if "log" in s.document else \
            sum(len(e) for e in s.document["kernels"].values())
    return sources


def reference_keys(sources):
    """show's rows from whole files (``whole_files.grouped``): what the report gave before it streamed."""
    found = []
    for (arch, kernel, key), choices in whole_files.grouped(sources).items():
        configs = Counter(c.signature for c in choices)
        entries = [{"file": c.source.path, "label": c.source.label, "rank": c.source.rank, "kind": c.source.kind,
                    "config": c.signature, "how": c.how, **whole_files.timing_summary(c),
                    "added_by": added_by(c.source.document, kernel, key) if c.source.kind == "table" else None,
                    "verdict": verdict_text(c.source.document, kernel, key) if c.source.kind == "table" else None}
                   for c in choices]
        winners = [e["winner_ms"] for e in entries if e["winner_ms"] is not None]
        found.append({"arch": arch, "kernel": kernel, "key": key, "agree": len(configs) == 1,
                      "library_decided": any(e["how"] == "library" for e in entries),
                      "configs": dict(configs.most_common()), "choices": entries,
                      "winner_ms_range": [min(winners), max(winners)] if winners else None})
    return found


JOBS = pytest.mark.parametrize("jobs", ["1", pytest.param("2", marks=pytest.mark.slow)])  # here; on 2 worker processes


@JOBS
def test_show_json_and_text_of_many_files_equal_the_whole_file_path(capsys, many, jobs):
    args = [many / "run" / "rec", many / "sm90.json"]
    code, out, err = run(capsys, "show", "--jobs", jobs, "--json", "--check", *args)
    assert code == 1 and "run1" in err  # the older run's files are named and left out
    sources = whole([str(a) for a in args])
    reference = reference_keys(sources)
    assert len(reference) == KEYS and any(not r["agree"] for r in reference)
    # rank 5's two processes count once where they chose alike (40 ranks), twice where not: key 0,
    # which the table holds too (42)
    assert {len(r["choices"]) for r in reference} == {40, 42}
    shown = json.loads(out)
    assert shown["keys"] == json.loads(json.dumps(jsonfile.finite(reference)))
    assert shown["disagreements"] == sum(not r["agree"] for r in reference)

    code, out, _ = run(capsys, "show", "--jobs", jobs, *args)
    text = io.StringIO()
    counts = (len(reference), len({(r["arch"], r["kernel"]) for r in reference}), sum(not r["agree"] for r in reference))
    show.print_show(sources, iter(reference), [s.document for s in sources], counts, text)
    assert code == 0 and out == text.getvalue()
    assert "provenance: " in out and "added by run r" in out

    code, out, _ = run(capsys, "show", "--jobs", jobs, "--format", "markdown", *args)
    text = io.StringIO()
    show.print_show_markdown(sources, lambda: iter(reference), counts, text)
    assert out == text.getvalue()


@JOBS
def test_diff_of_many_files_equals_the_whole_file_path(capsys, many, tmp_path, jobs):
    other = tmp_path / "other"
    other.mkdir()
    for rank in range(30):
        write(other / f"rec.rank{rank}.node-{100 + rank}.json", record(rank, 30, shift=rank % 13 == 0))
    code, out, _ = run(capsys, "diff", "--jobs", jobs, "--json", "--check", many / "run" / "rec", other / "rec")
    sides = [whole([str(p)], ("record", "choices"), "diff") for p in (many / "run" / "rec", other / "rec")]
    reference = compare(*({key: {c.signature for c in chosen} for key, chosen in whole_files.grouped(side).items()}
                          for side in sides))
    assert code == 1 and json.loads(out)["keys"] == reference
    assert {r["status"] for r in reference} >= {"changed", "same", "same, ranks disagree"}


@JOBS
def test_merge_of_many_files_votes_as_the_whole_files_say(capsys, many, tmp_path, jobs):
    table = tmp_path / "out" / "sm90.json"
    table.parent.mkdir()
    code, out, err = run(capsys, "merge", "--jobs", jobs, many / "run" / "rec", "-o", table, "--json")
    assert code == 0, err
    merged = json.loads(table.read_text())["kernels"]
    expected = {}
    for (_, kernel, key), chosen in whole_files.grouped(whole([str(many / "run" / "rec")], ("record",), "merge")).items():
        votes = Counter(c.signature for c in chosen if c.how != "library")
        if votes:
            expected.setdefault(kernel, {})[key] = votes.most_common(1)[0][0]  # the fixture has no ties
    assert {k: {key: signature({**d, "kwargs": d.get("kwargs", {})}) for key, d in e.items()}
            for k, e in merged.items()} == expected


@pytest.mark.slow
def test_merge_by_fastest_on_workers_is_what_one_process_merges(capsys, many, tmp_path):
    tables = {}
    for jobs, rule in (("1", "fastest"), ("2", "fastest"), ("1", "vote")):
        target = tmp_path / f"{rule}-{jobs}.json"
        code, _, err = run(capsys, "merge", "--jobs", jobs, "--rule", rule, many / "run" / "rec", "-o", target)
        assert code == 0, err
        tables[rule, jobs] = json.loads(target.read_text())
        tables[rule, jobs]["source"].pop("created")
    assert tables["fastest", "2"] == tables["fastest", "1"]
    assert tables["fastest", "1"]["kernels"] != tables["vote", "1"]["kernels"]  # Triton's times decided some keys


@pytest.mark.slow
def test_workers_read_in_other_processes_and_send_back_in_order(many, tmp_path):
    """Each worker leaves a mark per file it read (``whole_files.marking_digest``); the reading
    process reads none itself, and what comes back is in the files' order."""
    marks = tmp_path / "marks"
    marks.mkdir()
    folded = rows_module.Rows()
    folded.digest = partial(whole_files.marking_digest, marks=str(marks))
    sources = reading.read_sources([str(many / "run" / "rec")], ("record",), "show", fold=folded, jobs=2)
    readers_seen = {name.split("-")[0] for name in os.listdir(marks)}
    assert len(os.listdir(marks)) == 44 and len(readers_seen) == 2 and str(os.getpid()) not in readers_seen
    assert [s.path for s in folded.sources] == reading.expand(str(many / "run" / "rec"))
    assert len(sources) == 41


@pytest.mark.slow
def test_a_worker_that_dies_is_named_with_the_file_it_held(capsys, many, tmp_path):
    folded = rows_module.Rows()
    folded.digest = whole_files.dying_digest
    with pytest.raises(readers.ReaderError, match=r"rec\.rank7\.node-107\.json: the process reading it ended "
                                                  r"\(exit status 3\) before it was read; --jobs 1 reads in this process"):
        reading.read_sources([str(many / "run" / "rec")], ("record",), "show", fold=folded, jobs=2)


def test_how_many_read_is_the_cores_once_the_files_are_large(tmp_path, monkeypatch):
    small = [str(tmp_path / f"s{i}") for i in range(4)]
    large = [str(tmp_path / f"l{i}") for i in range(4)]
    for path in small:
        open(path, "w").close()
    for path in large:
        with open(path, "wb") as out:
            out.truncate(readers.PARALLEL_FROM_BYTES // 2)  # sparse: a size, no disk
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(12)), raising=False)
    digest = rows_module.Rows.digest
    assert readers.jobs_for(None, small, digest) == 1  # a pool would cost more than it saves
    assert readers.jobs_for(None, large, digest) == 4  # at most one a file
    assert readers.jobs_for(None, large * 4, digest) == readers.MAX_JOBS
    assert readers.jobs_for(None, large, None) == 1  # whole documents (the HTML page) are read here
    assert readers.jobs_for(3, small, digest) == 3 and readers.jobs_for(9, small, digest) == 4
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert readers.jobs_for(None, large * 4, digest) == 1


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_jobs_value_is_named(capsys, many, value):
    with pytest.raises(SystemExit) as exit_:
        report.main(["show", "--jobs", value, str(many / "run" / "rec")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"argument --jobs: {value!r} is not a number of processes" in err


def test_configs_of_equal_value_and_other_types_keep_their_own_signatures():
    """1, 1.0 and true are == in Python; a file holding each gets three signatures, as whole files do."""
    sigs = configs.Signatures()
    lists = [[{"kwargs": {"BLOCK": value}, "num_warps": 4}] for value in (1, 1.0, True)]
    assert lists[0] == lists[1] == lists[2]
    found = [sigs.of_list(candidates) for candidates in lists]
    assert found == [("BLOCK=1,num_warps=4",), ("BLOCK=1.0,num_warps=4",), ("BLOCK=True,num_warps=4",)]
    assert sigs.of_list([{"kwargs": {"BLOCK": 1}, "num_warps": 4}]) is found[0]  # an equal list: the same tuple


def test_rows_are_kept_per_key_and_file_never_the_documents(many):
    folded = rows_module.Rows()
    sources = reading.read_sources([str(many / "run" / "rec")], ("record",), "show", fold=folded)
    assert len(folded.sources) == 44 and len(sources) == 41  # the older run's three are read, then left out
    for s in folded.sources:  # each file's entries went to the rows; its header alone is kept
        assert "kernels" not in s.document and s.entries == KEYS
    assert len(folded.keys) == KEYS
    for key_rows in folded.keys.values():
        assert len(key_rows) == 44  # one row a file, in arrays: no dict, no document per row
        for name in ("files", "sigs", "hows", "min_costs", "timed", "flags", "times"):
            column = getattr(key_rows, name)
            assert type(column).__name__ in ("array", "bytearray")
            assert len(column) == 44 * (4 if name == "times" else 1)
    # each config, how and min-cost text is kept once, however many files chose it
    assert len(folded.texts) == len(set(folded.texts)) <= len(CANDIDATES) + 1 + 3
    assert sum(len(rows) for _, rows in folded.grouped(sources)) == KEYS * 41 - KEYS + 1  # rank 5 once where alike


def test_show_output_fails_whole_leaving_no_half_file(capsys, many, monkeypatch):
    target = many / "report.txt"
    target.write_text("the previous report\n")

    def half_then_disk_full(sources, rows, provenance, counts, out):
        out.write("1 files:\n" * 1000)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(show, "print_show", half_then_disk_full)
    code, _, err = run(capsys, "show", many / "run" / "rec", "-o", target)
    assert code == 2 and "No space left on device" in err and str(target) in err
    assert target.read_text() == "the previous report\n"
    assert sorted(os.listdir(many)) == ["report.txt", "run", "sm90.json"]  # no temporary left behind


def test_output_to_a_new_file_is_whole_or_absent(capsys, many):
    target = many / "new.json"
    (many / "run" / "rec.rank9.node-109.json").write_text('{"format": "autotune_guard.record/1", "kernels": {')
    code, _, err = run(capsys, "show", "--json", many / "run" / "rec", "-o", target)
    assert code == 2 and "rec.rank9.node-109.json" in err
    assert not target.exists() and sorted(os.listdir(many)) == ["run", "sm90.json"]


@JOBS
@pytest.mark.parametrize("command", ["show", "diff", "merge"])
def test_a_corrupt_file_among_many_is_named(capsys, many, tmp_path, command, jobs):
    bad = many / "run" / "rec.rank23.node-123.json"
    text = bad.read_text()
    bad.write_text(text[: len(text) // 2])  # cut off mid-write
    later = many / "run" / "rec.rank31.node-131.json"
    later.write_text("{")  # also unusable: the first in the files' order is the one named
    prefix = many / "run" / "rec"
    argv = {"show": ["show", "--check", prefix], "diff": ["diff", prefix, prefix],
            "merge": ["merge", prefix, "-o", tmp_path / "t.json"]}[command]
    code, out, err = run(capsys, argv[0], "--jobs", jobs, *argv[1:])
    assert code == 2 and not out
    assert err.count("\n") == 1 and f"{bad}: is not valid JSON" in err


@pytest.mark.parametrize("fields", [
    [],
    [("keys", [])],
    [("files", [{"f": 1}]), ("keys", [{"x": [1, 2], "y": {"z": float("inf")}}, {"x": [], "s": "é"}]), ("empty", []),
     ("n", 3)],
])
def test_streamed_json_is_what_dump_writes(fields):
    """Byte for byte the text of ``json.dump`` of the whole document, with the lists streamed."""
    streamed, whole_text = io.StringIO(), io.StringIO()
    output.dump_streamed([(name, iter(value) if isinstance(value, list) else value) for name, value in fields], streamed)
    output.dump(dict(fields), whole_text)
    assert streamed.getvalue() == whole_text.getvalue()


# 17 levels; its escaped quotes, were they paired as plain ones, would hide four of them
DEEP_BEHIND_ESCAPES = rb'{"a":[{"a":[[[[[["\"]]]]\"", {"a":[{"a":[{"a":[{"a":[1]}]}]}]}, "\"[[[[\""]]]]]]}]}'


@pytest.mark.parametrize("text, plain", [
    (b"[" * 16 + b"]" * 16, False),  # 16 levels: within the limit, but not plainly (the walk decides)
    (b'{"a":' * 8 + b"1" + b"}" * 8, True),  # a pass takes off one level of objects or two: 8 passes
    (b'{"a":' * 17 + b"1" + b"}" * 17, False),
    (b"[1234567890123456789]", False), (b"[-9999999999999999999]", False), (b"12345678901234567890", False),
    (b"[123456789012345678, -123456789012345678]", True), (b"[0.12345678901234567890123]", True), (b"[0." + b"7" * 40 + b"]", True),
    (b"[0.1234567890123456789012, 1234567890123456789012]", False),
    (b'["]]]]", ' + b"[" * 17 + b"]" * 17 + b"]", False),  # brackets inside a string: not plainly
    (b'["a\\"]]]]]b", 1]', False),
    (DEEP_BEHIND_ESCAPES, False), (b'[[{}], {"x": [[]]}, "[", "]"]', False), (b'[[{}], {"x": [[]]}]', True),
])
def test_plainly_bounded_is_never_wrong(text, plain):
    assert jsonfile.plainly_bounded(text) is plain
    if plain:  # where it spares the walk, the walk would have passed
        jsonfile.check_depth_and_numbers("x", json.loads(text))


def test_deep_or_huge_files_are_still_refused_by_name(tmp_path):
    for name, text in (("deep.json", '{"format": "autotune_guard.table/1", "x": ' + "[" * 17 + "]" * 17 + "}"),
                       ("huge.json", '{"format": "autotune_guard.table/1", "x": [%d]}' % 2 ** 64),
                       ("string.json", '{"format": "autotune_guard.table/1", "k": "]]]]]]]]", "x": '
                        + "[" * 17 + "]" * 17 + "}"),
                       ("escapes.json", '{"format": "autotune_guard.table/1", "x": ' + DEEP_BEHIND_ESCAPES.decode() + "}")):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(schema.FileFormatError, match=name):
            schema.read_document(str(path))


GOOD_CONFIG = {"kwargs": {"BLOCK": 16, "SCALE": 0.5, "MODE": "x", "EVEN": True, "OPT": None}, "num_warps": 4,
               "num_stages": None, "num_ctas": 1}


@pytest.mark.parametrize("where, bad, said", [
    ("config", {**GOOD_CONFIG, "num_warps": True}, "'num_warps' must be an integer"),
    ("config", {**GOOD_CONFIG, "num_stages": "3"}, "'num_stages' must be an integer"),
    ("config", {**GOOD_CONFIG, "num_ctas": 1.0}, "'num_ctas' must be an integer"),
    ("config", {**GOOD_CONFIG, "kwargs": {"BLOCK": {"tile": 16}}}, "meta-parameter 'BLOCK' must be a number"),
    ("config", {**GOOD_CONFIG, "colour": 1}, "unknown config fields"),
    ("candidate", {**GOOD_CONFIG, "maxnreg": False}, "'maxnreg' must be an integer"),
    ("timings", {"a": [0.1, True]}, "a timing must be a number"),
    ("timings", {"a": []}, "a timing must be a number"),
    ("timings", {"a": "fast"}, "a timing must be a number"),
    ("timings", [0.1], "'timings' must be an object"),
    ("how", 3, "'how' must be a string"),
])
def test_the_fast_valid_path_still_refuses_each_bad_field_by_name(tmp_path, where, bad, said):
    """The fast path passes only what is valid; anything else goes to the checks that name it."""
    good = {"config": GOOD_CONFIG, "how": "timed", "timings": {"a": [0.1, None], "b": 0.2, "c": None},
            "candidates": [GOOD_CONFIG]}
    path = tmp_path / "rec.rank0.json"
    write(path, {**record(0, 1, keys=0), "kernels": {"k": {"1": good}}})
    schema.read_document(str(path))
    entry = {**good, "candidates": [GOOD_CONFIG, bad]} if where == "candidate" else {**good, where: bad}
    write(path, {**record(0, 1, keys=0), "kernels": {"k": {"1": entry}}})
    with pytest.raises(schema.FileFormatError, match=f"{path}: kernel 'k' key '1'.*{said}"):
        schema.read_document(str(path))
    if where in ("config", "candidate"):  # a table's entries take the same path
        write(path, {"format": schema.TABLE_FORMAT, "arch": "sm90", "kernels": {"k": {"1": bad}}})
        with pytest.raises(schema.FileFormatError, match=said):
            schema.read_document(str(path))


@pytest.mark.parametrize("bad", [True, 4.0])
def test_a_candidate_list_equal_to_a_checked_one_but_of_other_types_is_refused(tmp_path, bad):
    """The check skips candidate lists it has seen by their exact bytes: one that is == to a
    checked list (True == 1, 4.0 == 4) is still checked, and refused by name."""
    good = [{"kwargs": {"BLOCK": 16}, "num_warps": 1 if bad is True else 4}]
    worse = [{"kwargs": {"BLOCK": 16}, "num_warps": bad}]
    assert good == worse
    document = record(0, 1, keys=2)
    entries = [entry for keyed in document["kernels"].values() for entry in keyed.values()]
    entries[0].update(candidates=good, config=good[0])
    entries[1].update(candidates=worse, config=good[0])
    path = write(tmp_path / "rec.rank0.json", document)
    with pytest.raises(schema.FileFormatError, match=r"candidate: 'num_warps' must be an integer") as raised:
        schema.read_document(path)
    assert path in str(raised.value)


def test_past_sixteen_files_a_keys_files_are_grouped_by_config(capsys, many):
    """Text at scale: one line a config (how many files, how, their winners' medians, the first
    labels); the min-cost slowdown as a range; JSON still lists every file."""
    assert show.LIST_FILES_UP_TO < 40
    code, out, _ = run(capsys, "show", many / "run" / "rec")
    assert code == 0
    block = out.split("key (0,torch.float16): ", 1)[1].split("\n  key (", 1)[0].splitlines()
    assert block[0] == "DISAGREE: 3 configs (a, b, ...: most chosen first), 41 files"
    sig_a, sig_b, sig_c = (signature(CANDIDATES[n]) for n in (0, 1, -1))
    assert block[1].startswith(f"   a 34 files  {sig_a}  [timed]  winners' medians ")
    assert block[1].endswith(": rank 0, rank 1, rank 2, rank 4, rank 5 pid 105, rank 6, rank 7, rank 8 and 26 more")
    assert block[2].startswith(f"   b 6 files  {sig_b}  [timed]  winners' medians ")
    assert block[2].endswith(": rank 3, rank 10, rank 17, rank 24, rank 31, rank 38")
    assert block[3] == f"   c 1 file  {sig_c}  [timed]: rank 5 pid 77"  # rank 5's child: no timings
    assert block[4].startswith("    winners' medians across files: ")
    assert block[5].startswith(f"    min-cost {sig_a}: ") and block[5].endswith("x on 40 files")
    assert len(block) == 6
    code, out, _ = run(capsys, "show", "--json", many / "run" / "rec")
    assert len(json.loads(out)["keys"][0]["choices"]) == 41


def test_equal_candidate_lists_of_a_checked_record_are_one_object(tmp_path):
    """So that a fold computes a list's signatures once and then finds it by identity."""
    path = write(tmp_path / "rec.rank0.json", record(0, 1))
    document = schema.read_document(path)
    lists = [entry["candidates"] for keyed in document["kernels"].values() for entry in keyed.values()]
    assert len(lists) == KEYS and len({id(c) for c in lists}) == len({json.dumps(c) for c in lists}) == 2
    sigs = configs.Signatures()
    assert sigs.of_list(lists[0]) is sigs.of_list(lists[1]) is sigs.of_list(json.loads(json.dumps(lists[0])))


def whole_file_page(sections, statuses=None):
    """The HTML page's model as it was built from every file read whole, before it streamed:
    the reference the streamed page must render the same as."""
    rows, cells_by_key, ungoverned = [], {}, set()
    for side, sources in sections:
        index = {}
        for source in sorted(sources, key=html_model._row_order):
            if html_model._row_ident(source) not in index:
                index[html_model._row_ident(source)] = len(rows)
                rows.append(html_model.Row(source.label if source.kind == "table" else f"rank {source.rank}",
                                           "tables" if source.kind == "table" else html_model.node_of(source),
                                           None if source.kind == "table" else source.rank, side))
            ungoverned.update(html_model._ungoverned_of(source))
        for key, choices in whole_files.grouped(sources).items():
            for c in choices:
                entry = {"config": c.signature, "how": c.how, **whole_files.timing_summary(c),
                         "medians": {sig: median_of(m) for sig, m in (c.timings or {}).items()}}
                cells_by_key.setdefault(key, {}).setdefault(index[html_model._row_ident(c.source)], []).append(entry)
                if c.how == "library":
                    ungoverned.add(key.kernel)
    columns = [html_model.Column(key.arch, key.kernel, key.key, [tuple(cells[i]) if i in cells else None
                                                                  for i in range(len(rows))],
                                 (statuses or {}).get(tuple(key), ""),
                                 any(e["medians"] for cell in cells.values() for e in cell),
                                 tuple(r.side for r in rows) if statuses is not None else ())  # a run against itself
               for key, cells in cells_by_key.items()]
    return html_model.Page(rows, columns, [(side, [s.path for s in sources]) for side, sources in sections if side],
                           len(ungoverned))


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
@JOBS
def test_the_html_pages_of_many_files_render_as_from_whole_files(capsys, tmp_path, jobs):
    """60 keys (more than the page shows, so most columns keep their configs only) of 20 ranks, a
    table and a rank's two processes; show's page and diff's, byte for byte."""
    for side, shift in (("a", 0), ("b", 1)):
        d = tmp_path / side
        d.mkdir()
        for rank in range(20):
            write(d / f"rec.rank{rank}.node-{100 + rank}.json", record(rank, 20, keys=60, shift=shift * (rank % 9 == 4)))
        write(d / "rec.rank5.node-077.json", record(5, 20, keys=60, pid=77, shift=1))
    table = {"format": schema.TABLE_FORMAT, "arch": "sm90", "kernels": {"pkg.ops.k0": {"0,torch.float16": CANDIDATES[1]}},
             "added": {"pkg.ops.k0": {"0,torch.float16": {"run_id": "r", "rank": 0, "host": "h", "time": "t"}}}}
    write(tmp_path / "sm90.json", table)
    show_args = [str(tmp_path / "a" / "rec"), str(tmp_path / "sm90.json")]
    code, out, err = run(capsys, "show", "--jobs", jobs, "--format", "html", "--check", *show_args)
    sources = reading.read_sources(show_args, ("record", "choices", "table"), "show")
    assert code == 1, err
    assert out == html.render(whole_file_page([("", sources)]), "autotune_guard report", [s.path for s in sources],
                              tables=html_tables.section(html_tables.table_entries(sources)))
    assert out.count('<svg class="ag-plot"') == html.MAX_PLOTS and "more keys not shown" in out

    code, out, err = run(capsys, "diff", "--jobs", jobs, "--format", "html", tmp_path / "a" / "rec", tmp_path / "b" / "rec")
    sides = [reading.read_sources([str(tmp_path / s / "rec")], ("record", "choices"), "diff") for s in "ab"]
    statuses = {(r["arch"], r["kernel"], r["key"]): r["status"]
                for r in compare(*({k: {c.signature for c in v} for k, v in whole_files.grouped(side).items()}
                                   for side in sides))}
    page = whole_file_page([("A", sides[0]), ("B", sides[1])], statuses)
    assert out == html.render(page, "autotune_guard diff", [s.path for side in sides for s in side]), err


def test_the_page_reads_again_the_columns_it_shows_and_those_it_plots():
    rows = [html_model.Row(f"rank {r}", "node", r) for r in range(3)]
    light = ({"config": "A"},)
    columns = [html_model.Column("sm90", "k", str(i), [light] * 3, timed=i >= 50) for i in range(60)]
    needed = html_model.needed_columns(html_model.Page(rows, columns))
    assert needed == list(range(html_model.MAX_COLUMNS)) + list(range(50, 50 + html_model.MAX_PLOTS)[:10])
