"""Malformed inputs never give a traceback (issue 12): generated documents of each format (record,
choices, table), mutated field by field with values of the wrong type, deep nesting, huge integers,
truncation and stray bytes, plus special files (a FIFO, a device).  The report CLI answers each with
exit 0/1 (the document was still valid) or exit 2 and one line naming the file; the table loader
skips a bad table with a warning naming it, and a pinned program with hostile tables on
AUTOTUNE_TABLE_PATH runs (the tables skipped, named) instead of crashing at its first launch."""

import copy
import json
import os
import random
import subprocess
import sys

import pytest

from autotune_guard import report
from autotune_guard.core import schema, tables
from autotune_guard.core.errors import FileFormatError
from support import clean_env, last_json, run_python

K = "pkg.ops.add_kernel"
KEY = "1024,torch.float32"
CFG = {"kwargs": {"BLOCK": 64}, "num_warps": 4, "num_stages": 3, "num_ctas": 1}
CFG2 = {"kwargs": {"BLOCK": 32}, "num_warps": 2, "num_stages": 3, "num_ctas": 1}
SIG = "BLOCK=64,num_warps=4,num_stages=3,num_ctas=1"
SIG2 = "BLOCK=32,num_warps=2,num_stages=3,num_ctas=1"

GOOD = {
    "record": {
        "format": schema.RECORD_FORMAT, "arch": "interpret", "rank": 0, "world_size": 2, "mode": "record",
        "versions": {"triton": "3.9.0", "torch": "2.13.0", "python": "3.11.7"}, "packages": {"pkg": "1.0"},
        "run_id": "r1", "pid": 10, "host": "h", "started": 1.0, "updated": 2.0, "written": "x", "complete": True,
        "kernels": {K: {KEY: {"config": CFG, "signature": SIG, "how": "timed",
                              "timings": {SIG: [1.0, 0.9, 1.1], SIG2: [2.0, 1.9, 2.1]}, "candidates": [CFG, CFG2]}}},
    },
    "choices": {
        "format": schema.CHOICES_FORMAT, "rank": 1, "world_size": 2, "run_id": "r1", "pid": 11, "host": "h",
        "digest": "abcd", "count": 1, "log": {f"interpret|{K}|{KEY}": SIG + ";pinned"}, "complete": True,
        "numerics": {"fp_fusion": "on", "fp_fusion_by": "TRITON_DEFAULT_FP_FUSION=1"},  # issue 59: a dict here
    },
    "table": {
        "format": schema.TABLE_FORMAT, "arch": "interpret", "triton": "3.9.0", "torch": "2.13.0",
        "packages": {"pkg": "1.0"}, "source": {"files": ["a"], "rule": "vote"}, "kernels": {K: {KEY: CFG, "*": CFG2}},
    },
}

# Values of every JSON kind, and the hostile ones: huge integers, deep nesting.
HUGE_INT = "9" * 5000
DEEP = "[" * 100000 + "]" * 100000
REPLACEMENTS = ["a string", ["a", "list"], {"an": "object"}, None, True, -1, 0, 2 ** 64, 1e308, 3.5, [], {},
                "__HUGE__", "__DEEP__", "__NAN__", [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]


def paths_of(value, prefix=()):
    """Every path to a value inside a document."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths_of(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths_of(v, prefix + (i,))


def replaced(document, path, value):
    doc = copy.deepcopy(document)
    if not path:
        return value
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return doc


def as_text(document) -> str:
    text = json.dumps(document)
    return (text.replace('"__HUGE__"', HUGE_INT).replace('"__DEEP__"', DEEP).replace('"__NAN__"', "NaN"))


def generated(seed=12):
    """(name, text): every field of every format replaced by every kind of value, some keys
    dropped, and random truncations and byte flips."""
    rng = random.Random(seed)
    for kind, good in GOOD.items():
        for path in paths_of(good):
            for value in REPLACEMENTS:
                yield f"{kind}:{'/'.join(map(str, path))}={str(value)[:12]}", as_text(replaced(good, path, value))
            if path:
                parent = copy.deepcopy(good)
                target = parent
                for step in path[:-1]:
                    target = target[step]
                if isinstance(target, dict):
                    del target[path[-1]]
                    yield f"{kind}:drop {'/'.join(map(str, path))}", as_text(parent)
        text = json.dumps(good)
        for i in range(40):
            cut = rng.randrange(len(text))
            yield f"{kind}:truncated at {cut}", text[:cut]
            flipped = bytearray(text.encode())
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
            yield f"{kind}:byte flip {i}", flipped.decode("latin-1")


CASES = list(generated())


def test_enough_cases_are_generated():
    assert len(CASES) > 1500


def run_main(capsys, argv):
    code = report.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
@pytest.mark.parametrize("command", ["show", "merge", "diff"])
def test_report_cli_never_tracebacks_on_generated_documents(capsys, tmp_path, command):
    good = tmp_path / "good.rank0.json"
    good.write_text(json.dumps(GOOD["record"]))
    failures, exits = [], {0: 0, 1: 0, 2: 0}
    for i, (name, text) in enumerate(CASES):
        bad = tmp_path / f"case{i}.rank1.json"
        bad.write_text(text, encoding="utf-8", errors="surrogateescape")
        table = tmp_path / "t.json"  # each case's own table: a merge into one that is there would merge
        table.unlink(missing_ok=True)
        argv = {"show": ["show", "--check", bad, good], "merge": ["merge", bad, "-o", table],
                "diff": ["diff", "--check", bad, good]}[command]
        try:
            code, out, err = run_main(capsys, argv)
        except BaseException as exc:  # a traceback is the failure this test is about
            failures.append(f"{name}: raised {type(exc).__name__}: {str(exc)[:200]}")
            continue
        exits[code] = exits.get(code, 0) + 1
        if code == 2:
            lines = err.strip().splitlines()
            if len(lines) != 1 or str(bad) not in lines[0] and str(good) not in lines[0]:
                failures.append(f"{name}: exit 2 without one line naming the file: {err[:300]!r}")
        elif code not in (0, 1):
            failures.append(f"{name}: exit {code}")
        bad.unlink()
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n".join(failures[:30])
    assert exits[2] > len(CASES) / 3  # most mutations are refused, by name


def test_table_loader_skips_every_generated_bad_table_with_a_warning(tmp_path):
    failures = []
    for i, (name, text) in enumerate(CASES):
        table = tmp_path / f"t{i}.json"
        table.write_text(text, encoding="utf-8", errors="surrogateescape")
        try:
            loaded, warnings = tables.load_tables((str(table),), "interpret", {"triton": "3.9.0", "torch": "2.13.0"})
        except BaseException as exc:
            failures.append(f"{name}: raised {type(exc).__name__}: {str(exc)[:200]}")
            continue
        if not loaded and not any(str(table) in message for message in warnings) and not _valid_and_empty(table):
            failures.append(f"{name}: not used and not named: {warnings}")
        for entries in loaded.values():  # what was kept is usable by selection
            for entry in entries.values():
                schema.check_descriptor(str(table), "kept", entry)
        table.unlink()
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n".join(failures[:30])


def _valid_and_empty(path) -> bool:
    try:
        return not any(schema.read_document(str(path))["kernels"].values())
    except FileFormatError:
        return False


SPECIFIC = {
    "versions a string": replaced(GOOD["record"], ("versions",), "3.9.0"),
    "versions a list": replaced(GOOD["record"], ("versions",), ["3.9.0"]),
    "packages a list": replaced(GOOD["record"], ("packages",), ["pkg"]),
    "versions.triton a list": replaced(GOOD["record"], ("versions", "triton"), ["3.9.0"]),
    "rank a bool": replaced(GOOD["record"], ("rank",), True),
    "run_id a number": replaced(GOOD["record"], ("run_id",), 3),
    "a meta-parameter an object": replaced(GOOD["record"], ("kernels", K, KEY, "config", "kwargs", "BLOCK"), {"a": 1}),
}


@pytest.mark.slow
def test_the_issues_cases_in_a_real_process(tmp_path):
    """As the issue reported them, through ``python -m``: one line naming the file, exit 2."""
    paths = []
    for i, (name, doc) in enumerate(SPECIFIC.items()):
        paths.append((name, tmp_path / f"s{i}.rank0.json"))
        paths[-1][1].write_text(json.dumps(doc))
    (tmp_path / "deep.rank0.json").write_text(DEEP)
    (tmp_path / "huge.rank0.json").write_text(json.dumps(GOOD["record"]).replace('"rank": 0', f'"rank": {HUGE_INT}'))
    fifo = tmp_path / "fifo.rank0.json"
    os.mkfifo(fifo)
    paths += [("deep nesting", tmp_path / "deep.rank0.json"), ("5000 digits", tmp_path / "huge.rank0.json"),
              ("a FIFO", fifo), ("a device", "/dev/zero")]
    for name, path in paths:
        proc = subprocess.run([sys.executable, "-m", "autotune_guard.report", "show", str(path)], capture_output=True,
                              text=True, timeout=60, env=clean_env())
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and str(path) in lines[0], (name, proc.stderr[-1500:])
        assert "Traceback" not in proc.stderr
    assert "FIFO" in subprocess.run([sys.executable, "-m", "autotune_guard.report", str(fifo)], capture_output=True,
                                    text=True, timeout=60, env=clean_env()).stderr


@pytest.mark.slow
def test_hostile_tables_on_the_path_are_skipped_by_a_pinned_program(tmp_path):
    hostile = {
        "deep.json": DEEP,
        "huge.json": json.dumps(GOOD["table"]).replace('"num_warps": 4', f'"num_warps": {HUGE_INT}'),
        "types.json": json.dumps(replaced(GOOD["table"], ("packages",), ["pkg"])),
        "kwargs.json": json.dumps(replaced(GOOD["table"], ("kernels", K, KEY, "kwargs"), [64])),
    }
    for name, text in hostile.items():
        (tmp_path / name).write_text(text)
    table_path = os.pathsep.join(str(tmp_path / name) for name in hostile)
    code = """
import json, torch
from kernels import demo
import autotune_guard
x = torch.arange(100, dtype=torch.float32)
assert torch.equal(demo.add(x, x), x + x)
print(json.dumps({"timer_calls": len(demo.TIMER_CALLS), "log": autotune_guard.choice_log()}))
"""
    proc = run_python(code, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=table_path))
    result = last_json(proc.stdout)
    assert result["timer_calls"] == 0 and len(result["log"]) == 1
    warnings = [line for line in proc.stderr.splitlines() if "WARNING: skipping table" in line]
    for name in hostile:
        assert sum(str(tmp_path / name) in line for line in warnings) == 1, (name, proc.stderr[-3000:])
