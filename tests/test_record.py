"""Record mode on real processes: per-rank files, the whole record -> report -> merge -> pin loop
under real torchrun ranks, a rank killed with SIGKILL, the record path checked at `import triton`."""

import json
import os
import signal
import subprocess
import sys

import pytest

from support import TESTS, clean_env, last_json, rank_file, run_python, torchrun

from autotune_guard.core import schema as files

PROGS = os.path.join(TESTS, "progs")
ADD = "kernels.demo.add_kernel"
SCALE = "kernels.demo.scale_kernel"
KEYS = {
    (ADD, "100,torch.float32,torch.float32,torch.float32"),
    (ADD, "300,torch.float32,torch.float32,torch.float32"),
    (SCALE, "100,torch.float32,torch.float32"),
}
_RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
              "OMPI_COMM_WORLD_SIZE")


def env_for(**settings):
    env = clean_env(**settings)
    for name in _RANK_VARS:
        env.pop(name, None)
    return env


def report(*args, env=None):
    return subprocess.run([sys.executable, "-m", "autotune_guard.report", *args], env=env or env_for(),
                          capture_output=True, text=True, timeout=120)


def log_as_records(log):
    """A choice log ({arch|kernel|key: signature;how}) as {(kernel, key): signature}."""
    found = {}
    for entry, value in log.items():
        arch, kernel, key = entry.split("|", 2)
        assert arch == "interpret"
        found[(kernel, key)] = value.rpartition(";")[0]
    return found


@pytest.mark.slow
def test_record_report_merge_pin_end_to_end(tmp_path):
    """Two gloo ranks record; report show lists every kernel/key; merge makes a table; two pinned
    ranks with AUTOTUNE_ON_MISS=error and that table run the table's configs without timing."""
    rec = tmp_path / "runs" / "rec"
    results = tmp_path / "results"
    results.mkdir()
    torchrun(os.path.join(PROGS, "record_ranks.py"), 2, env=env_for(AUTOTUNE_RECORD_PATH=rec), args=[str(results)])

    chosen = {}
    for rank in (0, 1):
        result = json.loads((results / f"result.rank{rank}.json").read_text())
        assert result["policy"] == "record"  # selected by AUTOTUNE_RECORD_PATH alone
        # every candidate of every key timed once (Triton's pass), the finalists again (docs/winners.md)
        assert result["timer_calls"] >= 8 + 8 + 3
        doc = files.read_document(rank_file(tmp_path / "runs" / "rec", rank))
        assert doc["format"] == files.RECORD_FORMAT and doc["complete"] is True
        assert (doc["rank"], doc["world_size"], doc["arch"], doc["mode"]) == (rank, 2, "interpret", "record")
        assert doc["versions"]["triton"] and doc["versions"]["torch"] and doc["versions"]["python"]
        assert "kernels" in doc["packages"]  # the kernels' top-level package (not installed: no version)
        recorded = {(k, key): e for k, entries in doc["kernels"].items() for key, e in entries.items()}
        assert set(recorded) == KEYS
        # The record holds exactly what the rank chose, with the timings Triton measured for it.
        assert {ident: e["signature"] for ident, e in recorded.items()} == log_as_records(result["log"])
        for (kernel, key), entry in recorded.items():
            assert entry["how"] == "timed"
            assert len(entry["timings"]) == len(entry["candidates"]) == (8 if kernel == ADD else 3)
            verdict = entry["measured"]  # record re-times Triton's finalists: the verdict is kept
            assert entry["signature"] == verdict["winner"] and verdict["arch"] == "interpret"
            # a lone finalist is the fastest of what was kept: Triton's one pass, where the finalist and
            # the runner-up were timed once more the lower of their two timings (selection.to_confirm)
            kept = {sig: c["median"] for sig, c in verdict["candidates"].items() if c["median"] is not None}
            assert verdict["how"] != "one finalist" or entry["signature"] == min(kept, key=kept.get)
        chosen[rank] = {ident: e["signature"] for ident, e in recorded.items()}

    shown = report("show", str(rec))
    assert shown.returncode == 0, shown.stderr
    for kernel, key in KEYS:
        assert kernel in shown.stdout and f"key ({key})" in shown.stdout
    as_json = json.loads(report("show", "--json", str(rec)).stdout)
    assert {(r["kernel"], r["key"]) for r in as_json["keys"]} == KEYS
    for row in as_json["keys"]:
        assert sorted(c["rank"] for c in row["choices"]) == [0, 1]
        assert row["agree"] == (chosen[0][(row["kernel"], row["key"])] == chosen[1][(row["kernel"], row["key"])])

    tables = tmp_path / "tables"
    merged = report("merge", str(rec), "-o", str(tables / "interpret.json"))
    assert merged.returncode == 0, merged.stderr
    table = files.read_document(str(tables / "interpret.json"), formats=(files.TABLE_FORMAT,))
    assert table["arch"] == "interpret" and table["source"]["rule"] == "vote"
    entries = {(k, key): e for k, es in table["kernels"].items() for key, e in es.items()}
    assert set(entries) == KEYS
    from autotune_guard.core import model as selection

    table_choice = {ident: selection.signature(e) for ident, e in entries.items()}
    for ident, signature in table_choice.items():
        assert signature in (chosen[0][ident], chosen[1][ident])  # a vote picks what a rank chose

    pinned = tmp_path / "pinned"
    pinned.mkdir()
    torchrun(os.path.join(PROGS, "record_ranks.py"), 2, args=[str(pinned)],
             env=env_for(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error", AUTOTUNE_TABLE_PATH=tables))
    for rank in (0, 1):
        result = json.loads((pinned / f"result.rank{rank}.json").read_text())
        assert result["policy"] == "pinned"
        assert result["timer_calls"] == 0
        assert log_as_records(result["log"]) == table_choice
        assert all(value.endswith(";table") for value in result["log"].values())


@pytest.mark.slow
def test_sigkilled_rank_leaves_its_choices_on_disk(tmp_path):
    rec = tmp_path / "rec"
    proc = subprocess.Popen([sys.executable, os.path.join(PROGS, "record_killed.py")],
                            env=env_for(AUTOTUNE_RECORD_PATH=rec, AUTOTUNE_DIGEST_PATH=tmp_path / "choices"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = json.loads(proc.stdout.readline())
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    doc = files.read_document(rank_file(tmp_path / "rec", 0))
    assert doc["complete"] is False  # no exit handler ran: this is the copy kept current while running
    recorded = {(k, key): e["signature"] for k, es in doc["kernels"].items() for key, e in es.items()}
    assert recorded == log_as_records(log) and set(recorded) == KEYS
    choices = files.read_document(rank_file(tmp_path / "choices", 0))
    assert choices["log"] == log and choices["complete"] is False
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]  # no temp file left behind

    shown = report("show", str(rec))
    assert shown.returncode == 0 and "PARTIAL" in shown.stdout
    refused = report("merge", str(rec), "-o", str(tmp_path / "t.json"))
    assert refused.returncode == 2 and os.path.basename(rank_file(rec, 0)) in refused.stderr and "--allow-partial" in refused.stderr
    assert not (tmp_path / "t.json").exists()
    allowed = report("merge", "--allow-partial", str(rec), "-o", str(tmp_path / "t.json"))
    assert allowed.returncode == 0, allowed.stderr
    table = files.read_document(str(tmp_path / "t.json"))
    assert {(k, key) for k, es in table["kernels"].items() for key in es} == KEYS


@pytest.mark.slow
def test_record_details(tmp_path):
    """Timings go to the key they were measured for; a disk-cache winner is recorded untimed;
    (the rank in file names: test_evidence.py)."""
    proc = subprocess.run([sys.executable, os.path.join(PROGS, "record_details.py"), str(tmp_path)],
                          env=env_for(AUTOTUNE_RECORD_PATH=tmp_path / "first"), capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr
    result = last_json(proc.stdout)
    second = result["second"]
    # Key 100 was tuned under the first policy: the second records its winner but not the timings
    # it measured for key 300.
    assert second["100,torch.float32,torch.float32,torch.float32"]["how"] == "reused"
    assert second["100,torch.float32,torch.float32,torch.float32"]["timings"] is None
    assert second["300,torch.float32,torch.float32,torch.float32"]["how"] == "timed"
    assert len(second["300,torch.float32,torch.float32,torch.float32"]["timings"]) == 8
    if "cached" in result:  # Triton 3.4+
        assert result["cached_timer_calls"] == 0
        hit = result["cached"]["500,torch.float32,torch.float32,torch.float32"]
        assert hit["how"] == "cache hit" and hit["timings"] is None
        assert hit["signature"] == "BLOCK=32,num_warps=1,num_stages=3,num_ctas=1"  # the disk cache's winner


BAD_PATHS = {
    "ends in a separator": ("{tmp}/runs/", "ends in a separator"),
    "an existing directory": ("{tmp}", "is a directory; it is a file prefix"),
    "a path through a file": ("{tmp}/afile/rec", "is not a directory"),
    "a directory that cannot be created": ("/proc/autotune_guard_nope/rec", "cannot be created"),
    # /proc refuses new files even to root, for whom os.access() says yes.
    "a directory that cannot be written": ("/proc/rec", "cannot write files in /proc"),
}


@pytest.mark.slow
@pytest.mark.parametrize("variable", ["AUTOTUNE_RECORD_PATH", "AUTOTUNE_DIGEST_PATH"])
def test_bad_file_prefix_refused_at_import_triton(tmp_path, variable):
    (tmp_path / "afile").write_text("x")
    # One cold process per case: each must fail at its own `import triton`.
    code = "import triton"
    for case, (path, message) in BAD_PATHS.items():
        path = path.format(tmp=tmp_path)
        settings = {variable: path}
        if variable == "AUTOTUNE_DIGEST_PATH":
            settings["AUTOTUNE_MODE"] = "auto"
        proc = run_python(code, env=env_for(**settings), check=False, timeout=120)
        assert proc.returncode != 0, case
        # One short error (the traceback only with AUTOTUNE_TRACEBACK=1): its line names both.
        error = next(line for line in proc.stderr.splitlines() if line.startswith("autotune_guard: error:"))
        assert variable in error and message in error, (case, proc.stderr[-2000:])
    assert os.listdir(tmp_path) == ["afile"]  # nothing created, no probe file left


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a chmod 0o500 directory; /proc covers root above")
def test_read_only_directory_refused_at_import_triton(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        proc = run_python("import triton", env=env_for(AUTOTUNE_RECORD_PATH=locked / "rec"), check=False)
    finally:
        locked.chmod(0o700)
    assert proc.returncode != 0 and "cannot write files in" in proc.stderr


@pytest.mark.slow
def test_files_are_readable_like_any_file_the_user_writes(tmp_path):
    """Atomic writes go through mkstemp (mode 0600); records and tables must get the umask's mode."""
    proc = run_python(
        "import os, sys; os.umask(0o022); sys.path.insert(0, %r)\n"
        "from autotune_guard.core import jsonfile\n"
        "jsonfile.atomic_write_json(%r, {'format': 'x'})" % (TESTS, str(tmp_path / "t.json")),
        env=env_for(),
    )
    assert proc.returncode == 0
    assert (tmp_path / "t.json").stat().st_mode & 0o777 == 0o644
