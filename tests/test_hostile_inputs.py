"""Evidence and report inputs met as a user of a shared machine meets them (issue 35), on real
processes: programs that end with ``sys.exit(3)`` or ``sys.exit("message")``, journals planted
by another real user beside a finished record, cache directories with symlink loops, terminal
control sequences in files, NaN and infinite timings, and Ctrl-C of the report."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from support import rank_file
from test_evidence import env_for, read, report

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")

ENDING = """
import sys, threading, torch
from kernels import demo
demo.add(torch.arange(100.), torch.arange(100.))
threading.Thread(target=sys.exit, args=(5,)).start()  # a thread's exit ends the thread only
how = sys.argv[1]
sys.exit(int(how) if how.lstrip("-").isdigit() else None if how == "none" else how)
"""


@pytest.mark.parametrize("how, ended, code", [("3", "exit 3", 3), ("loss is NaN", "exit 1: loss is NaN", 1),
                                              ("0", None, 0), ("none", None, 0)])
def test_a_failing_sys_exit_is_recorded_as_such_and_merge_treats_it_as_partial(tmp_path, how, ended, code):
    rec, ch = tmp_path / "rec", tmp_path / "ch"
    proc = subprocess.run([sys.executable, "-c", ENDING, how], env=env_for(AUTOTUNE_RECORD_PATH=rec,
                          AUTOTUNE_DIGEST_PATH=ch), capture_output=True, text=True, timeout=240)
    assert proc.returncode == code, proc.stderr[-3000:]
    for prefix in (rec, ch):
        document = read(rank_file(prefix, 0))
        assert document.get("ended") == ended and document["complete"] is (ended is None), document
    merged = report("merge", rec, "-o", tmp_path / "t.json")
    if ended is None:
        assert merged.returncode == 0, merged.stderr
        return
    assert merged.returncode != 0 and f"is a partial record (ended by {ended})" in merged.stderr, merged.stderr
    shown = report("show", ch)
    assert f"PARTIAL (ended by {ended})" in shown.stdout, shown.stdout
    assert report("merge", rec, "-o", tmp_path / "t.json", "--allow-partial").returncode == 0
