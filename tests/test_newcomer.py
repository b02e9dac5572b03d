"""What a newcomer meets (issue 34), in real processes under TRITON_INTERPRET=1: a pinned key the
tables lack is named (never silently slow), the exit says what was chosen, and an on-purpose
refusal (AUTOTUNE_ON_MISS=error) reads as a refusal under a 2-rank torchrun."""

import json
import os
import re

import pytest

from support import TESTS, clean_env, last_json, run_python, torchrun
from test_pinned import interpret_table

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

RUN = """
import json, torch, autotune_guard
from kernels import demo
x = torch.randn(400)
for n in (100, 200, 300):
    demo.add(x[:n], x[:n])
demo.scale(x[:100], 2.0)
print(json.dumps({"log": autotune_guard.choice_log()}))
"""

SCALE_ONLY = interpret_table({"kernels.demo.scale_kernel": {"*": {"kwargs": {"BLOCK": 32}}}})
ONE_ADD_KEY = interpret_table({"kernels.demo.add_kernel": {"no such key": {"kwargs": {"BLOCK": 64}}}})


def _tables(tmp_path, case):
    """AUTOTUNE_TABLE_PATH for one of the ways a table can lack a key, and the words that must name it."""
    tables = tmp_path / "tables"
    tables.mkdir()
    if case == "no table":
        return None, "no AUTOTUNE_TABLE_PATH was given"
    if case == "empty directory":
        return str(tables), f"{tables}: no file for this arch (interpret.json); the directory holds no table"
    if case == "table without the kernel":
        (tables / "interpret.json").write_text(json.dumps(SCALE_ONLY))
        return str(tables), f"{tables / 'interpret.json'}: no entry for this kernel (1 other kernel)"
    if case == "table without the key":
        (tables / "interpret.json").write_text(json.dumps(ONE_ADD_KEY))
        return str(tables), f"{tables / 'interpret.json'}: no entry for this key (1 other key of the kernel)"
    if case == "another arch's file":
        (tables / "sm90.json").write_text(json.dumps(interpret_table({}, "sm90")))
        return str(tables), f"{tables}: no file for this arch (interpret.json); it holds sm90.json"
    assert case == "another arch's table named"
    (tables / "sm90.json").write_text(json.dumps(interpret_table({}, "sm90")))
    return str(tables / "sm90.json"), f"{tables / 'sm90.json'}: for arch sm90, this process runs interpret"


def _fallback_lines(stderr, kernel):
    return [line for line in stderr.splitlines() if "fallback (" in line and kernel in line and "pinned runs" in line]


@pytest.mark.parametrize("case", ["no table", "empty directory", "table without the kernel", "table without the key",
                                  "another arch's file", "another arch's table named"])
def test_pinned_names_every_fallback_once_per_kernel(tmp_path, case):
    table_path, why = _tables(tmp_path, case)
    env = clean_env(AUTOTUNE_MODE="pinned", **({"AUTOTUNE_TABLE_PATH": table_path} if table_path else {}))
    proc = run_python(RUN, env=env)
    assert len(last_json(proc.stdout)["log"]) == 4
    lines = _fallback_lines(proc.stderr, "kernels.demo.add_kernel")
    assert len(lines) == 1, proc.stderr  # once per kernel, for its three keys
    assert " WARNING: " in lines[0] and "min_cost fallback (the smallest tile" in lines[0], lines[0]
    assert "AUTOTUNE_LOG_LEVEL=debug" in lines[0] and len(lines[0]) < 300, lines[0]  # short (issue 45)
    # why each table did not serve and the fix: at debug, on a line of its own
    detail = [line for line in run_python(RUN, env={**env, "AUTOTUNE_LOG_LEVEL": "debug"}).stderr.splitlines()
              if " DEBUG: " in line and "kernels.demo.add_kernel" in line and "Tables: " in line]
    assert len(detail) == 1 and why in detail[0], (why, detail)
    assert "report merge runs/rec -o " in detail[0] and "AUTOTUNE_MODE=consensus" in detail[0]
    falls = 3 if case == "table without the kernel" else 4  # the table serves scale_kernel there
    exit_line = [line for line in proc.stderr.splitlines() if "made 4 autotune choices" in line]
    assert len(exit_line) == 1 and f"({falls} of them fallbacks" in exit_line[0], proc.stderr
    assert len(_fallback_lines(proc.stderr, "kernels.demo.scale_kernel")) == (falls == 4)


def test_a_fallback_asked_for_is_said_at_info_and_a_table_hit_not_at_all(tmp_path):
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="first")
    lines = _fallback_lines(run_python(RUN, env=env).stderr, "kernels.demo.add_kernel")
    assert len(lines) == 1 and " INFO: " in lines[0] and "first fallback (the first declared config" in lines[0]
    assert "To pin tuned configs" not in lines[0] and "as AUTOTUNE_ON_MISS asks" in lines[0]
    full = interpret_table({"kernels.demo.add_kernel": {"*": {"kwargs": {"BLOCK": 64}, "num_warps": 1}},
                            "kernels.demo.scale_kernel": {"*": {"kwargs": {"BLOCK": 32}}}})
    (tmp_path / "interpret.json").write_text(json.dumps(full))
    proc = run_python(RUN, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=str(tmp_path)))
    assert "fallback" not in proc.stderr and "made 4 autotune choices, digest" in proc.stderr, proc.stderr


MANY = """
import torch
from kernels import demo
x = torch.randn(400)
for n in range(1, 24):
    demo.add(x[:n], x[:n])
demo.scale(x[:100], 2.0)
"""


def _summary(stderr):
    lines = [line.split(" INFO: ", 1)[1] for line in stderr.splitlines() if " INFO: " in line]
    start = [i for i, line in enumerate(lines) if line.startswith("what this process chose")]
    return lines[start[0]:] if start else []


def test_the_exit_summary_says_what_was_chosen_and_how(tmp_path):
    full = interpret_table({"kernels.demo.scale_kernel": {"*": {"kwargs": {"BLOCK": 32}}}})
    (tmp_path / "interpret.json").write_text(json.dumps(full))
    prefix = tmp_path / "runs" / "choices"
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=str(tmp_path), AUTOTUNE_DIGEST_PATH=str(prefix))
    summary = _summary(run_python(MANY, env=env).stderr)
    assert summary[0] == "what this process chose (24 choices):" and summary[1].split() == ["kernel", "key", "config", "how"]
    rows = summary[2:-1]
    assert len(rows) == 20 and all(r.split()[0] == "kernels.demo.add_kernel" and r.endswith("fallback (min_cost)")
                                   for r in rows), summary
    assert rows[0].split()[2] == "BLOCK=32,num_warps=1,num_stages=3,num_ctas=1"
    assert summary[-1] == f"  ... and 4 more: python -m autotune_guard.report show {prefix}"
    shown = run_python(f"import sys; from autotune_guard.report.cli import main; sys.exit(main(['show', {str(prefix)!r}]))",
                       env=clean_env()).stdout
    assert "kernels.demo.scale_kernel" in shown and "(23," in shown  # the rest is there
    # auto: timed; a small run's table is whole; AUTOTUNE_LOG_LEVEL=warning silences it
    auto = _summary(run_python(RUN, env=clean_env(AUTOTUNE_MODE="auto")).stderr)
    assert len(auto) == 6 and all(r.endswith("  timed") for r in auto[2:]), auto
    quiet = run_python(RUN, env=clean_env(AUTOTUNE_MODE="auto", AUTOTUNE_LOG_LEVEL="warning")).stderr
    assert "what this process chose" not in quiet and "autotune choices" not in quiet


def test_a_refusal_under_torchrun_is_a_few_lines_a_rank_naming_every_key(tmp_path):
    logs = tmp_path / "logs"
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error", AUTOTUNE_TABLE_PATH=str(tmp_path))
    proc = torchrun(os.path.join(TESTS, "progs", "refusal_job.py"), 2, env=env, check=False,
                    extra=("--log-dir", str(logs), "--redirects", "3"))
    assert proc.returncode != 0
    for rank in (0, 1):
        (found,) = [os.path.join(d, "stderr.log") for d, _, files in os.walk(logs)
                    if "stderr.log" in files and os.path.basename(d) == str(rank)]
        lines = [line.removeprefix(f"[rank{rank}]: ") for line in open(found).read().splitlines()]  # torch's tag
        # the explicit mode is named at start (issue 58), then the refusal's block
        assert lines[0] == f"autotune_guard[rank {rank}] INFO: mode pinned, from AUTOTUNE_MODE", lines
        lines = lines[1:]
        assert 3 <= len(lines) <= 10, lines
        assert all(line.startswith(f"autotune_guard[rank {rank}] ") for line in lines), lines
        text = "\n".join(lines)
        assert "Traceback" not in text and "refused: kernel kernels.demo.scale_kernel key (100," in lines[0], text
        assert "every key refused in this process (3):" in text
        for kernel, n in (("add_kernel", 100), ("add_kernel", 200), ("scale_kernel", 100)):
            assert re.search(rf"^autotune_guard\[rank {rank}\]   kernel kernels\.demo\.{kernel} key \({n},", text, re.M), text
        assert f"tables: {tmp_path}: no file for this arch (interpret.json)" in text
        assert f"report merge runs/rec -o {tmp_path / 'interpret.json'}" in text and "AUTOTUNE_TRACEBACK=1" in text
    traced = run_python("import sys; sys.argv = ['job']; exec(open(sys.argv[0] if False else %r).read())"
                        % os.path.join(TESTS, "progs", "refusal_job.py"), check=False,
                        env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error", AUTOTUNE_TRACEBACK="1",
                                      RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533"))
    assert "Traceback (most recent call last)" in traced.stderr and "SelectionError" in traced.stderr


TIE_RUN = """
import torch
from kernels import ranked
x = torch.randn(300)
assert ranked.copy(x).equal(x)
"""


def test_a_merge_tie_of_two_recorded_ranks_goes_to_the_faster_config(tmp_path):
    prefix = tmp_path / "runs" / "rec"
    for rank in (0, 1):
        run_python(TIE_RUN, env=clean_env(AUTOTUNE_RECORD_PATH=str(prefix), AUTOTUNE_RUN_ID="tie", RANK=rank,
                                          WORLD_SIZE=2))
    table = tmp_path / "interpret.json"
    merge = run_python(f"import sys; from autotune_guard.report.cli import main; "
                       f"sys.exit(main(['merge', {str(prefix)!r}, '-o', {str(table)!r}]))", env=clean_env())
    tie = re.search(r"tie of 2 at 1 vote, broken by the faster median \((BLOCK=\S+) (\S+) ms, (BLOCK=\S+) (\S+) ms\); "
                    r"votes: (\S+) x1, (\S+) x1", merge.stdout)
    assert tie and tie[1] == tie[5] and tie[3] == tie[6], merge.stdout  # configs beside medians, in the votes' order
    assert {tie[2], tie[4]} == {"1.05", "5"} and tie[1].startswith("BLOCK=256,") == (tie[2] == "1.05"), merge.stdout
    assert "WARNING" not in merge.stderr
    (entry,) = json.loads(table.read_text())["kernels"]["kernels.ranked.copy_kernel"].values()
    assert entry["kwargs"] == {"BLOCK": 256}  # not the smallest tile, rank 0's narrow winner


def test_report_reads_a_table_directory_and_both_entry_points_say_their_version(tmp_path):
    import subprocess
    import sys

    import autotune_guard

    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "interpret.json").write_text(json.dumps(SCALE_ONLY))
    (tables / "sm90.json").write_text(json.dumps(interpret_table({"pkg.mm": {"*": {"kwargs": {"BLOCK": 64}}}}, "sm90")))
    console = os.path.join(os.path.dirname(sys.executable), "autotune-guard-report")
    for command in ([sys.executable, "-m", "autotune_guard.report"], [console]):
        shown = subprocess.run([*command, "show", str(tables)], capture_output=True, text=True, env=clean_env())
        assert shown.returncode == 0 and "kernels.demo.scale_kernel" in shown.stdout and "pkg.mm" in shown.stdout, shown
        version = subprocess.run([*command, "--version"], capture_output=True, text=True, env=clean_env())
        assert version.returncode == 0 and version.stdout.strip() == f"autotune_guard {autotune_guard.__version__}"
        usage = subprocess.run([*command, "--help"], capture_output=True, text=True, env=clean_env()).stdout
        assert usage.startswith(f"usage: {'autotune-guard-report' if command == [console] else 'python -m autotune_guard.report'} ")
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = subprocess.run([sys.executable, "-m", "autotune_guard.report", "show", str(empty)], capture_output=True,
                             text=True, env=clean_env())
    assert refused.returncode == 2 and "is a directory holding no .json file" in refused.stderr
