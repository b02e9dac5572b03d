"""AUTOTUNE_MODE=consensus with a table directory in AUTOTUNE_TABLE_PATH: the first run of a job
tunes each key once for the whole job and adds the winners to ``<dir>/<arch>.json``; every later
run of the same command pins them all (0 timer calls, the same configs on every rank).

Real 2-rank jobs under torchrun over gloo, real Triton kernels under TRITON_INTERPRET=1 whose
timers return random times (so a key tuned twice would likely get another winner), real files
shared by jobs and processes running at once.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from support import TESTS, clean_env, run_python, torchrun

from autotune_guard.core import schema, tables
from autotune_guard.core.model import provenance_text

PROGS = os.path.join(TESTS, "progs")
WORKER = os.path.join(PROGS, "consensus_table_worker.py")
F32 = "torch.float32"
ADD = "kernels.demo.add_kernel"
SCALE = "kernels.demo.scale_kernel"
CANDIDATES = {"add": 8, "scale": 3}  # kernels.demo's candidates: one timer call each when a key is tuned
_RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def env_for(table_path, **settings):
    env = clean_env(AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=str(table_path), **settings)
    for name in _RANK_VARS:
        env.pop(name, None)
    return env


def key_of(kernel, n):
    return f"{n},{F32},{F32},{F32}" if kernel == "add" else f"{n},{F32},{F32}"


def entry_of(kernel, n):
    return f"interpret|{ADD if kernel == 'add' else SCALE}|{key_of(kernel, n)}"


def job(table_dir, out_dir, add_sizes, scale_sizes=""):
    """The command a user would run, twice or more; returns each rank's result."""
    os.makedirs(out_dir, exist_ok=True)
    torchrun(WORKER, 2, env=env_for(table_dir), args=(str(out_dir), add_sizes, scale_sizes))
    return [ran_as_tuples(json.load(open(os.path.join(out_dir, f"rank{r}.json")))) for r in (0, 1)]


def ran_as_tuples(rank):
    rank["ran"] = [tuple(item) for item in rank["ran"]]
    return rank


def job_keys(ranks):
    return {(kernel, n) for r in ranks for kernel, n in r["ran"]}


def read_table(table_dir):
    return schema.read_document(os.path.join(table_dir, "interpret.json"), formats=(schema.TABLE_FORMAT,))


def table_signature(document, kernel, n):
    from autotune_guard.core.model import signature

    entry = document["kernels"][ADD if kernel == "add" else SCALE][key_of(kernel, n)]
    return signature({"kwargs": {}, **entry})


def chosen(rank, kernel, n):
    return rank["choices"][entry_of(kernel, n)].rpartition(";")[0]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same 2-rank command run twice over one table directory, starting from none."""
    root = tmp_path_factory.mktemp("grown")
    table_dir = root / "tables"
    table_dir.mkdir()
    first = job(table_dir, root / "run1", "1000,2000", "500")
    table_after_first = (table_dir / "interpret.json").read_text()
    second = job(table_dir, root / "run2", "1000,2000", "500")
    return {"dir": table_dir, "first": first, "second": second, "table_after_first": table_after_first}


@pytest.mark.slow
def test_the_first_run_tunes_each_key_once_for_the_job_and_the_next_pins_them_all(two_runs):
    first, second = two_runs["first"], two_runs["second"]
    keys = job_keys(first)  # add 1000, 2000, scale 500 on both ranks; add 7000 on rank 0 alone, 7001 on rank 1
    assert len(keys) == 5
    table = read_table(two_runs["dir"])
    # Each key timed by one rank for the job: every candidate once, its finalists again in rounds
    # (docs/winners.md), and the table says how many timings each key took.
    measured = {(kernel, key): m for kernel, ms in table["measured"].items() for key, m in ms.items()}
    assert len(measured) == len(keys) and all(m["timed"] >= len(m["candidates"]) for m in measured.values())
    assert sum(r["timer_calls"] for r in first) == sum(m["timed"] for m in measured.values())
    assert sorted(len(m["candidates"]) for m in measured.values()) == sorted(CANDIDATES[k] for k, _ in keys)
    # Every key of the job is in the table, as the job chose it, the one rank 0 never ran included.
    assert {(k, key) for k, entries in table["kernels"].items() for key in entries} == \
        {(ADD if kernel == "add" else SCALE, key_of(kernel, n)) for kernel, n in keys}
    for rank in first:
        for kernel, n in rank["ran"]:
            assert chosen(rank, kernel, n) == table_signature(table, kernel, n)
    # The second run times nothing, makes the first run's choices on every rank, and leaves the table as it was.
    assert [r["timer_calls"] for r in second] == [0, 0]
    # ... and says that each came from the table (the first run: "consensus")
    assert [configs(r["choices"]) for r in second] == [configs(r["choices"]) for r in first]
    assert {v.rpartition(";")[2] for r in second for v in r["choices"].values()} == {"table"}
    assert {v.rpartition(";")[2] for r in first for v in r["choices"].values()} == {"consensus"}
    for kernel, n in [("add", 1000), ("add", 2000), ("scale", 500)]:
        assert chosen(second[0], kernel, n) == chosen(second[1], kernel, n)
    assert (two_runs["dir"] / "interpret.json").read_text() == two_runs["table_after_first"]


def configs(choices: dict) -> dict:
    """A choice log without how each choice was made: its configs."""
    return {entry: text.rpartition(";")[0] for entry, text in choices.items()}


@pytest.mark.slow
def test_each_entry_names_the_job_that_added_it_and_report_show_says_so(two_runs):
    table = read_table(two_runs["dir"])
    runs = {who["run_id"] for keys in table[tables.ADDED].values() for who in keys.values()}
    assert len(runs) == 1 and next(iter(runs)).startswith("torchelastic:")  # one job added them all: the first
    for kernel, keys in table["kernels"].items():
        for key in keys:
            who = table[tables.ADDED][kernel][key]
            assert who["triton"] and who["host"] and who["time"] and who["rank"] in (0, 1)
    assert table[tables.ADDED][ADD][key_of("add", 7001)]["rank"] == 1  # rank 1 tuned its own key, and wrote it
    # Each kernel's provenance, once, whichever rank wrote its first entry (the shape merge writes).
    prov = table[tables.PROVENANCE]
    assert sorted(prov) == [ADD, SCALE] and (prov[ADD]["count"], prov[SCALE]["count"]) == (8, 3)
    assert prov[ADD]["source"] != prov[SCALE]["source"] and {p["device"] for p in prov.values()} == {"interpret"}
    path = str(two_runs["dir"] / "interpret.json")
    proc = subprocess.run([sys.executable, "-m", "autotune_guard.report", "show", path], capture_output=True,
                          text=True, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    entry_lines = [line for line in proc.stdout.splitlines() if "[table]" in line]
    assert len(entry_lines) == 5 and all(f"added by run {next(iter(runs))} (rank " in line for line in entry_lines)
    assert [line.strip() for line in proc.stdout.splitlines() if "provenance:" in line] == \
        [f"provenance: {provenance_text(prov[kernel])}" for kernel in (ADD, SCALE)]  # once under each kernel
    proc = subprocess.run([sys.executable, "-m", "autotune_guard.report", "show", "--json", path],
                          capture_output=True, text=True, env=clean_env())
    rows = json.loads(proc.stdout)["keys"]
    assert all(row["choices"][0]["added_by"].startswith("added by run torchelastic:") for row in rows)


@pytest.mark.slow
def test_two_jobs_growing_one_table_at_once_lose_nothing(tmp_path):
    table_dir = tmp_path / "tables"
    table_dir.mkdir()
    # Overlapping keys: add 3000 in both, and each job's rank-own keys (add 7000 and 7001) in both.
    specs = {"a": ("1000,2000,3000", ""), "b": ("3000,4000", "500")}
    procs = {}
    for name, (adds, scales) in specs.items():
        (tmp_path / name).mkdir()
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", WORKER,
               str(tmp_path / name), adds, scales]
        procs[name] = subprocess.Popen(cmd, env=env_for(table_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, f"job {name}:\n{err[-4000:]}"
    ranks = {name: [ran_as_tuples(json.load(open(tmp_path / name / f"rank{r}.json"))) for r in (0, 1)]
             for name in specs}
    table = read_table(table_dir)  # valid JSON, a table: never half a file
    keys = job_keys(ranks["a"]) | job_keys(ranks["b"])
    assert {(k, key) for k, entries in table["kernels"].items() for key in entries} == \
        {(ADD if kernel == "add" else SCALE, key_of(kernel, n)) for kernel, n in keys}
    assert len(keys) == 7
    run_of = {ranks[name][0]["run_id"]: name for name in specs}
    assert len(run_of) == 2
    for kernel, n in keys:
        who = table[tables.ADDED][ADD if kernel == "add" else SCALE][key_of(kernel, n)]
        writer = ranks[run_of[who["run_id"]]]  # a job that ran the key, named with the rank that tuned it
        assert (kernel, n) in writer[who["rank"]]["ran"]
        # The entry is what that job chose, on every rank that ran it (the first writer's value stands).
        assert {chosen(r, kernel, n) for r in writer if (kernel, n) in r["ran"]} == {table_signature(table, kernel, n)}
    assert not [f for f in os.listdir(table_dir) if f.startswith(".tmp-")]  # no temporary file left behind


GROW = textwrap.dedent("""
    import json, sys
    from autotune_guard.evidence import table_growth
    from autotune_guard.core.model import ChoiceKey
    directory, tag = sys.argv[1], sys.argv[2]
    for i in range(40):  # one locked read-merge-rename per key, as a job growing its table as it goes does
        desc = {"kwargs": {"BLOCK": 2 ** (i % 8)}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
        table_growth._grow(directory, "interpret", {"pkg.mod.k": {f"{tag}-{i}": desc, "shared": desc}})
    print(json.dumps({"done": tag}))
""")


@pytest.mark.slow
def test_processes_adding_to_one_table_at_once_lose_no_entry(tmp_path):
    # Four processes, 40 writes each, all at once: without the lock a re-read would miss another's
    # rename and lose its entries; the one key all of them add keeps its first writer's value.
    code_env = clean_env()
    procs = [subprocess.Popen([sys.executable, "-c", GROW, str(tmp_path), tag], env=code_env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for tag in "abcd"]
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    table = read_table(tmp_path)
    keys = set(table["kernels"]["pkg.mod.k"])
    assert keys == {f"{tag}-{i}" for tag in "abcd" for i in range(40)} | {"shared"}
    assert set(table[tables.ADDED]["pkg.mod.k"]) == keys
    assert table["kernels"]["pkg.mod.k"]["shared"] == {"kwargs": {"BLOCK": 1}, "num_warps": 4, "num_stages": 3,
                                                        "num_ctas": 1}


PROBE = "import triton; print('imported')"


@pytest.mark.slow
def test_a_table_directory_that_cannot_be_written_fails_at_start_up_naming_the_setting():
    # /proc is a directory that refuses new files even to root.
    proc = run_python(PROBE, env=env_for("/proc"), check=False)
    assert proc.returncode != 0 and "imported" not in proc.stdout
    assert "AUTOTUNE_TABLE_PATH='/proc'" in proc.stderr and "cannot write files in /proc" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a chmod 0o500 directory; /proc covers root above")
def test_a_read_only_table_directory_fails_at_start_up(tmp_path):
    table_dir = tmp_path / "tables"
    table_dir.mkdir()
    table_dir.chmod(0o500)
    try:
        proc = run_python(PROBE, env=env_for(table_dir), check=False)
    finally:
        table_dir.chmod(0o700)
    assert proc.returncode != 0 and "cannot write files in" in proc.stderr and "AUTOTUNE_TABLE_PATH" in proc.stderr


@pytest.mark.slow
def test_a_missing_table_folder_is_made_under_consensus_and_named_else_refused_with_mkdir(tmp_path):
    """Issue 58: consensus refused a table folder not made yet, without saying mkdir -p, though it
    writes the table: it makes it (as mkdir -p) and says so; pinned, which only reads, refuses it
    naming the command that makes it."""
    folder = tmp_path / "new" / "tables"
    proc = run_python(PROBE, env=env_for(folder))
    assert "imported" in proc.stdout and folder.is_dir(), proc.stderr
    assert f"made the table folder {folder}, which did not exist" in proc.stderr, proc.stderr
    other = tmp_path / "other"
    proc = run_python(PROBE, env={**env_for(other), "AUTOTUNE_MODE": "pinned"}, check=False)
    assert proc.returncode != 0 and not other.exists(), proc.stderr
    assert f"mkdir -p {other}" in proc.stderr and "AUTOTUNE_TABLE_PATH" in proc.stderr, proc.stderr


ALONE = textwrap.dedent("""
    import json
    import torch
    import autotune_guard
    import kernels.demo as demo
    x = torch.rand(1000)
    for n in (1000, 1000, 2000):
        demo.add(torch.rand(n), torch.rand(n))
    print(json.dumps({"timer_calls": len(demo.TIMER_CALLS), "log": autotune_guard.choice_log()}))
""")


@pytest.mark.slow
def test_a_table_file_is_pinned_from_and_nowhere_to_write_is_said_once(tmp_path):
    table = tmp_path / "interpret.json"
    table.write_text(json.dumps({"format": schema.TABLE_FORMAT, "arch": "interpret", "kernels": {
        ADD: {key_of("add", 1000): {"kwargs": {"BLOCK": 128}, "num_warps": 2}}}}))
    before = table.read_text()
    proc = run_python(ALONE, env=env_for(table))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["log"][entry_of("add", 1000)] == "BLOCK=128,num_warps=2,num_stages=3,num_ctas=1;table"
    assert out["timer_calls"] == 8  # add 2000 alone was timed
    assert proc.stderr.count("names table files only") == 1 and "nowhere to add" in proc.stderr
    assert "has an effect in pinned mode only" not in proc.stderr
    assert table.read_text() == before and os.listdir(tmp_path) == ["interpret.json"]


@pytest.mark.slow
def test_a_job_of_one_process_grows_its_table_too(tmp_path):
    first = run_python(ALONE, env=env_for(tmp_path))
    assert json.loads(first.stdout.strip().splitlines()[-1])["timer_calls"] == 16
    assert set(read_table(tmp_path)["kernels"][ADD]) == {key_of("add", 1000), key_of("add", 2000)}
    again = json.loads(run_python(ALONE, env=env_for(tmp_path)).stdout.strip().splitlines()[-1])
    assert again["timer_calls"] == 0 and all(v.endswith(";table") for v in again["log"].values())


def test_compiled_kernels_under_consensus_grow_the_table_and_then_pin_from_it(inductor_patched, guard, tmp_path):
    from test_inductor import X, _generated

    from autotune_guard.evidence import table_growth
    from autotune_guard.adapters.inductor import names

    guard({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": str(tmp_path)})
    kernel = _generated("grown")
    assert kernel.run(X, X, 8192, stream=0).kwargs == {"XBLOCK": 512} and kernel.benchmarked == 5  # Inductor timed (a lone finalist confirmed)
    table_growth.flush()
    name = names.generated_name(kernel.fn.__name__, kernel.fn.src)
    assert read_table(tmp_path)["kernels"][name]["x=8192"] == {"kwargs": {"XBLOCK": 512}, "num_warps": 8,
                                                               "num_stages": 3, "num_ctas": 1}
    # The next run: a new policy, the kernel compiled afresh. Its table entry is used untimed (the
    # min-cost rule would have picked XBLOCK=128).
    guard({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": str(tmp_path)})
    again = _generated("grown")
    assert again.run(X, X, 8192, stream=0).kwargs == {"XBLOCK": 512} and again.benchmarked == 0
    assert autotune_guard_log()[f"interpret|{name}|x=8192"] == "XBLOCK=512,num_warps=8,num_stages=3,num_ctas=1;table"


def autotune_guard_log():
    import autotune_guard

    return autotune_guard.choice_log()


@pytest.fixture(scope="module")
def inductor_patched():
    """The guard's methods on Inductor's classes, as the post-import hook puts them (undone after,
    unless a hook of this process had put them there before), as test_inductor.py does."""
    from torch._inductor.runtime import triton_heuristics

    from autotune_guard import _patching
    from autotune_guard.adapters import inductor

    before = _patching.patched(triton_heuristics.CachingAutotuner, "autotune_to_one_config")
    patches = inductor.patch(triton_heuristics)
    yield
    if before is None:
        for found in reversed(patches):
            found.undo()
