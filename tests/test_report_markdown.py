"""`report show` reading tables, and `--format markdown` for CI job summaries and PR comments (issue 14).

The first test records in a real cold interpreter (real Triton kernels under TRITON_INTERPRET=1)
and runs the CLI as a real process; the others drive the CLI in this process over files written
in the real formats, as test_report.py does.
"""

import json
import os
import shlex
import subprocess
import sys

import pytest
import triton

from support import clean_env, rank_file, run_python

from autotune_guard import report
from autotune_guard.core import schema
from autotune_guard.core.model import signature

K = "pkg.ops.kern"
KEY = "1024,torch.float16"
KEY2 = "2048,torch.float16"


def cfg(block, warps=4):
    return {"kwargs": {"BLOCK": block}, "num_warps": warps, "num_stages": 3, "num_ctas": 1}


def record(rank, kernels):
    return {"format": schema.RECORD_FORMAT, "arch": "sm90", "rank": rank, "world_size": 2, "mode": "record",
            "versions": {"triton": "3.9.0"}, "complete": True,
            "kernels": {k: {key: {"config": c} for key, c in entries.items()} for k, entries in kernels.items()}}


def table(kernels, **extra):
    return {"format": schema.TABLE_FORMAT, "arch": "sm90", "triton": "3.9.0", "torch": "2.13.0", "kernels": kernels,
            **extra}


def write(path, document):
    path.write_text(json.dumps(document))
    return str(path)


def cli(*argv):
    proc = subprocess.run([sys.executable, "-m", "autotune_guard.report", *map(str, argv)], env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def run(capsys, *argv):
    code = report.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


RECORD_ONE = """
import torch
from kernels import demo
x = torch.ones(300)
demo.add(x, x)
demo.scale(x, 2.0)
"""


@pytest.mark.slow
def test_show_reads_a_table_merged_from_a_real_record(tmp_path):
    run_python(RECORD_ONE, env=clean_env(AUTOTUNE_RECORD_PATH=str(tmp_path / "rec")))
    assert cli("merge", tmp_path / "rec", "-o", tmp_path / "interpret.json")[0] == 0
    recorded = schema.read_document(rank_file(tmp_path / "rec", 0))
    expected = {(k, key): signature(e["config"]) for k, entries in recorded["kernels"].items()
                for key, e in entries.items()}
    assert len(expected) == 2

    code, out, err = cli("show", tmp_path / "interpret.json")
    assert code == 0 and err == "", err
    assert f"table, arch interpret, triton {triton.__version__}" in out  # the Triton the record was made with
    assert "2 entries, merged by vote from 1 file" in out
    for (kernel, key), sig in expected.items():
        assert f"{kernel}  [arch interpret]" in out and f"{sig}  [table]" in out

    # The table beside the record it was made from: every key agrees, so the CI gate passes.
    code, out, _ = cli("show", "--check", tmp_path / "rec", tmp_path / "interpret.json")
    assert code == 0 and "2 keys, 0 disagreements" in out and "table interpret.json" in out

    code, out, _ = cli("show", "--format", "markdown", tmp_path / "interpret.json")
    assert code == 0
    assert out.startswith("### autotune_guard: 2 kernel/key entries in interpret.json\n")
    for (kernel, key), sig in expected.items():
        assert f"| `{kernel}` | `{key}` | interpret | `{sig}` | `table` | 1 |" in out  # how: one word for one thing


def test_show_json_reads_a_table_and_a_stale_table_entry_is_a_disagreement(capsys, tmp_path):
    rec = [write(tmp_path / f"rec.rank{r}.json", record(r, {K: {KEY: cfg(64), KEY2: cfg(32)}})) for r in (0, 1)]
    # A table made earlier: it pins BLOCK=128 for KEY, which the ranks no longer choose, and has a `*` entry.
    old = write(tmp_path / "sm90.json", table({K: {KEY: cfg(128), "*": {"kwargs": {"BLOCK": 16}}}}))
    code, out, _ = run(capsys, "show", "--check", *rec, old)
    assert code == 1
    assert f"key ({KEY}): DISAGREE: 2 configs" in out and f"key ({KEY2}): agree, 2 files" in out
    assert "key (*): agree, 1 file" in out and "BLOCK=16  [table]" in out  # omitted fields stay omitted

    doc = json.loads(run(capsys, "show", "--format", "json", *rec, old)[1])
    assert doc == json.loads(run(capsys, "show", "--json", *rec, old)[1])
    assert [s["kind"] for s in doc["files"]] == ["record", "record", "table"]
    row = {r["key"]: r for r in doc["keys"]}[KEY]
    assert {c["label"]: c["config"] for c in row["choices"]} == {
        "rank 0": signature(cfg(64)), "rank 1": signature(cfg(64)), "table sm90.json": signature(cfg(128))}
    assert all(c["how"] == "table" and c["min_cost"] is None for c in row["choices"] if c["kind"] == "table")


def test_markdown_show_puts_disagreements_in_a_table_and_folds_the_rest(capsys, tmp_path):
    paths = [write(tmp_path / f"run.rank{r}.json", record(r, {K: {KEY: cfg(64 if r < 2 else 32), KEY2: cfg(32)},
                                                              "pkg.ops.a|b": {KEY: cfg(16)}}))
             for r in range(3)]
    code, out, err = run(capsys, "show", "--format", "markdown", "--check", tmp_path / "run")
    assert code == 1 and err.endswith(" show --check: FAILED, exit status 1: 1 of 3 kernel/key entries disagree "
                                      "across 3 files\n"), err  # one closing line says the check failed
    lines = out.splitlines()
    assert lines[0] == "### autotune_guard: 1 of 3 kernel/key entries DISAGREE"
    assert "2 kernels, 3 keys, 3 files:" in lines
    assert f"- {paths[0]}: record, rank 0 of 2, arch sm90, triton 3.9.0, 3 choices, complete" in lines
    header = lines.index("| kernel | key | arch | what each file chose |")
    assert lines[header + 1] == "|---|---|---|---|"
    assert lines[header + 2] == (f"| `{K}` | `{KEY}` | sm90 | `{signature(cfg(64))}`: rank 0, rank 1"
                                 f"<br>`{signature(cfg(32))}`: rank 2 |")
    assert "<details><summary>2 kernel/key entries where every file agrees</summary>" in lines
    assert f"| `{K}` | `{KEY2}` | sm90 | `{signature(cfg(32))}` | `timed` | 3 |" in lines
    assert f"| `pkg.ops.a\\|b` | `{KEY}` | sm90 | `{signature(cfg(16))}` | `timed` | 3 |" in lines  # a pipe can't break the table
    assert lines[-1] == "</details>"

    agreeing = run(capsys, "show", "--format", "markdown", "--check", paths[0], paths[1])
    assert agreeing[0] == 0 and agreeing[1].startswith("### autotune_guard: all 3 kernel/key entries agree across 2 files\n")
    assert "DISAGREE" not in agreeing[1] and "what each file chose" not in agreeing[1]


def test_markdown_diff_lists_what_changed(capsys, tmp_path):
    a = write(tmp_path / "a.rank0.json", record(0, {K: {KEY: cfg(64), KEY2: cfg(32)}}))
    b = write(tmp_path / "b.rank0.json", record(0, {K: {KEY: cfg(128), KEY2: cfg(32)}, "pkg.new": {KEY: cfg(16)}}))
    code, out, _ = run(capsys, "diff", "--format", "markdown", "--check", a, b)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "### autotune_guard diff: 1 kernel/key entry CHANGED or disagreeing"
    assert "1 same, 1 changed, 0 only in A, 1 only in B" in lines
    assert f"| `{K}` | `{KEY}` | sm90 | changed | `{signature(cfg(64))}` | `{signature(cfg(128))}` |" in lines
    assert f"| `pkg.new` | `{KEY}` | sm90 | only in B | — | `{signature(cfg(16))}` |" in lines
    assert not any(KEY2 in line for line in lines)  # unchanged keys are only counted
    same = run(capsys, "diff", "--format", "markdown", "--check", a, a)
    assert same[0] == 0 and same[1].startswith("### autotune_guard diff: no autotune choice changed\n")


@pytest.mark.parametrize("argv", [("show", "--format", "pdf", "x.json"), ("merge", "--format", "markdown", "x.json", "-o", "t.json")])
def test_a_format_that_does_not_exist_is_refused_by_name(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        report.main(list(argv))
    assert exit_info.value.code == 2
    assert "--format" in capsys.readouterr().err


# --- the CI gate's exit status through a pipe ------------------------------------------------------

def _many_keys(tmp_path, prefix, disagree):
    """Two ranks, 400 keys (text output far beyond a pipe's buffer); the last key disagrees if asked."""
    for r in (0, 1):
        keys = {f"{n},torch.float16": cfg(64 if (disagree and r and n == 399) else 32) for n in range(400)}
        write(tmp_path / f"{prefix}.rank{r}.json", record(r, {K: keys}))
    return tmp_path / prefix


@pytest.mark.slow
@pytest.mark.parametrize("argv", [("show", "--check"), ("show", "--check", "--format", "markdown"),
                                  ("show", "--check", "--json"), ("diff", "--check")])
def test_check_status_survives_a_reader_that_left(tmp_path, argv):
    """`report show --check RUN | head` under `set -o pipefail`: the reader leaving early must not
    turn ranks that disagree into exit 0 (nor into 120, Python's status for a failed flush)."""
    bad, good = _many_keys(tmp_path, "bad", True), _many_keys(tmp_path, "good", False)
    runs = (bad, good) if argv[0] == "diff" else (bad,)
    cmd = [sys.executable, "-m", "autotune_guard.report", *argv, *map(str, runs)]
    # A pipe whose reading end is closed before the command starts: its first write fails.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(cmd, stdout=write_end, stderr=subprocess.PIPE, env=clean_env(), timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 1 and b"Traceback" not in proc.stderr, proc.stderr.decode()[-2000:]
    # The shell's own pipe to `head -3`, which leaves after three lines.
    script = f"set -o pipefail; {shlex.join(cmd)} | head -3 >/dev/null"
    shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert shell.returncode == 1 and "Traceback" not in shell.stderr, shell.stderr[-2000:]
    # Without --check the reader leaving is no error.
    plain = [part for part in cmd if part != "--check"]
    shell = subprocess.run(["bash", "-c", f"set -o pipefail; {shlex.join(plain)} | head -3 >/dev/null"],
                           capture_output=True, text=True, env=clean_env(), timeout=120)
    assert shell.returncode == 0 and shell.stderr == "", shell.stderr[-2000:]
