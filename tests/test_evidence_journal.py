"""Evidence at scale: a file past its first few KiB is kept current through its journal
(``<file>.jsonl.gz``), read with it by the report; a SIGKILLed rank's choices are all there
(as partial); a normal exit leaves one whole file and no journal.  Real processes, real
signals, the real report CLI."""

import os
import signal
import subprocess
import sys

import pytest

from support import TESTS, clean_env, rank_file

from autotune_guard.core import schema
from autotune_guard.core.jsonfile import read_journal

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

PROGS = os.path.join(TESTS, "progs")
KEYS = 300  # a record of 300 entries is far past the size kept whole (16 KiB)


def _run(tmp_path, *args):
    env = clean_env(AUTOTUNE_RECORD_PATH=tmp_path / "rec", AUTOTUNE_DIGEST_PATH=tmp_path / "ch")
    return subprocess.Popen([sys.executable, os.path.join(PROGS, "evidence_many.py"), str(KEYS), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _report(*args):
    return subprocess.run([sys.executable, "-m", "autotune_guard.report", *args], capture_output=True, text=True,
                          env=clean_env(), timeout=240)


def test_a_sigkilled_rank_leaves_file_and_journal_and_the_report_reads_both(tmp_path):
    proc = _run(tmp_path)
    try:
        assert int(proc.stdout.readline()) == KEYS
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    record = rank_file(tmp_path / "rec", 0)
    journal = schema.journal_of(record)
    assert os.path.isfile(journal), sorted(os.listdir(tmp_path))
    alone = schema.read_document(record)
    in_file = sum(len(e) for e in alone["kernels"].values())
    assert alone["complete"] is False and in_file < KEYS  # the rest is in the journal only
    lines, torn = read_journal(journal)
    assert lines[0]["journal_id"] == alone["journal_id"] and not torn
    whole, read = schema.read_evidence(record)
    assert read == journal and sum(len(e) for e in whole["kernels"].values()) == KEYS
    choices, _ = schema.read_evidence(rank_file(tmp_path / "ch", 0))
    assert choices["count"] == len(choices["log"]) == KEYS
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]

    shown = _report("show", str(tmp_path / "rec"))
    assert shown.returncode == 0, shown.stderr
    assert "PARTIAL" in shown.stdout and f"with its journal {os.path.basename(journal)}" in shown.stdout
    assert f"{KEYS} choices" in shown.stdout
    merged = _report("merge", "--allow-partial", str(tmp_path / "rec"), "-o", str(tmp_path / "t.json"))
    assert merged.returncode == 0, merged.stderr
    table = schema.read_document(str(tmp_path / "t.json"))
    assert sum(len(e) for e in table["kernels"].values()) == KEYS
    named = _report("show", journal)
    assert named.returncode == 2 and "is the journal of" in named.stderr and os.path.basename(record) in named.stderr


def test_a_normal_exit_leaves_one_whole_file_and_no_journal(tmp_path):
    proc = _run(tmp_path, "exit")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    for prefix in ("rec", "ch"):
        path = rank_file(tmp_path / prefix, 0)
        document = schema.read_document(path)
        assert document["complete"] is True and not os.path.exists(schema.journal_of(path))
        count = len(document["log"]) if prefix == "ch" else sum(len(e) for e in document["kernels"].values())
        assert count == KEYS
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(rank_file(tmp_path / p, 0)) for p in ("ch", "rec"))


def test_a_stale_journal_is_not_read_into_a_file_written_whole_after_it(tmp_path):
    proc = _run(tmp_path)
    try:
        assert int(proc.stdout.readline()) == KEYS and proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    path = rank_file(tmp_path / "ch", 0)
    document = schema.read_document(path)
    document["journal_id"] = "0" * 16  # as if the file were written whole again after the journal
    with open(path, "w") as out:
        import json
        json.dump(document, out)
    again, journal = schema.read_evidence(path)
    assert journal is None and len(again["log"]) == len(document["log"]) < KEYS
