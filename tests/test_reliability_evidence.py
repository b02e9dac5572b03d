"""Evidence that is never lost, forged or silently split (issue 20), on real processes: a symlink
swap race in a shared directory (root and a second user), a planted file dated 2100, SIGTERM while
ranks are blocked in native code, Ctrl-C and exceptions, ``torchrun --max-restarts 1``, a
``chdir`` after start, long and glob-like prefixes, a filesystem that refuses the write at exit,
and failed candidates' times in strict JSON."""

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

from support import TESTS, rank_file, rank_files, torchrun
from test_evidence import env_for, read, report

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

PROGS = os.path.join(TESTS, "progs")
NOBODY = 65534


def _tag(pid):
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0]) or "host"
    return f"{host}-{pid}"


def _attack(directory, victim, pid, prefixes, stop):
    """As another user: point symlinks at ``victim`` from the names the guard will write, and keep
    swapping every name in ``directory`` (temporary files included) for such a symlink."""
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    swaps = 0
    for prefix in prefixes:
        os.symlink(victim, f"{prefix}.rank0.{_tag(pid)}.json")  # before the guard's first write
    while not os.path.exists(stop):
        for name in os.listdir(directory):
            if name.startswith(".link-"):
                continue
            link = os.path.join(directory, f".link-{os.getpid()}-{swaps}")
            try:
                os.symlink(victim, link)
                os.replace(link, os.path.join(directory, name))
                swaps += 1
            except OSError:
                try:
                    os.unlink(link)
                except OSError:
                    pass
    os._exit(10 + min(swaps, 200))  # (1: it failed)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to act as a second user")
@pytest.mark.parametrize("shared", ["sticky-world-writable", "group-writable"])
def test_a_symlink_swap_race_in_a_shared_directory_never_touches_the_victim(tmp_path_factory, shared):
    tmp_path = tmp_path_factory.mktemp("shared")
    for above in (tmp_path, *tmp_path.parents):  # the other user must reach the shared directory
        if str(above) in ("/", "/tmp"):
            break
        above.chmod(above.stat().st_mode | 0o711)
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o755)
    victim = secret / "id_rsa"
    victim.write_text("PRIVATE KEY\n")
    victim.chmod(0o600)
    results = tmp_path / "results"
    results.mkdir()
    if shared == "sticky-world-writable":
        results.chmod(0o1777)
    else:  # the case: another member of the group can rename our temporary files
        os.chown(results, 0, NOBODY)
        results.chmod(0o770)
    ch, rec, stop = results / "ch", results / "rec", tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, os.path.join(PROGS, "reliability_writer.py"), "12", "0.25"],
                            env=env_for(AUTOTUNE_DIGEST_PATH=ch, AUTOTUNE_RECORD_PATH=rec),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    attacker = os.fork()
    if attacker == 0:
        try:
            _attack(str(results), str(victim), proc.pid, (str(ch), str(rec)), str(stop))
        finally:
            os._exit(1)
    try:
        out, err = proc.communicate(timeout=400)
    finally:
        stop.write_text("")
        _, status = os.waitpid(attacker, 0)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    swaps = os.waitstatus_to_exitcode(status) - 10
    assert swaps >= 0, status
    if shared == "group-writable":
        assert swaps > 0  # it did replace files of the guard's (temporary or final) by symlinks
    info = os.stat(victim)
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == 0
    assert victim.read_text() == "PRIVATE KEY\n"
    assert err.count(f"the evidence files go to {results}, which") == 1  # the shared directory, named once
    if shared == "sticky-world-writable":
        # The names the other user took are left alone; the evidence went elsewhere, named once.
        for prefix in (ch, rec):
            taken = f"{prefix}.rank0.{_tag(proc.pid)}.json"
            assert os.path.islink(taken)
            (written,) = [p for p in rank_files(prefix, 0) if not os.path.islink(p)]
            assert err.count(f"goes to {written} instead") == 1
            doc = read(written)
            assert doc["complete"] is True and os.stat(written).st_uid == 0
        assert len(read(written)["kernels"]["kernels.demo.add_kernel"]) == 12
        shown = report("show", ch)
        assert shown.returncode == 0, shown.stderr
        assert "not a regular file" in shown.stderr and "rank 0" in shown.stdout


def test_a_planted_file_dated_2100_is_not_the_latest_run(tmp_path):
    rec = tmp_path / "rec"
    planted = tmp_path / "rec.rank0.intruder-1.json"
    code = "import torch\nfrom kernels import demo\ndemo.add(torch.arange(100.), torch.arange(100.))"
    subprocess.run([sys.executable, "-c", code], env=env_for(AUTOTUNE_RECORD_PATH=rec), check=True,
                   capture_output=True, timeout=120)
    (real,) = rank_files(rec, 0)
    document = read(real)
    forged = json.loads(json.dumps(document))
    for entry in forged["kernels"]["kernels.demo.add_kernel"].values():
        entry["config"]["kwargs"]["BLOCK"] = 1024  # a config of the intruder's choosing
    year_2100 = 4102444800.0
    forged.update(run_id="planted", updated=year_2100, started=year_2100, written="2100-01-01T00:00:00+0000")
    planted.write_text(json.dumps(forged))
    os.utime(real, (time.time() - 60, time.time() - 60))  # the real run ended a minute ago
    os.utime(planted, (year_2100, year_2100))  # and the planted file's time on disk is set too
    merged = report("merge", rec, "-o", tmp_path / "t.json")
    assert merged.returncode == 0, merged.stderr
    assert read(tmp_path / "t.json")["source"]["files"] == [real]
    assert f"left out {planted}" in merged.stderr and "lies in the future" in merged.stderr
    # Contents claiming a later time, with an honest time on disk: still not the latest run.
    os.utime(planted, (time.time() - 120, time.time() - 120))
    merged = report("merge", rec, "-o", tmp_path / "t.json")
    assert merged.returncode == 0 and read(tmp_path / "t.json")["source"]["files"] == [real], merged.stderr


def _wait_for(predicate, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def sigint_as_a_terminal_gives_it():
    """In the child: SIGINT's default action. A suite started in the background by a shell
    (``cmd &``) ignores SIGINT, every child inherits that, and Python then never raises
    KeyboardInterrupt: Ctrl-C tests would test the shell, not the guard."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _launch(script, nproc, env, *args, extra=()):
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             f"--nproc-per-node={nproc}", *extra, script, *map(str, args)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_a_terminal_gives_it)


def test_sigterm_while_ranks_are_blocked_in_native_code_saves_and_ends_in_seconds(tmp_path):
    """Rank 1 in a c10d Store wait, rank 0 in a barrier waiting for it: torchrun's SIGTERM must
    end both at once (not after its 30 s grace and SIGKILL), each file saying how it ended."""
    ch = tmp_path / "ch"
    proc = _launch(os.path.join(PROGS, "reliability_blocked.py"), 2, env_for(AUTOTUNE_DIGEST_PATH=ch), tmp_path)
    try:
        assert _wait_for(lambda: all((tmp_path / f"ready{r}").exists() for r in (0, 1))), proc.stderr
        time.sleep(1.0)  # inside the native calls by now
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 12, f"torchrun took {took:.1f} s to stop the blocked ranks\n{err[-3000:]}"
    assert "SIGKILL" not in err, err[-3000:]
    for rank in (0, 1):
        doc = read(rank_file(ch, rank))
        assert doc["ended"] == "SIGTERM" and doc["complete"] is False and doc["count"] == 1, rank
    for pid in re.findall(r"exitcode\s*:\s*(-?\d+)", err):
        assert int(pid) == -signal.SIGTERM, err[-3000:]  # they died of SIGTERM, as without the guard


def _ending(tmp_path, how, *args, sig=None):
    ch = tmp_path / "ch"
    proc = subprocess.Popen([sys.executable, os.path.join(PROGS, "reliability_endings.py"), how, *args],
                            env=env_for(AUTOTUNE_DIGEST_PATH=ch, PYTHONFAULTHANDLER="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_as_a_terminal_gives_it)
    try:
        if sig is not None:
            assert proc.stdout.readline().strip() == "ready"
            proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=200)
        except subprocess.TimeoutExpired:  # where every thread stood (faulthandler, on SIGABRT), to say why
            proc.send_signal(signal.SIGABRT)
            raise AssertionError(f"{how}: no exit within 200 s; its threads:\n{proc.communicate()[1][-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err, ch


@pytest.mark.parametrize("how, sig, ended", [("wait", signal.SIGINT, "SIGINT"), ("exception", None, "exception")])
def test_ctrl_c_and_an_exception_are_recorded_as_partial(tmp_path, how, sig, ended):
    code, err, ch = _ending(tmp_path, how, sig=sig)
    assert code != 0
    path = rank_file(ch, 0)
    doc = read(path)
    assert doc["ended"] == ended and doc["complete"] is False, err[-2000:]
    shown = report("show", ch)
    assert f"PARTIAL (ended by {ended})" in shown.stdout, shown.stdout


def test_merge_refuses_a_record_that_ended_otherwise_than_normally_naming_it(tmp_path):
    rec = tmp_path / "rec"
    proc = subprocess.run([sys.executable, os.path.join(PROGS, "reliability_endings.py"), "exception"],
                          env=env_for(AUTOTUNE_RECORD_PATH=rec), capture_output=True, text=True, timeout=200)
    assert proc.returncode == 1 and "the program fails on purpose" in proc.stderr
    path = rank_file(rec, 0)
    merged = report("merge", rec, "-o", tmp_path / "t.json")
    assert merged.returncode == 2 and f"{path}: is a partial record (ended by exception)" in merged.stderr
    assert report("merge", "--allow-partial", rec, "-o", tmp_path / "t.json").returncode == 0


def test_an_exception_in_another_thread_is_not_an_ending(tmp_path):
    code, err, ch = _ending(tmp_path, "thread-exception")
    assert code == 0 and "ZeroDivisionError" in err
    doc = read(rank_file(ch, 0))
    assert doc["complete"] is True and "ended" not in doc


def test_kill_int_of_torchrun_is_recorded_as_sigint(tmp_path):
    ch = tmp_path / "ch"
    proc = _launch(os.path.join(PROGS, "reliability_endings.py"), 2, env_for(AUTOTUNE_DIGEST_PATH=ch), "wait",
                   tmp_path)
    try:
        assert _wait_for(lambda: all((tmp_path / f"ready{r}").exists() for r in (0, 1))), proc.stderr
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    for rank in (0, 1):
        doc = read(rank_file(ch, rank))
        assert doc["complete"] is False and doc["ended"] == "SIGINT", (rank, doc.get("ended"), err[-2000:])


def test_each_restart_attempt_is_its_own_run_and_merge_counts_a_rank_once(tmp_path):
    rec = tmp_path / "rec"
    proc = torchrun(os.path.join(PROGS, "reliability_restart.py"), 2, env=env_for(AUTOTUNE_RECORD_PATH=rec),
                    args=[str(tmp_path / "marker")], extra=["--max-restarts=1"], timeout=400)
    assert (tmp_path / "marker").read_text() == "0"
    for rank in (0, 1):
        docs = sorted((read(p) for p in rank_files(rec, rank)), key=lambda d: d["attempt"])
        assert [d["attempt"] for d in docs] == [0, 1], proc.stderr[-3000:]
        assert len({d["run_id"] for d in docs}) == 1
        assert docs[0]["complete"] is False and docs[1]["complete"] is True
    merged = report("merge", "--json", rec, "-o", tmp_path / "t.json")
    assert merged.returncode == 0, merged.stderr
    entries = json.loads(merged.stdout)["entries"]
    # Each rank once (one vote per key), and none of the failed attempt's keys (n = 100, 101).
    assert sorted(e["key"].split(",")[0] for e in entries) == ["300", "301"], entries
    assert all(sum(e["votes"].values()) == 1 for e in entries)
    notes = [line for line in merged.stderr.splitlines() if "earlier attempts" in line]
    assert len(notes) == 1 and notes[0].count("(attempt 0") == 2, merged.stderr


def test_a_relative_prefix_is_fixed_at_start_up_whatever_the_program_chdirs_to(tmp_path):
    (tmp_path / "job").mkdir()
    proc = subprocess.run([sys.executable, os.path.join(PROGS, "reliability_endings.py"), "chdir", "job"],
                          env=env_for(AUTOTUNE_DIGEST_PATH="runs/ch"), cwd=tmp_path, capture_output=True,
                          text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "job" / "runs").exists()
    doc = read(rank_file(tmp_path / "runs" / "ch", 0))
    assert doc["complete"] is True and doc["count"] == 2  # both choices, in the one file


def test_a_prefix_whose_names_would_be_too_long_is_refused_at_start_up(tmp_path):
    prefix = tmp_path / ("p" * 220)
    code = "import triton\nprint('started')"
    proc = subprocess.run([sys.executable, "-c", code], env=env_for(AUTOTUNE_DIGEST_PATH=prefix),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "started" not in proc.stdout
    assert f"AUTOTUNE_DIGEST_PATH={str(prefix)!r}" in proc.stderr and "255-byte limit" in proc.stderr, proc.stderr
    # A prefix that fits, just: accepted, and its files are written.
    room = int(re.search(r"at most (\d+) bytes", proc.stderr).group(1))
    fits = tmp_path / ("p" * room)
    code = "import torch\nfrom kernels import demo\ndemo.add(torch.arange(100.), torch.arange(100.))"
    proc = subprocess.run([sys.executable, "-c", code], env=env_for(AUTOTUNE_DIGEST_PATH=fits),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert read(rank_file(fits, 0))["complete"] is True


def test_a_write_refused_at_exit_names_the_file(tmp_path):
    code, err, ch = _ending(tmp_path, "fsize")
    assert code == 0
    path = rank_file(ch, 0)
    assert "could not write the choices/record files at exit" in err and path in err, err[-2000:]
    assert read(path)["count"] == 1  # the copy kept current before the limit


def test_a_glob_like_prefix_is_read_literally(tmp_path):
    prefix = tmp_path / "run[1]*" / "ch?"
    code = "import torch\nfrom kernels import demo\ndemo.add(torch.arange(100.), torch.arange(100.))"
    subprocess.run([sys.executable, "-c", code], env=env_for(AUTOTUNE_DIGEST_PATH=prefix), check=True,
                   capture_output=True, timeout=120)
    shown = report("show", "--check", prefix)
    assert shown.returncode == 0 and "rank 0" in shown.stdout, shown.stderr


def test_a_failed_candidates_time_is_written_as_strict_json(tmp_path):
    rec = tmp_path / "rec"
    proc = subprocess.run([sys.executable, os.path.join(PROGS, "reliability_failed_candidate.py")],
                          env=env_for(AUTOTUNE_RECORD_PATH=rec), capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    path = rank_file(rec, 0)
    with open(path) as src:
        document = json.loads(src.read(), parse_constant=refuse)
    ((entry,),) = [list(entries.values()) for entries in document["kernels"].values()]
    timings = list(entry["timings"].values())
    assert [None, None, None] in timings and len(timings) == 3
    assert entry["signature"] != "BLOCK=16,num_warps=4,num_stages=3,num_ctas=1"  # the failed one never wins
    shown = report("show", "--json", rec)
    assert shown.returncode == 0, shown.stderr
    merged = report("merge", rec, "-o", tmp_path / "t.json", "--rule", "fastest")
    assert merged.returncode == 0, merged.stderr
