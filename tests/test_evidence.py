"""Evidence that is never lost or mixed (issue 12), on real processes: one file per process
(``<prefix>.rank<N>.<host>-<pid>.json``), nothing from processes that chose nothing (``import
triton`` children, a helper outliving a SIGKILLed rank), fork/spawn/forkserver/subprocess children
keeping their own file, the rank fixed at the first choice (``mp.spawn`` ranks that destroy their
group before exit), runs told apart by run id (an earlier 3-rank ``torchrun`` run in the same
prefix), and the files saved on SIGTERM (the program's own handler still runs)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from support import TESTS, clean_env, last_json, rank_file, rank_files, torchrun

from autotune_guard.core import schema as files

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

PROGS = os.path.join(TESTS, "progs")
_RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID",
              "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")


def env_for(**settings):
    env = clean_env(**settings)
    for name in _RANK_VARS:
        env.pop(name, None)
    return env


def report(*args):
    return subprocess.run([sys.executable, "-m", "autotune_guard.report", *map(str, args)], env=env_for(),
                          capture_output=True, text=True, timeout=120)


def read(path):
    return files.read_document(str(path))


def test_children_keep_their_own_files_and_import_triton_children_write_nothing(tmp_path):
    rec, ch = tmp_path / "rec", tmp_path / "ch"
    proc = subprocess.run([sys.executable, os.path.join(PROGS, "evidence_children.py")], capture_output=True,
                          text=True, timeout=400, env=env_for(AUTOTUNE_RECORD_PATH=rec, AUTOTUNE_DIGEST_PATH=ch))
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = last_json(proc.stdout)
    processes = {"parent": result, **result["children"]}
    assert len({p["pid"] for p in processes.values()}) == 5
    for prefix in (rec, ch):
        written = rank_files(prefix, 0)
        # One file per process that chose: the parent and its 4 choosing children; the two
        # `import triton` children wrote nothing.
        assert len(written) == 5, written
        docs = {read(path)["pid"]: read(path) for path in written}
        assert set(docs) == {p["pid"] for p in processes.values()}
        assert len({doc["run_id"] for doc in docs.values()}) == 1  # one run, whatever the start method
        for name, p in processes.items():
            doc = docs[p["pid"]]
            assert doc["complete"] is True, (name, prefix)  # each marked complete by itself, at its exit
            assert doc["rank"] == 0 and p["log"], name
            if prefix == ch:
                assert doc["log"] == p["log"], name  # its own choices, not its parent's
            else:
                recorded = {f"interpret|{k}|{key}" for k, es in doc["kernels"].items() for key in es}
                assert recorded == set(p["log"]), name
    parent_keys = set(result["log"])
    for name, child in result["children"].items():
        assert not parent_keys & set(child["log"]), name  # a fork child does not re-file what it inherited
    # The report reads the prefix as one run: rank 0's processes, labelled by pid, combined.
    shown = report("show", "--check", ch)
    assert shown.returncode == 0, shown.stderr
    assert f"rank 0 pid {result['pid']}" in shown.stdout and "left out" not in shown.stderr
    merged = report("merge", rec, "-o", tmp_path / "t.json")
    assert merged.returncode == 0, merged.stderr
    assert len(read(tmp_path / "t.json")["source"]["files"]) == 5


def test_a_helper_outliving_a_sigkilled_rank_leaves_its_record_alone(tmp_path):
    code = """
import subprocess, sys, time, torch
from kernels import demo
x = torch.arange(100, dtype=torch.float32)
demo.add(x, x); demo.scale(x, 2.0); demo.add(torch.arange(300.), torch.arange(300.))
helper = subprocess.Popen([sys.executable, "-c", "import triton, time; time.sleep(4)"])
print(helper.pid, flush=True)
time.sleep(1.0)
print("ready", flush=True)
time.sleep(120)
"""
    rec, ch = tmp_path / "rec", tmp_path / "ch"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env_for(AUTOTUNE_RECORD_PATH=rec, AUTOTUNE_DIGEST_PATH=ch),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        helper = int(proc.stdout.readline())
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.time() + 60
        while time.time() < deadline and os.path.exists(f"/proc/{helper}"):
            time.sleep(0.2)  # the helper ends after its parent died (a zombie of init at worst)
            with open(f"/proc/{helper}/stat") as stat:
                if stat.read().split()[2] == "Z":
                    break
    finally:
        if proc.poll() is None:
            proc.kill()
    for prefix in (rec, ch):
        doc = read(rank_file(prefix, 0))  # only the rank's own file
        assert doc["complete"] is False and doc["pid"] == proc.pid
    assert read(rank_file(ch, 0))["count"] == 3


def test_mp_spawn_ranks_keep_their_rank_after_destroying_the_group(tmp_path):
    ch = tmp_path / "ch"
    proc = subprocess.run([sys.executable, os.path.join(PROGS, "evidence_spawn_ranks.py"), str(tmp_path / "init")],
                          env=env_for(AUTOTUNE_DIGEST_PATH=ch), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in (0, 1):
        # The rank's own file and its spawned worker's, both filed under the rank it chose as.
        docs = [read(path) for path in rank_files(ch, rank)]
        assert len(docs) == 2 and all((d["rank"], d["world_size"]) == (rank, 2) for d in docs)
        assert sorted(list(d["log"])[0].split("|")[2].split(",")[0] for d in docs) == [str(100 + rank), str(500 + rank)]
    assert len({d["run_id"] for rank in (0, 1) for d in map(read, rank_files(ch, rank))}) == 1


def test_rank_from_the_environment_then_fixed(tmp_path):
    """Without a process group: RANK, else SLURM_PROCID, else OMPI_COMM_WORLD_RANK, fixed at the
    first choice (a later change of RANK does not move the file)."""
    code = """
import os, torch
from kernels import demo
from autotune_guard import evidence as writer
demo.add(torch.arange(100.), torch.arange(100.))
os.environ["RANK"] = "9"
writer.write_files()
"""
    cases = [({"OMPI_COMM_WORLD_RANK": "7"}, 7), ({"OMPI_COMM_WORLD_RANK": "7", "SLURM_PROCID": "5"}, 5),
             ({"OMPI_COMM_WORLD_RANK": "7", "SLURM_PROCID": "5", "RANK": "3"}, 3)]
    for i, (ranks, expected) in enumerate(cases):
        ch = tmp_path / f"ch{i}"
        env = env_for(AUTOTUNE_DIGEST_PATH=ch)
        env.update(ranks)
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert [os.path.basename(p).split(".")[1] for p in rank_files(ch, "*")] == [f"rank{expected}"], ranks


def test_an_earlier_run_in_the_same_prefix_is_named_and_left_out(tmp_path):
    """A 3-rank torchrun run, then a 2-rank one into the same prefix, choosing differently: the
    report reads only the second run (no false disagreement) and names rank 2's stale file."""
    ch = tmp_path / "ch"
    for nproc, sizes in ((3, {"AUTOTUNE_BLOCK_SIZES": "BLOCK=64"}), (2, {})):
        results = tmp_path / f"results{nproc}"
        results.mkdir()
        torchrun(os.path.join(PROGS, "record_ranks.py"), nproc, args=[str(results)],
                 env=env_for(AUTOTUNE_MODE="pinned", AUTOTUNE_DIGEST_PATH=ch, **sizes))
    stale = rank_file(ch, 2)
    assert len(rank_files(ch, 0)) == 2  # both runs' rank 0 files are on disk
    shown = report("show", "--check", "--json", ch)
    assert shown.returncode == 0, shown.stdout[-3000:] + shown.stderr
    used = json.loads(shown.stdout)["files"]
    assert sorted(f["rank"] for f in used) == [0, 1]
    assert stale in shown.stderr and "left out" in shown.stderr
    assert sum("left out" in line for line in shown.stderr.splitlines()) == 3  # the earlier run's 3 files
    # Mixed in, the runs disagree: that is what the run id prevents.
    assert report("show", "--check", "--all-runs", ch).returncode == 1


def test_merge_never_votes_with_a_stale_file(tmp_path):
    """Plain processes with RANK set and the run id a launcher would give them (AUTOTUNE_RUN_ID)."""
    rec = tmp_path / "rec"
    code = "import torch\nfrom kernels import demo\ndemo.add(torch.arange(100.), torch.arange(100.))"
    for run, ranks in (("run-a", 3), ("run-b", 2)):
        for rank in range(ranks):
            env = {**env_for(AUTOTUNE_RECORD_PATH=rec, AUTOTUNE_RUN_ID=run), "RANK": str(rank), "WORLD_SIZE": str(ranks)}
            subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=120)
    merged = report("merge", rec, "-o", tmp_path / "t.json")
    assert merged.returncode == 0, merged.stderr
    used = read(tmp_path / "t.json")["source"]["files"]
    assert sorted(read(p)["rank"] for p in used) == [0, 1] and all(read(p)["run_id"] == "run-b" for p in used)
    assert rank_file(rec, 2) in merged.stderr


def _ended(prefix) -> bool:
    found = rank_files(prefix, 0)
    try:
        return bool(found) and read(found[0]).get("ended") == "SIGTERM"
    except Exception:  # (a file is replaced atomically, but may not exist yet)
        return False


@pytest.mark.parametrize("handler", ["default", "exit", "ignore", "note-late"])
def test_sigterm_saves_the_files_and_keeps_its_effect(tmp_path, handler):
    ch = tmp_path / "ch"
    proc = subprocess.Popen([sys.executable, os.path.join(PROGS, "evidence_sigterm.py"), handler],
                            env=env_for(AUTOTUNE_DIGEST_PATH=ch), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGTERM)
        if handler in ("ignore", "note-late"):
            # Wait for the save (a loaded machine can take seconds to run the handler), then check
            # that the program ignores SIGTERM, or only notes it: it keeps running.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not _ended(ch):
                time.sleep(0.1)
            time.sleep(0.5)
            assert proc.poll() is None
            os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    doc = read(rank_file(ch, 0))
    assert doc["count"] == 1
    if handler == "default":
        assert proc.returncode == -signal.SIGTERM  # the signal's own effect
        assert doc["complete"] is False and doc["ended"] == "SIGTERM"
    elif handler == "note-late":  # set after install: chained at the first choice all the same
        assert proc.returncode == -signal.SIGKILL and doc["ended"] == "SIGTERM" and "program handler ran" in out
    elif handler == "exit":
        assert proc.returncode == 3 and "program handler ran" in out  # the program's handler ran
        assert doc["complete"] is False and doc["ended"] == "SIGTERM"  # its SystemExit ended a SIGTERMed run
    else:
        assert proc.returncode == -signal.SIGKILL and doc["ended"] == "SIGTERM"


def test_torchrun_terminating_surviving_ranks_leaves_their_choices(tmp_path):
    ch = tmp_path / "ch"
    proc = torchrun(os.path.join(PROGS, "evidence_torchrun_fail.py"), 2, env=env_for(AUTOTUNE_DIGEST_PATH=ch),
                    check=False, timeout=200)
    assert proc.returncode != 0
    survivor = read(rank_file(ch, 0))
    assert survivor["ended"] == "SIGTERM" and survivor["count"] == 1, proc.stderr[-3000:]
    assert read(rank_file(ch, 1))["count"] == 1
    shown = report("show", ch)
    assert shown.returncode == 0 and "ended by SIGTERM" in shown.stdout


def test_merge_all_runs_counts_each_runs_ranks(tmp_path):
    """Separate runs (the same rank, read with --all-runs) are separate processes: each votes,
    though a rank's own processes count once within a run.  One real record, filed again as
    two later runs of the same rank that chose the same."""
    rec = tmp_path / "rec"
    code = "import torch\nfrom kernels import demo\ndemo.add(torch.arange(100.), torch.arange(100.))"
    env = {**env_for(AUTOTUNE_RECORD_PATH=rec, AUTOTUNE_RUN_ID="run-a"), "RANK": "0", "WORLD_SIZE": "1"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=120)
    (first,) = rank_files(rec, 0)
    document = read(first)
    for n, run in enumerate(("run-b", "run-c")):
        (tmp_path / f"rec.rank0.other-{n}.json").write_text(json.dumps({**document, "run_id": run}))
    merged = report("merge", "--all-runs", "--json", rec, "-o", tmp_path / "t.json")
    assert merged.returncode == 0, merged.stderr
    (entry,) = json.loads(merged.stdout)["entries"]
    assert list(entry["votes"].values()) == [3], entry
