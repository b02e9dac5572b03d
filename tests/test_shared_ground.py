"""Shared directories and shared stores are hostile ground (issue 35), on real processes: real
2-rank ``torchrun`` consensus jobs over gloo with real Triton kernels under ``TRITON_INTERPRET=1``,
real files, and (as root) a second real user, ``nobody``, doing the harm from a forked child:
holding the table lock, planting symlinks and tables, making the node Store's directory first."""

import fcntl
import json
import os
import shutil
import stat
import time

import pytest

from support import TESTS, torchrun
from test_consensus_table import WORKER, env_for, read_table

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")


def reachable(path):
    """Let another user reach ``path`` (pytest's directories are 0700)."""
    for above in (path, *path.parents):
        if str(above) in ("/", "/tmp"):
            break
        above.chmod(above.stat().st_mode | 0o711)


def as_nobody(action):
    """Run ``action()`` as the user nobody in a forked child; its exit status is returned."""
    child = os.fork()
    if child == 0:
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            action()
            os._exit(0)
        except BaseException as exc:
            os.write(2, f"as nobody: {exc!r}\n".encode())
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])


def run_job(table_dir, out_dir, tmpdir=None, timeout=300, runtime=None):
    """A 2-rank consensus job growing ``table_dir``; its own TMPDIR (the node Store's directory)
    and runtime directory (none unless given)."""
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(table_dir, exist_ok=True)
    env = env_for(table_dir)
    env.pop("XDG_RUNTIME_DIR", None)
    if runtime is not None:
        env["XDG_RUNTIME_DIR"] = str(runtime)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    started = time.monotonic()
    proc = torchrun(WORKER, 2, env=env, args=(str(out_dir), "1000,2000", "500"), timeout=timeout)
    return proc, time.monotonic() - started


def private_tmp(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    return tmpdir


def test_a_job_exits_when_another_process_holds_the_table_lock_naming_file_and_holder(tmp_path):
    table_dir = tmp_path / "tables"
    table_dir.mkdir()
    lock = table_dir / ".interpret.lock"
    lock.write_text("")
    ready_r, ready_w = os.pipe()
    holder = os.fork()
    if holder == 0:  # a process of this user that took the lock and stopped
        fd = os.open(lock, os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX)
        os.write(ready_w, b"x")
        time.sleep(600)
        os._exit(0)
    try:
        os.read(ready_r, 1)
        proc, took = run_job(table_dir, tmp_path / "out", private_tmp(tmp_path), timeout=120)
    finally:
        os.kill(holder, 9)
        os.waitpid(holder, 0)
    assert took < 60, took  # without a bound it never exits
    said = [line for line in proc.stderr.splitlines() if f"could not lock {lock} within 10 s" in line]
    assert len(said) == 2, proc.stderr[-3000:]  # one line per rank (each adds its own winners)
    assert all(f"process {holder} holds it" in line for line in said)
    assert not (table_dir / "interpret.json").exists()
    proc, took = run_job(table_dir, tmp_path / "out2", tmp_path / "tmp")
    assert "could not lock" not in proc.stderr and read_table(table_dir)["kernels"]  # without the holder: grown


@root_only
def test_a_read_lock_of_another_user_who_can_only_read_the_lock_file_costs_a_bounded_wait(tmp_path):
    reachable(tmp_path)
    table_dir = tmp_path / "tables"
    table_dir.mkdir(mode=0o755)
    lock = table_dir / ".interpret.lock"
    lock.write_text("")
    lock.chmod(0o644)
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()

    def hold():
        fd = os.open(lock, os.O_RDONLY)
        fcntl.lockf(fd, fcntl.LOCK_SH)
        os.write(ready_w, b"x")
        os.read(stop_r, 1)

    holder = os.fork()
    if holder == 0:
        os._exit(as_nobody(hold))
    os.read(ready_r, 1)
    try:
        proc, took = run_job(table_dir, tmp_path / "out", private_tmp(tmp_path), timeout=120)
    finally:
        alive = os.waitpid(holder, os.WNOHANG)
        os.write(stop_w, b"x")
        status = os.waitpid(holder, 0)[1] if alive == (0, 0) else alive[1]
    assert alive == (0, 0) and os.waitstatus_to_exitcode(status) == 0  # it held the lock throughout
    assert took < 60 and proc.returncode == 0
    assert proc.stderr.count(f"could not lock {lock} within 10 s: process ") == 2, proc.stderr[-3000:]


@root_only
def test_a_symlinked_lock_file_is_never_followed(tmp_path):
    reachable(tmp_path)
    table_dir = tmp_path / "tables"
    table_dir.mkdir()
    table_dir.chmod(0o1777)
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    victim = secret / "created-by-the-victim"
    assert as_nobody(lambda: os.symlink(victim, table_dir / ".interpret.lock")) == 0
    proc, _ = run_job(table_dir, tmp_path / "out", private_tmp(tmp_path))
    assert not os.path.lexists(victim)
    assert os.path.islink(table_dir / ".interpret.lock")
    assert f"{table_dir / '.interpret.lock'}: is a symlink: not followed" in proc.stderr
    assert not (table_dir / "interpret.json").exists()


def _team_table(tmp_path):
    """A real table of the same kernels, as another team member's job made it, but for the scale
    kernel (which a job then tunes, and adds)."""
    first = tmp_path / "first"
    first.mkdir()
    run_job(first, tmp_path / "out0", private_tmp(tmp_path))
    document = read_table(first)
    del document["kernels"]["kernels.demo.scale_kernel"]
    document.get("provenance", {}).pop("kernels.demo.scale_kernel", None)
    return json.dumps(document)


def nobodys_directory(tmp_path):
    theirs = tmp_path / "nobody"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    return theirs


@root_only
def test_a_symlinked_table_is_named_and_never_made_the_victims_own_file(tmp_path):
    forged = _team_table(tmp_path)
    reachable(tmp_path)
    team = tmp_path / "team"
    team.mkdir()
    os.chown(team, 0, NOBODY)
    team.chmod(0o775)  # a team table directory, its group can write it
    theirs = nobodys_directory(tmp_path) / "theirs.json"

    def plant():
        theirs.write_text(forged)
        os.symlink(theirs, team / "interpret.json")

    assert as_nobody(plant) == 0
    proc, _ = run_job(team, tmp_path / "out", tmp_path / "tmp")
    table = team / "interpret.json"
    assert os.path.islink(table) and theirs.read_text() == forged and os.stat(theirs).st_uid == NOBODY
    assert f"{table}: is a symlink: not followed and not replaced" in proc.stderr
    assert proc.stderr.count(f"(through the symlink {table}) is a file of nobody (uid {NOBODY})") == 2  # once a rank
    assert proc.stderr.count(f"the table directory {team} can be written by group {NOBODY}") == 2  # once a rank


@root_only
def test_a_table_of_another_user_is_named_when_it_is_run_and_grown(tmp_path):
    forged = _team_table(tmp_path)
    reachable(tmp_path)
    team = tmp_path / "team"
    team.mkdir(mode=0o755)
    table = team / "interpret.json"
    table.write_text(forged)
    os.chown(table, NOBODY, NOBODY)
    proc, _ = run_job(team, tmp_path / "out", tmp_path / "tmp")
    said = f"table {table} is a file of nobody (uid {NOBODY}): its entries are run as they are"
    assert proc.stderr.count(said) == 2, proc.stderr[-3000:]  # once a rank
    assert "can be written by" not in proc.stderr  # a directory only its owner writes is not named


def _node_stores(directory):
    return sorted(p for p in os.listdir(directory) if p.startswith("node-")) if os.path.isdir(directory) else []


def test_the_node_store_lies_in_a_private_directory_and_is_removed_when_the_job_ends(tmp_path):
    tmpdir = private_tmp(tmp_path)
    proc, _ = run_job(tmp_path / "tables", tmp_path / "out", tmpdir)
    folder = tmpdir / f"autotune_guard-{os.geteuid()}"
    info = os.lstat(folder)
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    assert _node_stores(folder) == []  # the node's last rank removed it
    assert "node's Store" not in proc.stderr
    # with a runtime directory of this user's, the Store lies there ($XDG_RUNTIME_DIR/autotune_guard)
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    shutil.rmtree(folder)
    proc, _ = run_job(tmp_path / "tables", tmp_path / "out2", tmpdir, runtime=runtime)
    assert not folder.exists() and stat.S_IMODE(os.lstat(runtime / "autotune_guard").st_mode) == 0o700
    assert _node_stores(runtime / "autotune_guard") == [] and "node's Store" not in proc.stderr
    runtime.chmod(0o777)  # a runtime directory others can write is not used
    run_job(tmp_path / "tables", tmp_path / "out3", tmpdir, runtime=runtime)
    assert folder.exists()


@root_only
@pytest.mark.parametrize("planted", ["world-writable directory", "symlink"])
def test_a_node_store_directory_another_user_made_first_is_refused_by_name(tmp_path, planted):
    reachable(tmp_path)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    tmpdir.chmod(0o1777)
    folder = tmpdir / f"autotune_guard-{os.geteuid()}"
    theirs = nobodys_directory(tmp_path) / "theirs"

    def plant():
        if planted == "symlink":
            os.mkdir(theirs, 0o777)
            os.chmod(theirs, 0o777)
            os.symlink(theirs, folder)
        else:
            os.mkdir(folder, 0o777)
            os.chmod(folder, 0o777)

    assert as_nobody(plant) == 0
    proc, _ = run_job(tmp_path / "tables", tmp_path / "out", tmpdir)
    what = "is a symlink" if planted == "symlink" else f"is a directory of nobody (uid {NOBODY})"
    assert proc.stderr.count(f"the node's Store {folder}/node-") == 2, proc.stderr[-3000:]
    assert f"{folder}: {what}" in proc.stderr and "this rank asks the job's Store itself" in proc.stderr
    assert _node_stores(folder) == [] and (not theirs.exists() or _node_stores(theirs) == [])
    assert read_table(tmp_path / "tables")["kernels"]  # the job did its work through the job's Store


def test_a_foreign_name_in_the_announced_list_never_stalls_a_rank(tmp_path):
    import socket
    import subprocess
    import sys

    from support import clean_env, last_json

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = clean_env(AUTOTUNE_MODE="consensus", RANK=rank, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=port)
        for name in ("LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"):
            env.pop(name, None)
        procs.append(subprocess.Popen([sys.executable, os.path.join(TESTS, "progs", "consensus_foreign_name.py"), "60"],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        results.append(last_json(out))
    assert results[1]["took"] < 30, results  # the Store's timeout (60 s) is never waited for
    # Each key timed once for the job: rank 0 claims them while rank 1 sleeps 3 s; on a loaded machine
    # rank 0 may not have reached the last keys by then, and rank 1 times those (never a key twice).
    assert results[0]["timer_calls"] + results[1]["timer_calls"] == 6 * 8 and results[0]["timer_calls"] >= 8, results
    assert results[0]["choices"] == {k: v.replace(";timed", ";table") for k, v in results[0]["choices"].items()} \
        or all(v.rpartition(";")[0] == results[0]["choices"][k].rpartition(";")[0]
               for k, v in results[1]["choices"].items())


GATES = """
import gc, json, weakref
import torch, triton
from kernels import demo
from autotune_guard.adapters.triton.tuner import REGISTRY

def held():
    return sum(len(v) for v in vars(REGISTRY).values() if isinstance(v, (dict, set, weakref.WeakSet)))

x = torch.rand(64)
demo.add(x, x)  # the guard's structures as a job has them
gc.collect()
before, alive = held(), []
for i in range(200):  # a program that makes a new autotuner object per call (a factory, a closure)
    tuner = triton.autotune(configs=demo.ADD_CONFIGS[:2], key=["n"], do_bench=demo.random_timer)(demo.add_kernel.fn)
    out = torch.empty_like(x)
    tuner[(2,)](x, x, out, 64)
    alive.append(weakref.ref(tuner))
    del tuner
gc.collect()
print(json.dumps({"before": before, "after": held(), "alive": sum(r() is not None for r in alive)}))
"""


def test_consensus_keeps_nothing_per_autotuner_object_once_it_is_gone(tmp_path):
    from support import clean_env, last_json, run_python

    out = last_json(run_python(GATES, env=clean_env(AUTOTUNE_MODE="consensus")).stdout)
    assert out["alive"] == 0 and out["after"] - out["before"] < 10, out  # 200 objects: not 200 entries
