"""Evidence and report inputs met as a user of a shared machine meets them (issue 35), on real
processes: programs that end with ``sys.exit(3)`` or ``sys.exit("message")``, journals planted
by another real user beside a finished record, cache directories with symlink loops, terminal
control sequences in files, NaN and infinite timings, and Ctrl-C of the report."""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from support import rank_file
from test_evidence import env_for, read, report

from autotune_guard.core import schema

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")

ENDING = """
import sys, threading, torch
from kernels import demo
demo.add(torch.arange(100.), torch.arange(100.))
threading.Thread(target=sys.exit, args=(5,)).start()  # a thread's exit ends the thread only
how = sys.argv[1]
if how == "caught":  # argparse's exit, caught, and the program carries on and ends normally
    try:
        sys.exit(2)
    except SystemExit:
        pass
    demo.add(torch.arange(300.), torch.arange(300.))  # a new choice: it went on
else:
    sys.exit(int(how) if how.lstrip("-").isdigit() else None if how == "none" else how)
"""


@pytest.mark.parametrize("how, ended, code", [("3", "exit 3", 3), ("loss is NaN", "exit 1: loss is NaN", 1),
                                              ("0", None, 0), ("none", None, 0), ("caught", None, 0)])
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


# --- the report's inputs ------------------------------------------------------------------------

CONFIG = {"kwargs": {"B": 32}, "num_warps": 4, "num_ctas": 1, "num_stages": 3, "maxnreg": None, "pre_hook": None}


def _cache_file(path, timings_by_block):
    path.parent.mkdir(parents=True, exist_ok=True)
    pairs = ", ".join(f'[{json.dumps({**CONFIG, "kwargs": {"B": b}})}, {t}]' for b, t in timings_by_block.items())
    path.write_text(f'{{"key": [64, "torch.float16"], "configs_timings": [{pairs}]}}')


def test_report_import_walks_a_cache_with_symlinks_to_itself_once(tmp_path):
    cache = tmp_path / "cache"
    _cache_file(cache / "h1" / "mm.autotune.json", {32: "[1.0, 0.9, 1.1]", 64: "[2.0, 1.9, 2.1]"})
    os.symlink(".", cache / "again")  # two symlinks to the directory itself: 2^depth paths to walk
    os.symlink("..", cache / "h1" / "up")
    proc = report("import", cache, "--arch", "sm90", "-o", tmp_path / "sm90.json", "--json")
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(proc.stdout)["entries"]
    assert [e["chosen"] for e in entries] == ["B=32,num_warps=4,num_stages=3,num_ctas=1"]


@pytest.mark.parametrize("bad", ["NaN", "-Infinity", "Infinity", "-1e999"])
def test_a_timing_that_is_not_finite_never_wins_an_import(tmp_path, bad):
    cache = tmp_path / "cache"
    _cache_file(cache / "h" / "mm.autotune.json", {32: "[1.0, 0.9, 1.1]", 64: f"[{bad}, {bad}, {bad}]"})
    proc = report("import", cache, "--arch", "sm90", "-o", tmp_path / "sm90.json", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "sm90.json").read_text())["kernels"]["mm"]["64,torch.float16"]["kwargs"] == {"B": 32}
    _cache_file(cache / "h" / "mm.autotune.json", {64: f"[{bad}, {bad}, {bad}]"})
    alone = report("import", cache, "--arch", "sm90", "-o", tmp_path / "sm90.json")
    assert alone.returncode == 2 and "no candidate has a finite time" in alone.stderr, alone.stderr


def _record(tmp_path):
    """A real record of one kernel and key (rank 0), as its document."""
    rec = tmp_path / "real" / "rec"
    code = "import torch\nfrom kernels import demo\ndemo.add(torch.arange(100.), torch.arange(100.))"
    subprocess.run([sys.executable, "-c", code], env=env_for(AUTOTUNE_RECORD_PATH=rec), check=True,
                   capture_output=True, timeout=120)
    return read(rank_file(rec, 0))


def test_a_timing_that_is_not_finite_never_wins_merge_fastest_or_show(tmp_path):
    document = _record(tmp_path)
    (entry,) = document["kernels"]["kernels.demo.add_kernel"].values()
    slowest = max(entry["timings"], key=lambda sig: entry["timings"][sig][0])
    run = tmp_path / "run"
    run.mkdir()
    for rank, bad in ((0, "NaN"), (1, "-Infinity")):
        text = json.dumps({**document, "rank": rank, "world_size": 2, "pid": 100 + rank})
        text = text.replace(json.dumps(slowest) + ": " + json.dumps(entry["timings"][slowest]),
                            json.dumps(slowest) + f": [{bad}, {bad}, {bad}]")
        assert bad in text
        (run / f"rec.rank{rank}.host-{100 + rank}.json").write_text(text)
    merged = report("merge", run / "rec", "--rule", "fastest", "-o", tmp_path / "t.json", "--json")
    assert merged.returncode == 0, merged.stderr
    (kernel,) = json.loads((tmp_path / "t.json").read_text())["kernels"].values()
    fastest = min(entry["timings"], key=lambda sig: entry["timings"][sig][0])
    assert "BLOCK={},".format(list(kernel.values())[0]["kwargs"]["BLOCK"]) in fastest + ","
    assert "NaN" not in merged.stdout and "Infinity" not in merged.stdout
    shown = report("show", run / "rec", "--json")
    assert shown.returncode == 0 and "NaN" not in shown.stdout and "Infinity" not in shown.stdout, shown.stderr
    text = report("show", run / "rec")
    assert not re.search(r"\bnan\b|\binf\b", text.stdout), text.stdout


ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b31m"


def test_terminal_control_characters_from_files_are_escaped_in_every_text_output(tmp_path):
    document = _record(tmp_path)
    kernels = document["kernels"]
    document["kernels"] = {"evil" + ESCAPES + ".kernel": kernels.pop("kernels.demo.add_kernel")}
    document["run_id"] = "run" + ESCAPES
    run = tmp_path / "run"
    run.mkdir()
    (run / "rec.rank0.host-1.json").write_text(json.dumps(document))
    odd = run / ("odd" + "\x1b[2J" + ".json")
    odd.write_text("{")  # a file named to clear the screen
    cache = tmp_path / "cache"
    _cache_file(cache / "h" / ("mm" + ESCAPES + ".autotune.json"), {32: "[1.0, 0.9, 1.1]"})
    outputs = [report("show", odd), report("show", run / "rec.rank0.host-1.json"),
               report("merge", run / "rec.rank0.host-1.json", "-o", tmp_path / "t.json"),
               report("import", cache, "--arch", "sm90", "-o", tmp_path / "sm90.json"),
               report("show", run / "rec.rank0.host-1.json", "--json")]
    for proc in outputs:
        for text in (proc.stdout, proc.stderr):
            assert not any(c in text for c in "\x1b\x07\x9b"), (proc.args, text)
    assert "evil\\x1b]0;owned\\x07" in outputs[1].stdout, outputs[1].stdout
    assert "\\x1b[2J" in outputs[0].stderr  # the odd file, named with its name escaped
    assert "mm\\x1b]0;owned" in outputs[3].stdout


def test_ctrl_c_of_the_report_is_one_line_and_status_130(tmp_path):
    document = _record(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    for rank in range(1500):
        document.update(rank=rank, world_size=1500, pid=1000 + rank)
        (run / f"rec.rank{rank}.host-{1000 + rank}.json").write_text(json.dumps(document))
    for jobs in ("1", "2"):
        # stdout is a pipe nobody reads: the report blocks writing once it is full (JSON lists every
        # file: far more than a pipe holds); Ctrl-C reaches the whole process group, as a terminal's does
        proc = subprocess.Popen([sys.executable, "-m", "autotune_guard.report", "show", str(run / "rec"),
                                 "--format", "json", "--jobs", jobs], env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # not the shell's
        time.sleep(4)
        assert proc.poll() is None, proc.stderr.read()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert err == "python -m autotune_guard.report: interrupted\n", err


# --- journals planted beside a record -------------------------------------------------------------

def _journal_lines(document, path):
    """A journal continuing the record ``path`` (its format, its journal_id) with one entry of a key
    the run never ran: read into the record, that key would appear in show and merge."""
    import gzip

    from autotune_guard.core.schema import JOURNAL_FORMAT

    (key, entry), = document["kernels"]["kernels.demo.add_kernel"].items()
    header = {"format": JOURNAL_FORMAT, "of": os.path.basename(path), "journal_id": document["journal_id"]}
    planted = {"kernel": "kernels.demo.add_kernel", "key": "999" + key[3:], "entry": entry}
    return gzip.compress("".join(json.dumps(v) + "\n" for v in (header, planted)).encode())


@pytest.fixture
def shared_results():
    """A results directory the group nobody shares, right under the system's temporary directory:
    not under pytest's ``/tmp/pytest-of-root``, which every pytest session that starts (another
    suite on this machine) sets back to mode 0700, so that user nobody could not reach it."""
    base = tempfile.mkdtemp(prefix="autotune-guard-shared-")
    os.chmod(base, 0o711)
    results = pathlib.Path(base) / "results"
    results.mkdir()
    os.chown(results, 0, NOBODY)
    results.chmod(0o770)  # a results directory the group shares
    yield results
    shutil.rmtree(base, ignore_errors=True)


def _plant_as_nobody(path, data):
    """Write ``path`` as user nobody (a forked child); what stopped it, if anything, is in the failure."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with open(path, "wb") as out:
                out.write(data)
            os._exit(0)
        except BaseException as exc:
            os.write(write_end, repr(exc).encode()[:2000])
            os._exit(1)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as said:
        why = said.read().decode()
    status = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    existing = os.stat(path) if os.path.lexists(path) else None
    assert status == 0, (why, existing, sorted(os.listdir(os.path.dirname(path))))


@root_only
@pytest.mark.parametrize("record", ["complete", "partial"])
def test_a_journal_another_user_planted_beside_a_record_is_never_read_into_it(tmp_path, shared_results, record):
    results = shared_results
    rec = results / "rec"
    code = "import torch\nfrom kernels import demo\ndemo.add(torch.arange(100.), torch.arange(100.))"
    subprocess.run([sys.executable, "-c", code], env=env_for(AUTOTUNE_RECORD_PATH=rec), check=True,
                   capture_output=True, timeout=120)
    path = rank_file(rec, 0)
    document = read(path)
    if record == "partial":  # as a rank killed before its final write leaves it
        document.update(complete=False, ended="SIGTERM")
        with open(path, "w") as out:
            json.dump(document, out)
    journal = schema.journal_of(path)
    _plant_as_nobody(journal, _journal_lines(document, path))
    shown = report("show", rec, "--json")
    merged = report("merge", rec, "-o", tmp_path / "t.json", "--allow-partial")
    assert shown.returncode == 0 and merged.returncode == 0, (shown.stderr, merged.stderr)
    assert "999," not in shown.stdout and "999," not in (tmp_path / "t.json").read_text()
    if record == "partial":
        said = f"{journal}: is a file of nobody (uid {NOBODY}), not of root (uid 0), who wrote"
        assert said in shown.stderr and said in merged.stderr, shown.stderr
        os.unlink(journal)  # the positive control: the same journal, of the file's owner, is read
        with open(journal, "wb") as out:
            out.write(_journal_lines(document, path))
        assert "999," in report("show", rec, "--json").stdout
    else:
        assert "journal" not in shown.stderr
    os.chown(path, NOBODY, NOBODY)  # a run planted whole by another user: read, and its owner named
    assert f"1 file read is of nobody (uid {NOBODY}), not of this user: {path}" in report("show", rec).stderr


@root_only
def test_an_unusable_file_another_user_planted_at_a_rank_file_name_does_not_stop_show(tmp_path, shared_results):
    results = shared_results
    rec = results / "rec"
    code = "import torch\nfrom kernels import demo\ndemo.add(torch.arange(100.), torch.arange(100.))"
    subprocess.run([sys.executable, "-c", code], env=env_for(AUTOTUNE_RECORD_PATH=rec), check=True,
                   capture_output=True, timeout=120)
    planted = results / "rec.rank1.intruder-1.json"
    _plant_as_nobody(planted, b'{"format": "autotune_guard.record/1", "kernels": {')
    shown = report("show", rec)
    assert shown.returncode == 0 and "rank 0" in shown.stdout, shown.stderr
    assert f"note: left out {planted}, a file of another user: {planted}: is not valid JSON" in shown.stderr
    os.chown(planted, 0, 0)  # the same file of this user is an unusable input: named, status 2
    assert report("show", rec).returncode == 2
