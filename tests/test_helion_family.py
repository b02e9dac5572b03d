"""The Helion family (``adapters/helion.py``) with real Helion kernels under Triton's interpreter,
in cold processes. Helion's own search needs a GPU driver (its benchmark asks Triton for one), so
what searches (auto, record, a consensus claimer) is in the GPU tier (``test_gpu_helion.py``);
here: what decides without searching, and what refuses to search."""

import json
import os
import subprocess
import sys
import tempfile

import pytest
import triton

from support import TESTS, clean_env, last_json

pytestmark = pytest.mark.slow

try:
    import helion  # noqa: F401
except Exception as exc:  # an old Triton or torch under this Helion
    pytest.skip(f"Helion cannot be imported here ({exc!r})", allow_module_level=True)

KEY = "torch.float32[1000],torch.float32[1000],cpu,None,False"
LISTED, SEARCHED = "__main__.listed", "__main__.searched"


def run(kernel: str, **settings):
    return subprocess.run([sys.executable, "-m", "kernels.helion_kernels", kernel], env=clean_env(**settings),
                          capture_output=True, text=True, timeout=300, cwd=TESTS)


def table(tmp_path, kernel: str, config: dict):
    tables = tmp_path / "tables"
    tables.mkdir(exist_ok=True)
    (tables / "interpret.json").write_text(json.dumps({
        "format": "autotune_guard.table/1", "arch": "interpret", "kernels": {kernel: {KEY: {"kwargs": config}}}}))
    return tables


def test_pinned_sets_the_tables_config_and_helion_searches_nothing(tmp_path):
    tables = table(tmp_path, LISTED, {"block_sizes": [64]})
    proc = run("listed", AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables, AUTOTUNE_ON_MISS="error")
    assert proc.returncode == 0, proc.stderr
    found = last_json(proc.stdout)
    assert found["right"] and found["searches"] == [], found
    assert found["config"] == {"block_sizes": [64]}
    assert found["log"] == {f"interpret|{LISTED}|{KEY}": "block_sizes=[64];table"}  # decided by the table: said so
    # Without the guard the same program runs Helion's own finite search, which needs a GPU to time
    # on and fails here (every candidate's benchmark fails): the guard's run above searched nothing.
    plain = run("listed", AUTOTUNE_DISABLE="1")
    assert plain.returncode != 0 and "finite_search.py" in plain.stderr, plain.stderr[-2000:]


def test_pinned_without_an_entry_follows_on_miss(tmp_path):
    proc = run("listed", AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error")
    assert proc.returncode != 0
    assert LISTED in proc.stderr and "AUTOTUNE_ON_MISS=error" in proc.stderr, proc.stderr
    proc = run("listed", AUTOTUNE_MODE="pinned")  # the smallest tile, named as a fallback
    assert proc.returncode == 0, proc.stderr
    found = last_json(proc.stdout)
    assert found["searches"] == [] and found["config"] == {"block_sizes": [16]}
    assert "fallback" in proc.stderr


def test_a_full_search_is_pinned_from_the_table_or_to_helions_default(tmp_path):
    wanted = {"block_sizes": [128], "num_warps": 2}
    tables = table(tmp_path, SEARCHED, wanted)
    proc = run("searched", AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables, AUTOTUNE_ON_MISS="error")
    assert proc.returncode == 0, proc.stderr
    found = last_json(proc.stdout)
    assert found["right"] and found["searches"] == [] and found["config"] == wanted, found
    default = run("searched", AUTOTUNE_MODE="pinned")
    assert default.returncode == 0, default.stderr
    found = last_json(default.stdout)
    assert found["right"] and found["searches"] == [] and found["config"]["block_sizes"] == [32], found


UNUSABLE = {"a block size Helion refuses": ({"block_sizes": [7]}, "got 7"),
            "a string for block sizes": ({"block_sizes": "abc"}, "got 'abc'"),
            "an unknown field": ({"block_sizes": [64], "foo": 1}, "Invalid config keys ['foo']"),
            "a string pid_type": ({"block_sizes": [64], "pid_type": "abc"}, "'pid_type': 'abc' must be one of")}


@pytest.mark.parametrize("entry, helion_says", UNUSABLE.values(), ids=list(UNUSABLE))
def test_an_entry_helion_cannot_use_is_named_and_falls_back_not_handed_over(tmp_path, entry, helion_says):
    tables = table(tmp_path, SEARCHED, entry)
    proc = run("searched", AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables)  # the default on-miss: min_cost
    assert proc.returncode == 0 and "InvalidConfig" not in proc.stderr, proc.stderr[-3000:]
    named = [line for line in proc.stderr.splitlines() if "cannot be used" in line]
    assert len(named) == 1, proc.stderr[-3000:]
    assert SEARCHED in named[0] and KEY in named[0] and helion_says in named[0], named[0]
    assert str(tables / "interpret.json") in named[0], named[0]
    found = last_json(proc.stdout)
    assert found["right"] and found["searches"] == [] and found["config"]["block_sizes"] == [32], found
    how = found["log"][f"interpret|{SEARCHED}|{KEY}"].rpartition(";")[2]
    assert "table" not in how and "min_cost" in how, how  # the evidence says the fallback, not the table


@pytest.mark.parametrize("entry, helion_says", [UNUSABLE["a block size Helion refuses"], UNUSABLE["an unknown field"]])
def test_an_entry_helion_cannot_use_is_refused_by_name_under_on_miss_error(tmp_path, entry, helion_says):
    tables = table(tmp_path, SEARCHED, entry)
    proc = run("searched", AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables, AUTOTUNE_ON_MISS="error")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    refused = [line for line in proc.stderr.splitlines() if "refused:" in line]
    assert refused and SEARCHED in refused[0] and helion_says in refused[0], proc.stderr[-3000:]
    assert "AUTOTUNE_ON_MISS=error" in refused[0] and str(tables / "interpret.json") in refused[0], refused[0]


def test_consensus_follows_the_tables_entry_and_assert_cache_hit_refuses_a_search(tmp_path):
    tables = table(tmp_path, LISTED, {"block_sizes": [32]})
    proc = run("listed", AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=tables, HELION_ASSERT_CACHE_HIT="1")
    assert proc.returncode == 0, proc.stderr
    found = last_json(proc.stdout)
    assert found["searches"] == [] and found["log"][f"interpret|{LISTED}|{KEY}"] == "block_sizes=[32];table", found
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = run("listed", AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=empty, HELION_ASSERT_CACHE_HIT="1")
    assert refused.returncode != 0
    assert "HELION_ASSERT_CACHE_HIT=1" in refused.stderr and LISTED in refused.stderr, refused.stderr
    assert "FiniteSearch" not in refused.stdout


def test_uninstall_restores_helions_autotune():
    code = """
import json, sys, helion
k = sys.modules["helion.runtime.kernel"]  # helion.runtime.kernel is also Helion's decorator
own = k.BoundKernel.__dict__["autotune"]
import autotune_guard
autotune_guard.install({"AUTOTUNE_MODE": "pinned"})
patched = k.BoundKernel.__dict__["autotune"]
autotune_guard.uninstall()
print(json.dumps([patched is not own, k.BoundKernel.__dict__["autotune"] is own]))
"""
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert last_json(proc.stdout) == [True, True]


def searched_once(found) -> bool:
    return found["right"] and found["searches"] == ["WallClockSearch"]


def test_auto_and_record_search_once_and_pinned_from_the_merged_record_searches_nothing(tmp_path):
    # wall_clock's full search is Helion's own autotuner_fn hook, which the CPU can run
    auto = run("wall_clock", AUTOTUNE_MODE="auto")
    assert auto.returncode == 0, auto.stderr
    found = last_json(auto.stdout)
    assert searched_once(found) and list(found["log"].values())[0].endswith(";timed"), found
    prefix = tmp_path / "rec" / "run"
    recorded = run("wall_clock", AUTOTUNE_RECORD_PATH=prefix)
    assert recorded.returncode == 0, recorded.stderr
    recorded = last_json(recorded.stdout)
    assert searched_once(recorded)
    tables = tmp_path / "tables"
    merge = subprocess.run([sys.executable, "-m", "autotune_guard.report", "merge", str(prefix), "-o",
                            str(tables / "interpret.json")], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert merge.returncode == 0, merge.stderr
    # Helion compiles Triton: the FP fusion it ran under is kept beside the config, as for Triton's kernels
    provenance = json.loads((tables / "interpret.json").read_text())["provenance"]["__main__.wall_clock"]
    assert provenance["fp_fusion"] == "on", provenance
    pinned = run("wall_clock", AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables, AUTOTUNE_ON_MISS="error")
    assert pinned.returncode == 0, pinned.stderr
    pinned = last_json(pinned.stdout)
    assert pinned["right"] and pinned["searches"] == [] and pinned["config"] == recorded["config"], pinned


def job(tables, nproc: int = 2, kernel: str = "wall_clock", said: list | None = None, **settings):
    results = tempfile.mkdtemp(dir=tables.parent)  # a file a rank: their stdout lines can interleave
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(nproc), "-m", "kernels.helion_kernels", kernel],
                          env=clean_env(AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=tables,
                                        HELION_KERNELS_RESULTS=results, **settings),
                          capture_output=True, text=True, timeout=180, cwd=TESTS)  # a hang fails
    assert proc.returncode == 0, proc.stderr[-3000:]
    if said is not None:
        said.append(proc.stderr)
    return [json.loads(open(os.path.join(results, f"rank{rank}.json")).read()) for rank in range(nproc)]


def test_the_readme_command_searches_a_full_search_once_for_the_job_and_run_2_nothing(tmp_path):
    """A full search is open: its winner is none of the candidates any rank can name beforehand.
    The claimer publishes its config with it, the other rank adopts it, the table keeps it."""
    tables = tmp_path / "tables"
    tables.mkdir()
    first = job(tables)
    assert len(first) == 2 and sorted(len(rank["searches"]) for rank in first) == [0, 1], first
    assert first[0]["config"] == first[1]["config"] and all(rank["right"] for rank in first)
    assert {list(rank["log"].values())[0].split(";")[-1] for rank in first} == {"consensus"}
    table = json.loads((tables / "interpret.json").read_text())
    (entry,) = table["kernels"]["__main__.wall_clock"].values()
    assert entry["kwargs"] == first[0]["config"]
    second = job(tables)
    assert [rank["searches"] for rank in second] == [[], []], second
    assert all(rank["config"] == first[0]["config"] for rank in second)
    assert {list(rank["log"].values())[0].split(";")[-1] for rank in second} == {"table"}


OLD_INTERPRETER = tuple(int(part) for part in triton.__version__.split(".")[:2]) < (3, 4)


@pytest.mark.skipif(OLD_INTERPRETER, reason="Triton 3.3's interpreter cannot run the persistent program Helion "
                    "generates for a kernel it counts as distributed (TypeError: only 0-dimensional arrays...)")
def test_a_search_helion_runs_across_ranks_is_joined_by_every_rank_then_agreed(tmp_path):
    """torch 2.11 (the GPU's) cannot tell a symmetric-memory tensor, so Helion 1.5 counts every kernel
    in a process with a process group as distributed, and its search gathers timings across the
    ranks. The claimer searching alone waited for the others inside Helion's search while they
    waited for its answer: the H100's run 1 hung. Every rank joins that one search; run 2 none."""
    tables = tmp_path / "tables"
    tables.mkdir()
    said = []
    first = job(tables, kernel="collective", said=said, HELION_KERNELS_AS_TORCH_2_11="1")
    assert len(first) == 2 and all(rank["collective"] and rank["right"] for rank in first), first
    assert [rank["searches"] for rank in first] == [["CollectiveSearch"]] * 2, first
    assert first[0]["config"] == first[1]["config"]
    assert {list(rank["log"].values())[0].split(";")[-1] for rank in first} == {"consensus"}
    assert "helion-collective-search" in said[0] and "__main__.collective" in said[0], said[0][-2000:]
    (entry,) = json.loads((tables / "interpret.json").read_text())["kernels"]["__main__.collective"].values()
    assert entry["kwargs"] == first[0]["config"]
    second = job(tables, kernel="collective", HELION_KERNELS_AS_TORCH_2_11="1")
    assert [rank["searches"] for rank in second] == [[], []], second
    assert all(rank["config"] == first[0]["config"] and rank["right"] for rank in second)
    assert {list(rank["log"].values())[0].split(";")[-1] for rank in second} == {"table"}


def test_a_published_config_is_adopted_only_as_the_winner_it_claims():
    from autotune_guard.core import consensus as protocol
    from autotune_guard.core.errors import ConsensusError

    signatures = ["block_sizes=[32]"]
    payload = json.loads(protocol.encode_winner(0, "block_sizes=[64]", signatures, {"kwargs": {"block_sizes": [64]}}))
    adopted = []
    index = protocol.follow(payload, signatures, "k", adopt=lambda config, sig: adopted.append((config, sig)) or 1)
    assert index == 1 and adopted == [({"kwargs": {"block_sizes": [64]}}, "block_sizes=[64]")]
    with pytest.raises(ConsensusError, match="is not a candidate on this rank"):
        protocol.follow(payload, signatures, "k")  # a closed list: no adoption
