"""Provenance of tables that consensus grows (AUTOTUNE_MODE=consensus, AUTOTUNE_TABLE_PATH=<dir>):
each kernel new to the table is written with what it was (source, candidates, options, Triton,
device; the shape ``report merge`` writes), ``report show`` prints it, and a later run of a
changed kernel is named (one line per kernel, with what differs) and refused with
AUTOTUNE_ON_MISS=error, in consensus mode (on every rank, Triton's autotuners and a
FlagGems-shaped LibTuner alike) and in pinned mode. Real kernels in modules of their own, changed
between cold processes and torchrun jobs (gloo), under TRITON_INTERPRET=1."""

import json
import os
import textwrap

import pytest

from support import clean_env, last_json, rank_file, run_python, torchrun
from test_provenance import BODY, KERNEL, _version

from autotune_guard.core import schema, tables

STALE = "another version"
# One process, or one torchrun rank: launches LAUNCH's kernel for each size in argv[2]; a rank that
# refuses it says so in OUT_DIR/rank<N>.json (a rank left waiting on another would time out instead).
WORKER = textwrap.dedent("""
    import json, os, sys
    import torch, triton
    if "RANK" in os.environ:
        import torch.distributed as dist
        dist.init_process_group("gloo")
    import autotune_guard
    LAUNCH
    result = {}
    try:
        for n in [int(n) for n in sys.argv[2].split(",")]:
            x = torch.arange(n, dtype=torch.float32)
            assert launch(x).equal(x * FACTOR)
    except autotune_guard.SelectionError as exc:
        result["refused"] = str(exc)
        if "RANK" not in os.environ:
            raise
    result["choices"] = autotune_guard.choice_log()
    if "RANK" in os.environ:
        with open(os.path.join(sys.argv[1], "rank%s.json" % os.environ["RANK"]), "w") as f:
            json.dump(result, f)
        dist.barrier()
        dist.destroy_process_group()
    print(json.dumps(result))
""")
TRITON_LAUNCH = textwrap.dedent("""
    import stale_kernels
    def launch(x):
        out = torch.empty_like(x)
        n = x.numel()
        stale_kernels.scale_body[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        return out
""")
LIB_LAUNCH = textwrap.dedent("""
    os.environ["LIBTUNER_DB"] += os.environ.get("RANK", "")  # a database per rank, as on separate machines
    import stale_lib
    launch = stale_lib.triple
""")
LIB_KERNEL = "stale_lib.triple_kernel"
LIB_BODY = "tl.load(x_ptr + offs, mask=mask) * 3"
LIB_MODULE = '''
import torch, triton
import triton.language as tl
from kernels.libtuner import libtuner

@libtuner(configs=[{configs}], key=["n"], strategy=["align32"])
@triton.jit
def triple_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, {body}, mask=mask)

def triple(x):
    out = torch.empty_like(x)
    n = x.numel()
    triple_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out
'''
_RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _worker(launch, factor):
    return WORKER.replace("LAUNCH", launch).replace("FACTOR", str(factor))


def _lib_version(root, blocks=((64, 4), (16, 1), (32, 2), (128, 4)), body=LIB_BODY):
    configs = ", ".join(f"triton.Config({{'BLOCK': {b}}}, num_warps={w})" for b, w in blocks)
    (root / "stale_lib.py").write_text(LIB_MODULE.format(configs=configs, body=body))


def _env(root, **settings):
    env = clean_env(AUTOTUNE_CONSENSUS_TIMEOUT=60, LIBTUNER_DB=root / "db", **settings)
    env["PYTHONPATH"] += os.pathsep + str(root)
    for name in _RANK_VARS:
        env.pop(name, None)
    return env


def _job(root, name, sizes, worker="worker.py", **settings):
    """A 2-rank consensus job over ``root/tables``; returns (torchrun's process, each rank's result)."""
    out = root / name
    out.mkdir()
    env = _env(root, AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=root / "tables", **settings)
    proc = torchrun(str(root / worker), 2, env=env, args=(str(out), sizes))
    return proc, [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def _one(root, sizes="100,300", check=True, worker="worker.py", **settings):
    """One cold process (no process group) running ``worker``."""
    return run_python(f"import sys; sys.argv[1:] = ['', {sizes!r}]\n" + (root / worker).read_text(),
                      env=_env(root, **settings), check=check)


def _table(root):
    return schema.read_document(str(root / "tables" / "interpret.json"), formats=(schema.TABLE_FORMAT,))


def _sizes(keys):
    return sorted(int(key.split(",")[0]) for key in keys)


def _stale_lines(stderr):
    return [line for line in stderr.splitlines() if STALE in line and "refused" not in line]


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """A table a 2-rank consensus job grew from nothing (keys n=100 and n=300), and the provenance a
    record run of the same kernel gives."""
    root = tmp_path_factory.mktemp("grown")
    (root / "worker.py").write_text(_worker(TRITON_LAUNCH, 2))
    (root / "tables").mkdir()
    _version(root)
    _, first = _job(root, "first", "100,300")
    recorded = _one(root, AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=root / "rec")
    record = schema.read_document(rank_file(root / "rec", 0))
    return {"root": root, "first": first, "table": (root / "tables" / "interpret.json").read_text(),
            "recorded": next(iter(record["kernels"][KERNEL].values()))["provenance"], "record_run": recorded}


@pytest.fixture
def restore(grown):
    """The kernel and the table as the grown fixture left them, after each test."""
    yield grown
    _version(grown["root"])
    (grown["root"] / "tables" / "interpret.json").write_text(grown["table"])


@pytest.mark.slow
def test_a_grown_table_carries_each_kernels_provenance_and_show_prints_it(grown, capsys):
    import triton

    from autotune_guard import report

    table = json.loads(grown["table"])
    assert _sizes(table["kernels"][KERNEL]) == [100, 300]
    prov = table[tables.PROVENANCE][KERNEL]
    assert prov == grown["recorded"]  # what a record of the kernel says, in the shape merge writes
    assert prov["count"] == 2 and prov["triton"] == triton.__version__ and prov["device"] == "interpret"
    assert all(len(prov[name]) == 12 for name in ("source", "candidates", "options"))
    assert set(table[tables.ADDED][KERNEL]) == set(table["kernels"][KERNEL])  # who added each entry, as before
    capsys.readouterr()
    assert report.main(["show", str(grown["root"] / "tables" / "interpret.json")]) == 0
    shown = capsys.readouterr().out
    assert shown.count(f"provenance: source {prov['source']}, candidates {prov['candidates']}, 2 candidates") == 1
    assert f"triton {triton.__version__}, device interpret" in shown


@pytest.mark.slow
def test_the_same_kernel_in_a_later_job_is_named_nowhere(grown, restore):
    proc, ranks = _job(grown["root"], "same", "100,300")
    assert STALE not in proc.stderr and configs(ranks[0]["choices"]) == configs(grown["first"][0]["choices"])
    assert (grown["root"] / "tables" / "interpret.json").read_text() == grown["table"]


def configs(choices: dict) -> dict:
    """A choice log without how each choice was made ("table" where a later job pinned an entry)."""
    return {entry: text.rpartition(";")[0] for entry, text in choices.items()}


@pytest.mark.slow
def test_consensus_times_a_changed_kernel_again_and_keeps_its_older_version_apart(grown, restore):
    """Issue 57: as Triton does, a kernel whose source changed is timed again by the next consensus job
    (its entries are not pinned under another version); its winners replace the kernel's entries, with
    this version's provenance, and the older version's entries are kept whole under ``superseded``."""
    root = grown["root"]
    _version(root, body=BODY + " + 0")  # the source changed
    proc, ranks = _job(root, "changed", "100,300,500")
    lines = _stale_lines(proc.stderr)
    named = [line for line in lines if "consensus times its keys again" in line]
    assert len(named) == 2 and all(KERNEL in line and "its source changed" in line for line in named)  # one per rank
    assert ranks[0]["choices"] == ranks[1]["choices"] and len(ranks[0]["choices"]) == 3
    hows = {text.rpartition(";")[2] for text in ranks[0]["choices"].values()}
    assert "table" not in hows, ranks[0]["choices"]  # no key pinned from the older version's entries
    table = _table(root)
    assert _sizes(table["kernels"][KERNEL]) == [100, 300, 500]
    assert table[tables.PROVENANCE][KERNEL]["source"] != grown["recorded"]["source"]
    (older,) = table["superseded"]
    old_table = json.loads(grown["table"])
    assert older["kernel"] == KERNEL and older["entries"] == old_table["kernels"][KERNEL]
    assert older["provenance"] == grown["recorded"] and older["added"] == old_table["added"][KERNEL]
    assert "its source changed" in " ".join(older["why"])
    again, ranks = _job(root, "again", "100,300,500")  # the next job pins the new version's entries
    assert _stale_lines(again.stderr) == [] and {t.rpartition(";")[2] for t in ranks[0]["choices"].values()} <= \
        {"table", "consensus"}


@pytest.mark.slow
def test_consensus_refuses_a_changed_kernel_with_on_miss_error_on_every_rank(grown, restore):
    root = grown["root"]
    _version(root, blocks=(16, 32, 64))  # a candidate added
    proc, ranks = _job(root, "refused", "100,300", AUTOTUNE_ON_MISS="error")
    refusals = [rank.get("refused", "") for rank in ranks]
    assert len(refusals) == 2 and all(ranks[r]["choices"] == {} for r in (0, 1))  # each rank refused it itself
    assert all("its candidate list changed (2 candidates then, 3 now)" in line and KERNEL in line
               and "refused with AUTOTUNE_ON_MISS=error" in line for line in refusals)
    assert "ConsensusError" not in proc.stderr and "pinned mode only" not in proc.stderr
    assert (root / "tables" / "interpret.json").read_text() == grown["table"]


@pytest.mark.slow
def test_pinned_mode_names_and_refuses_a_changed_kernel_on_a_grown_table(grown, restore):
    root = grown["root"]
    pinned = dict(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=root / "tables")
    same = _one(root, **pinned)
    assert STALE not in same.stderr
    assert {k: v.replace(";table", "") for k, v in last_json(same.stdout)["choices"].items()} == \
        {k: v.replace(";consensus", "") for k, v in grown["first"][0]["choices"].items()}
    _version(root, blocks=(16, 32, 64))
    named = _one(root, **pinned)
    lines = _stale_lines(named.stderr)
    assert len(lines) == 1 and KERNEL in lines[0] and "its candidate list changed (2 candidates then, 3 now)" in lines[0]
    refused = _one(root, check=False, AUTOTUNE_ON_MISS="error", **pinned)
    assert refused.returncode != 0 and "refused: kernel " in refused.stderr and "Traceback" not in refused.stderr
    assert "its candidate list changed" in refused.stderr and "refused with AUTOTUNE_ON_MISS=error" in refused.stderr


@pytest.mark.slow
def test_consensus_on_miss_error_without_a_table_is_still_said_to_be_ignored(tmp_path):
    proc = run_python("import triton", env=clean_env(AUTOTUNE_MODE="consensus", AUTOTUNE_ON_MISS="error"))
    assert "AUTOTUNE_ON_MISS=error has an effect in pinned mode only" in proc.stderr


def test_a_kernel_whose_entries_were_deleted_takes_this_jobs_provenance(guard, ag_log, tmp_path, monkeypatch):
    from autotune_guard.evidence import table_growth
    from autotune_guard.core.model import tuned_winner

    monkeypatch.setattr(table_growth._growth(), "added", {})  # this process's exit line stays pytest's own
    guard({"AUTOTUNE_MODE": "consensus"})
    desc = {"kwargs": {"BLOCK": 16}, "num_warps": 1, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
    old = {"source": "aaaaaaaaaaaa", "candidates": "bbbbbbbbbbbb", "count": 2, "options": "cccccccccccc"}
    new = dict(old, source="dddddddddddd")
    table_growth._grow(str(tmp_path), "interpret", {"m.k": {"1": tuned_winner(desc, old)}})
    table_growth._grow(str(tmp_path), "interpret", {"m.k": {"2": tuned_winner(desc, new), "3": tuned_winner(desc, new)}})
    table = schema.read_document(str(tmp_path / "interpret.json"))
    assert set(table["kernels"]["m.k"]) == {"1"} and table[tables.PROVENANCE]["m.k"] == old
    said = [m for m in ag_log.messages() if "not added" in m]
    assert len(said) == 1 and "2 new winners for it are not added" in said[0] and "its source changed" in said[0]
    # A plain descriptor (no provenance known, as a compiled kernel's) is added as before.
    table_growth._grow(str(tmp_path), "interpret", {"m.k": {"4": desc}})
    assert set(schema.read_document(str(tmp_path / "interpret.json"))["kernels"]["m.k"]) == {"1", "4"}
    # The user deletes the kernel's entries: the next job's are added, with its provenance.
    table["kernels"].pop("m.k")
    (tmp_path / "interpret.json").write_text(json.dumps(table))
    table_growth._grow(str(tmp_path), "interpret", {"m.k": {"2": tuned_winner(desc, new)}})
    table = schema.read_document(str(tmp_path / "interpret.json"))
    assert set(table["kernels"]["m.k"]) == {"2"} and table[tables.PROVENANCE]["m.k"] == new


@pytest.mark.slow
def test_a_libtuners_grown_table_is_named_and_refused_once_the_kernel_changes(tmp_path):
    (tmp_path / "lib_worker.py").write_text(_worker(LIB_LAUNCH, 3))
    (tmp_path / "tables").mkdir()
    _lib_version(tmp_path)
    _, first = _job(tmp_path, "first", "100,300", worker="lib_worker.py")
    assert first[0]["choices"] == first[1]["choices"] and len(first[0]["choices"]) == 2
    table = _table(tmp_path)
    grown = table[tables.PROVENANCE][LIB_KERNEL]
    assert grown["count"] == 4 and _sizes(table["kernels"][LIB_KERNEL]) == [128, 320]  # align32 keys
    _lib_version(tmp_path, body=LIB_BODY + " + 0")  # the source changed: pinned names it once and uses it
    named = _one(tmp_path, worker="lib_worker.py", AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tmp_path / "tables")
    lines = _stale_lines(named.stderr)
    assert len(lines) == 1 and LIB_KERNEL in lines[0] and "its source changed" in lines[0]
    assert {k: v.rpartition(";")[0] for k, v in last_json(named.stdout)["choices"].items()} == \
        {k: v.rpartition(";")[0] for k, v in first[0]["choices"].items()}
    _lib_version(tmp_path)
    _lib_version(tmp_path, blocks=((64, 4), (16, 1), (32, 2), (128, 4), (256, 4)))  # a candidate added
    _, refused = _job(tmp_path, "refused", "100,300", worker="lib_worker.py", AUTOTUNE_ON_MISS="error")
    assert all(r["choices"] == {} for r in refused)  # each rank refused it itself
    assert all(LIB_KERNEL in r["refused"] and "its candidate list changed (4 candidates then, 5 now)" in r["refused"]
               and "refused with AUTOTUNE_ON_MISS=error" in r["refused"] for r in refused)
    assert _table(tmp_path)[tables.PROVENANCE][LIB_KERNEL] == grown


def test_provenance_waits_out_a_swapped_launch_of_another_key(guard):
    # A pinned or consensus launch of one key runs with ``configs`` swapped to [the chosen] under the
    # autotuner's lock; another thread's winner handed to the table meanwhile must still hash all 8.
    import threading

    import kernels.demo as demo
    from autotune_guard.adapters.triton import provenance
    from autotune_guard.adapters.triton.tuner import REGISTRY

    guard({"AUTOTUNE_MODE": "consensus"})
    autotuner, swapped, done, found = demo.add_kernel, threading.Event(), threading.Event(), []
    autotuner.__dict__.pop(provenance.PROVENANCE_ATTR, None)

    def swap():
        with REGISTRY.lock_of(autotuner):
            declared, autotuner.configs = autotuner.configs, autotuner.configs[:1]
            swapped.set()
            done.wait(10)
            autotuner.configs = declared

    holder = threading.Thread(target=swap)
    holder.start()
    swapped.wait(10)
    asker = threading.Thread(target=lambda: found.append(provenance.of(autotuner)))
    asker.start()
    asker.join(0.3)
    assert asker.is_alive()  # it waits for the swapped launch to end
    done.set()
    holder.join(10)
    asker.join(10)
    assert found[0]["count"] == len(autotuner.configs) == 8
