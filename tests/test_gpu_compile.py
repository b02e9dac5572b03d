"""The torch.compile GPU tier: a user's ``@triton.autotune`` kernel and Inductor's own reductions
under ``torch.compile`` (default, ``fullgraph=True``, ``dynamic=True``), in cold processes where the
installed package's ``.pth`` installs the guard.  Dynamo cannot trace Triton's CPU interpreter, so
this tier runs only where CUDA is (``bash scripts/run_gpu_bench.sh``); the pure logic (names, key
rebuilding) is tested on the CPU in test_inductor.py.
"""

import json
import os
import subprocess
import sys

import pytest

from support import TESTS, last_json, rank_file

try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except Exception:
    HAS_CUDA = False

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU: torch.compile of Triton kernels needs one "
                                "(bash scripts/run_gpu_bench.sh on a GPU machine)")]

PROG = os.path.join(TESTS, "progs", "compiled_rowsum.py")
ROWSUM = "kernels.compiled.row_sum"
KEY = "16384,torch.float32,torch.float32"
MIN_COST = "BLOCK=256,num_warps=4,num_stages=3,num_ctas=1"


def env_for(tmp_path, **settings):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = TESTS
    # Each test its own Inductor cache, so that its first compile is cold unless the test says so.
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    env.update({k: str(v) for k, v in settings.items()})
    return env


def run(tmp_path, variants, *flags, check=True, **settings):
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, PROG, variants, *flags], env=env_for(tmp_path, **settings),
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-5000:]}")
    return (last_json(proc.stdout), proc.stderr) if check else proc


def entries(log, kernel=ROWSUM):
    return {k.split("|", 2)[2]: v for k, v in log.items() if k.split("|")[1] == kernel}


def test_pinned_compiled_is_eager_pinned_and_never_benchmarks(tmp_path):
    result, _ = run(tmp_path, "eager,compiled,fullgraph,dynamic", AUTOTUNE_MODE="pinned")
    assert result["inductor_bench"] == 0 and result["triton_bench"] == 0
    hashes = result["hashes"]
    # Bit-identical: the compiled function runs the config eager pinned mode chose for the key.
    assert hashes["compiled"] == hashes["fullgraph"] == hashes["eager"], result
    # One name and one key for eager and compiled calls: one entry per key in the log.  (With
    # dynamic=True Inductor compiles without knowing that n divides by 16, so the same config may
    # vectorise, and so add, differently: the choice is compared, not the bits.)
    rows = entries(result["log"])
    assert rows[KEY] == f"{MIN_COST};fallback (min_cost)", result  # no table
    # Compiled for static shapes, the kernel keeps Inductor's own launch path; for dynamic shapes
    # the guard follows the key on each launch.
    assert result["launch_wrappers"] == {"eager": 0, "compiled": 0, "fullgraph": 0, "dynamic": 1}, result
    assert set(rows) == {KEY, "8192,torch.float32,torch.float32"}, result
    # dynamic=True: one compiled kernel serves both key values; pinned still follows the key,
    # here with a table that pins each key to a different config.
    arch = next(iter(result["log"])).split("|")[0]
    small = "8192,torch.float32,torch.float32"
    table = tmp_path / f"{arch}.json"
    table.write_text(json.dumps({"format": "autotune_guard.table/1", "arch": arch, "kernels": {ROWSUM: {
        KEY: {"kwargs": {"BLOCK": 1024}, "num_warps": 8}, small: {"kwargs": {"BLOCK": 512}, "num_warps": 4}}}}))
    dynamic, _ = run(tmp_path / "dynamic", "dynamic", AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=table,
                     AUTOTUNE_ON_MISS="error")
    assert dynamic["inductor_bench"] == 0, dynamic
    assert entries(dynamic["log"]) == {KEY: "BLOCK=1024,num_warps=8,num_stages=3,num_ctas=1;table",
                                       small: "BLOCK=512,num_warps=4,num_stages=3,num_ctas=1;table"}, dynamic


def test_pinned_compiled_from_a_recorded_table(tmp_path):
    prefix = tmp_path / "runs" / "rec"
    recorded, _ = run(tmp_path, "compiled", AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=prefix)
    document = json.loads(open(rank_file(prefix, 0)).read())
    entry = document["kernels"][ROWSUM][KEY]
    assert len(entry["timings"]) == 10 and entry["signature"] in entry["timings"]
    # A record is timed for others: every candidate once, then the finalists again in rounds
    # (Inductor's own bench), unless the first pass left one finalist.
    measured = entry["measured"]
    assert entry["signature"] == measured["winner"], measured
    assert recorded["inductor_bench"] >= 10 and (measured["how"] == "one finalist" or recorded["inductor_bench"] > 10), \
        (recorded["inductor_bench"], measured)
    arch = document["arch"]
    tables = tmp_path / "tables"
    merge = subprocess.run([sys.executable, "-m", "autotune_guard.report", "merge", str(prefix), "-o",
                            str(tables / f"{arch}.json")], capture_output=True, text=True, env=env_for(tmp_path))
    assert merge.returncode == 0, merge.stderr
    pinned, _ = run(tmp_path / "p", "eager,compiled", AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables,
                    AUTOTUNE_ON_MISS="error")
    assert pinned["inductor_bench"] == 0 and pinned["triton_bench"] == 0
    assert pinned["hashes"]["compiled"] == pinned["hashes"]["eager"] == recorded["hashes"]["compiled"]
    assert entries(pinned["log"])[KEY] == entry["signature"] + ";table"


def test_auto_observes_and_inductor_cache_cannot_override_pinned(tmp_path):
    auto, _ = run(tmp_path, "compiled", AUTOTUNE_MODE="auto")
    assert auto["inductor_bench"] == 10
    assert entries(auto["log"])[KEY].endswith(";timed")
    # Same cache directory: Inductor now has a .best_config for this kernel.  Auto takes it and
    # says so; pinned ignores it and runs its own choice without timing.
    again, stderr = run(tmp_path, "compiled", AUTOTUNE_MODE="auto")
    assert again["inductor_bench"] == 0 and "best_config cache chose" in stderr
    pinned, _ = run(tmp_path, "compiled", AUTOTUNE_MODE="pinned")
    assert pinned["inductor_bench"] == 0 and entries(pinned["log"])[KEY] == f"{MIN_COST};fallback (min_cost)"


def test_inductor_generated_kernels_are_named_and_pinned(tmp_path):
    auto, _ = run(tmp_path / "a", "", "--generated", AUTOTUNE_MODE="auto")
    generated = {k: v for k, v in auto["log"].items() if k.split("|")[1].startswith("inductor.")}
    assert generated and all(v.endswith(";timed") for v in generated.values()) and auto["inductor_bench"] > 0, auto
    pinned, _ = run(tmp_path / "b", "", "--generated", AUTOTUNE_MODE="pinned")
    again, _ = run(tmp_path / "c", "", "--generated", AUTOTUNE_MODE="pinned")
    assert pinned["inductor_bench"] == 0
    names = {k: v for k, v in pinned["log"].items() if k.split("|")[1].startswith("inductor.")}
    # The same generated kernel gets the same name and choice in another cold process.
    assert set(names) == set(generated) and names == {k: v for k, v in again["log"].items() if k in names}
    assert all(v.endswith(";fallback (min_cost)") for v in names.values())  # no table
    assert pinned["hashes"] == again["hashes"]


def torchrun(tmp_path, *flags, **settings):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", PROG, "compiled",
           "--dist", *flags]
    proc = subprocess.run(cmd, env=env_for(tmp_path, **settings), capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    results = [json.loads((tmp_path / f"result.rank{r}.json").read_text()) for r in (0, 1)
               if (tmp_path / f"result.rank{r}.json").exists()]
    return proc, results


def test_consensus_compiled_one_rank_times(tmp_path):
    proc, ranks = torchrun(tmp_path, AUTOTUNE_MODE="consensus")
    assert proc.returncode == 0 and len(ranks) == 2, proc.stderr[-4000:]
    # One rank timed for the job: every candidate once, then the finalists again in rounds
    timed = [r["inductor_bench"] for r in ranks if r["inductor_bench"]]
    assert len(timed) == 1 and timed[0] >= 10, [r["inductor_bench"] for r in ranks]
    logs = [entries(r["log"]) for r in ranks]
    assert logs[0][KEY].split(";")[0] == logs[1][KEY].split(";")[0]
    assert {v.split(";")[1] for v in (logs[0][KEY], logs[1][KEY])} == {"consensus"}
    assert ranks[0]["hashes"] == ranks[1]["hashes"]


def test_chaos_compiled_is_caught_by_verification(tmp_path):
    proc, ranks = torchrun(tmp_path, AUTOTUNE_MODE="pinned", AUTOTUNE_CHAOS="1", AUTOTUNE_VERIFY_EVERY="1")
    assert proc.returncode == 0, proc.stderr[-4000:]
    logs = [entries(r["log"]) for r in ranks]
    assert logs[0][KEY] != logs[1][KEY]
    assert "autotune choices differ" in proc.stderr and ROWSUM in proc.stderr


KEYED_CHILD = r"""
import json, sys
import torch
from torch._inductor.runtime import triton_heuristics
from autotune_guard import choice_log
from autotune_guard.adapters.inductor import keyed
from kernels.keyed_block import blocks

fn = torch.compile(lambda t: blocks(t) + 0, dynamic=True)
sizes = [4096, 8192, 4096, 2048]
seen = []
for i in range(400):  # keys alternate, so every decided key's launch takes the written-out path
    seen.append((sizes[i % 4], int(fn(torch.empty(sizes[i % 4], device="cuda"))[0])))
torch.cuda.synchronize()
import gc
def kernels():
    for o in gc.get_objects():
        try:  # gc also holds weak proxies whose referent is gone: isinstance() raises on those
            if isinstance(o, triton_heuristics.CachingAutotuner):
                yield o
        except ReferenceError:
            pass
how = sorted({keyed.how_followed(o) or "none" for o in kernels()})
print(json.dumps({"seen": sorted(set(seen)), "how": how, "log": choice_log()}))
"""


def test_dynamic_shapes_follow_the_key_on_every_launch_without_a_wrapper(tmp_path):
    """dynamic=True: one compiled kernel, four keys alternating; every call runs the config pinned
    for its own key (the kernel writes its BLOCK), the decided keys through Inductor's steady path
    written out with the key's launcher (no frame of the guard's around Inductor's run)."""
    arch = "sm%d%d" % torch.cuda.get_device_capability()
    table = tmp_path / f"{arch}.json"
    pins = {4096: 256, 8192: 1024, 2048: 128}
    table.write_text(json.dumps({"format": "autotune_guard.table/1", "arch": arch, "kernels": {
        "kernels.keyed_block.block_of": {f"{n},torch.int32": {"kwargs": {"BLOCK": b}, "num_warps": 4} for n, b in pins.items()}}}))
    proc = subprocess.run([sys.executable, "-c", KEYED_CHILD], capture_output=True, text=True, timeout=300,
                          env=env_for(tmp_path, AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=table,
                                      AUTOTUNE_ON_MISS="error"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = last_json(proc.stdout)
    assert {tuple(s) for s in result["seen"]} == set(pins.items()), result
    assert "written-out" in result["how"], result
    assert entries(result["log"], "kernels.keyed_block.block_of") == {
        f"{n},torch.int32": f"BLOCK={b},num_warps=4,num_stages=3,num_ctas=1;table" for n, b in pins.items()}, result
