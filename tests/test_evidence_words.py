"""The evidence says what the log says (issue 58, items 3, 4 and 7's evidence parts).

A fallback is kept as a fallback and a table's choice as ``table`` in every mode; the verifier's
later all-clear names a disagreement that still stands; the start-up names an explicit mode and the
files record mode writes; a failed ``--check`` says so; a refused run's choice table says it was
refused; ``report --help`` says a table is a FILE. Real processes throughout (real Triton kernels
under TRITON_INTERPRET=1, a real torchrun over gloo, the report CLI as a process).
"""

import glob
import json
import os
import re
import subprocess
import sys

import pytest

from support import TESTS, clean_env, run_python, torchrun
from test_pinned import interpret_table

from autotune_guard.core import model, schema

SCALE_ONLY = interpret_table({"kernels.demo.scale_kernel": {"*": {"kwargs": {"BLOCK": 32}}}})
ADD, SCALE = "kernels.demo.add_kernel", "kernels.demo.scale_kernel"
THREE = """
import torch
from kernels import demo
x = torch.randn(400)
demo.scale(x[:100], 2.0)
demo.scale(x[:200], 2.0)
demo.add(x[:100], x[:100])
"""


def report(*argv, check=False):
    proc = subprocess.run([sys.executable, "-m", "autotune_guard.report", *map(str, argv)], env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def info(stderr: str) -> list[str]:
    return [line.split(" INFO: ", 1)[1] for line in stderr.splitlines() if " INFO: " in line]


def choices_of(prefix) -> dict:
    (path,) = glob.glob(f"{prefix}.rank*.json")
    return json.loads(open(path).read())["log"]


def test_one_vocabulary_defined_once():
    assert model.how_of_pick("table") == model.TABLE == "table"
    assert model.how_of_pick("min_cost") == "fallback (min_cost)" and model.how_of_pick("first") == "fallback (first)"
    assert model.is_fallback(model.how_of_pick(model.AT_EXIT)) and model.is_fallback("fallback (deterministic)")
    assert not any(model.is_fallback(how) for how in model.HOW + (model.OLD_PINNED,))


@pytest.mark.slow
def test_a_fallback_is_kept_as_one_and_a_table_choice_is_table_everywhere(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "interpret.json").write_text(json.dumps(SCALE_ONLY))
    prefix = tmp_path / "runs" / "pinned"
    proc = run_python(THREE, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=str(tables),
                                           AUTOTUNE_DIGEST_PATH=str(prefix)))
    log = choices_of(prefix)
    hows = {key.split("|")[1]: value.rpartition(";")[2] for key, value in log.items()}
    assert hows == {SCALE: "table", ADD: "fallback (min_cost)"}, log  # never "pinned"
    assert sorted(v.rpartition(";")[2] for v in log.values()) == ["fallback (min_cost)", "table", "table"]
    said = info(proc.stderr)
    assert any(line.endswith("(2 table, 1 fallback (min_cost))") and "1 of them fallbacks" in line for line in said), said
    assert re.search(r"kernels\.demo\.add_kernel .*  fallback \(min_cost\)$", "\n".join(said), re.M), said

    # report show: text, --check, JSON, markdown, diff: the fallback is named as one
    text = report("show", "--check", prefix, check=True).stdout
    assert "[fallback (min_cost)]" in text and text.count("[table]") == 2, text
    assert text.rstrip().endswith("0 disagreements, 1 fallback (keys the tables lacked, run by the AUTOTUNE_ON_MISS "
                                  "rule: often several times slower)"), text
    shown = json.loads(report("show", "--json", prefix, check=True).stdout)
    assert shown["fallbacks"] == 1
    assert {c["how"] for k in shown["keys"] for c in k["choices"]} == {"table", "fallback (min_cost)"}
    markdown = report("show", "--format", "markdown", prefix, check=True).stdout
    assert "| how |" in markdown and "| `fallback (min_cost)` |" in markdown and "1 fallback (keys" in markdown
    diffed = report("diff", prefix, prefix, check=True).stdout
    assert "(A: a fallback on 1 file(s): the tables lacked this key" in diffed, diffed
    assert "(B: a fallback on 1 file(s)" in diffed

    # consensus from the same table, in a lone process: "table" too, in the file and on the exit line
    lone = tmp_path / "runs" / "lone"
    proc = run_python("import torch\nfrom kernels import demo\nx = torch.randn(400)\n"
                      "demo.scale(x[:100], 2.0)\ndemo.scale(x[:200], 2.0)\n",
                      env=clean_env(AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=str(tables),
                                    AUTOTUNE_DIGEST_PATH=str(lone)))
    assert {v.rpartition(";")[2] for v in choices_of(lone).values()} == {"table"}
    assert any(line.endswith("(2 table)") for line in info(proc.stderr)), proc.stderr


@pytest.mark.slow
def test_an_older_choices_file_that_says_pinned_still_reads(tmp_path):
    sig = "BLOCK=32,num_warps=4,num_stages=3,num_ctas=1"
    log = {f"interpret|{SCALE}|100,torch.float32,torch.float32": f"{sig};pinned"}
    doc = {"format": schema.CHOICES_FORMAT, "rank": 0, "world_size": 1, "digest": model.digest_of(log),
           "count": 1, "log": log, "complete": True}
    path = tmp_path / "old.rank0.json"
    path.write_text(json.dumps(doc))
    text = report("show", path, check=True).stdout
    assert f"{sig}  [pinned]" in text and "fallback" not in text


@pytest.mark.slow
def test_the_verifiers_later_all_clear_names_the_disagreement_that_stands(tmp_path):
    for name, block in (("t0", 64), ("t1", 128)):  # the tables differ on add_kernel only
        (tmp_path / name).mkdir()
        (tmp_path / name / "interpret.json").write_text(json.dumps(interpret_table({
            ADD: {"*": {"kwargs": {"BLOCK": block}, "num_warps": 1}}, "scale_kernel": {"*": {"kwargs": {"BLOCK": 32}}}})))
    proc = torchrun(os.path.join(TESTS, "progs", "evidence_words_verify.py"), 2, args=[str(tmp_path / "t1")],
                    env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=str(tmp_path / "t0"),
                                  AUTOTUNE_VERIFY_EVERY=1))
    assert "DONE rank 0" in proc.stdout and "DONE rank 1" in proc.stdout
    first = re.search(r"ERROR: autotune choices differ .* at barrier 1 of this group: 1 kernel/key entry", proc.stderr)
    assert first, proc.stderr[-3000:]
    later = [line for line in proc.stderr.splitlines() if "at barrier 2 of this group" in line]
    assert len(later) == 1 and "all agree" not in later[0], later
    assert later[0].startswith("autotune_guard[rank 0] WARNING: autotune choices across the ranks of group 0,1 at "
                               "barrier 2 of this group: 2 kernel/key entries checked, the new ones agree, but 1 "
                               "disagreement found earlier still stands"), later
    assert re.search(rf"{ADD} key \(300,[^)]*\) arch interpret, found at barrier 1 of this group: rank 0: BLOCK=64,"
                     r"[^;]*; rank 1: BLOCK=128,", later[0]), later


@pytest.mark.slow
def test_an_explicit_mode_and_the_files_record_mode_writes_are_named_at_start(tmp_path):
    prefix = tmp_path / "runs" / "rec"
    proc = run_python(THREE, env=clean_env(AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=str(prefix)))
    said = info(proc.stderr)
    assert said[0] == "mode record, from AUTOTUNE_MODE", said
    assert said[1] == (f"writes record files {prefix}.rank<N>.<host>-<pid>.json (AUTOTUNE_RECORD_PATH), one a "
                       f"process; read them: python -m autotune_guard.report show {prefix}"), said
    assert len(glob.glob(f"{prefix}.rank0.*.json")) == 1
    pinned = run_python(THREE, env=clean_env(AUTOTUNE_MODE="pinned"))
    assert info(pinned.stderr)[0] == "mode pinned, from AUTOTUNE_MODE" and "writes" not in pinned.stderr


def _choices(path, rank, sig):
    log = {f"interpret|{SCALE}|100,torch.float32,torch.float32": f"{sig};timed"}
    path.write_text(json.dumps({"format": schema.CHOICES_FORMAT, "rank": rank, "world_size": 2, "run_id": "r",
                                "digest": model.digest_of(log), "count": 1, "log": log, "complete": True}))


@pytest.mark.slow
def test_a_failing_check_ends_with_one_line_saying_so(tmp_path):
    _choices(tmp_path / "ch.rank0.json", 0, "BLOCK=16,num_warps=4,num_stages=3,num_ctas=1")
    _choices(tmp_path / "ch.rank1.json", 1, "BLOCK=32,num_warps=4,num_stages=3,num_ctas=1")
    for argv in (("show", "--check"), ("show", "--check", "--json"), ("show", "--check", "--format", "html")):
        proc = report(*argv, tmp_path / "ch")
        assert proc.returncode == 1
        assert proc.stderr.splitlines()[-1] == ("python -m autotune_guard.report show --check: FAILED, exit status 1: "
                                                "1 of 1 kernel/key entries disagree across 2 files"), proc.stderr
    agreed = report("show", "--check", tmp_path / "ch.rank0.json")
    assert agreed.returncode == 0 and "FAILED" not in agreed.stderr


@pytest.mark.slow
def test_a_refused_runs_choice_table_says_it_was_refused_and_which_key(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "interpret.json").write_text(json.dumps(SCALE_ONLY))
    proc = run_python(THREE, check=False, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error",
                                                        AUTOTUNE_TABLE_PATH=str(tables)))
    assert proc.returncode != 0
    said = info(proc.stderr)
    (start,) = [i for i, line in enumerate(said) if line.startswith("what this process chose")]
    assert said[start] == "what this process chose before the guard refused 1 key (2 choices; the run was refused):", said
    assert re.match(rf"refused \(the reason above\): kernel {ADD} key \(100,", said[-1]), said


@pytest.mark.slow
def test_report_help_says_a_table_or_table_folder_is_a_file():
    top = " ".join(report("--help", check=True).stdout.split())
    assert "A table is a FILE too: a table file (<dir>/<arch>.json) or a table folder" in top
    show = " ".join(report("show", "--help", check=True).stdout.split())
    assert "table files, table folders (every <arch>.json in them)" in show
    diff = " ".join(report("diff", "--help", check=True).stdout.split())
    assert "a TABLE: a table file or table folder" in diff
