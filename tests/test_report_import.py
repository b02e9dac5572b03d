"""``python -m autotune_guard.report import``: Triton's autotune disk cache -> a table -> pinned.

Triton writes the cache only on a GPU (3.6+ ignores ``cache_results`` under the interpreter, and
``check_disk_cache`` asks the GPU driver for the target), so the files here are written the way
``Autotuner.check_disk_cache`` writes them: through Triton's own cache manager, under
``TRITON_CACHE_DIR``, named ``<function>.autotune.json``, holding the tuning key and each
candidate's ``Config.__dict__`` with the timings a real tuning in this process measured.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
import triton

from support import clean_env, last_json, run_python

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

F32 = "torch.float32"


def write_like_triton(cache_dir, kernel, key, configs_timings, monkeypatch):
    """Autotuner.check_disk_cache's write (Triton 3.4-3.9), with Triton's cache manager."""
    import hashlib

    from triton.runtime.cache import get_cache_manager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache_dir))
    # Triton hashes its version, the backend, the function, the env, the key and the candidates;
    # without a GPU backend, the parts this process has.
    parts = [triton.__version__, kernel.base_fn.__name__, str(key)] + [str(c) for c in configs_timings]
    cache = get_cache_manager(hashlib.sha256("-".join(parts).encode("utf-8")).hexdigest())
    file_name = f"{kernel.base_fn.__name__[:150]}.autotune.json"
    return cache.put(json.dumps({
        "key": key,
        "configs_timings": [(config.__dict__, timings) for config, timings in configs_timings.items()
                            if not config.pre_hook],
    }), file_name, binary=False)


def report(*args, env=None):
    return subprocess.run([sys.executable, "-m", "autotune_guard.report", *args], capture_output=True, text=True,
                          env=env or clean_env(), timeout=120)


PINNED = """
import json, torch
import autotune_guard
from kernels import demo
x = torch.rand(1000)
assert torch.equal(demo.add(x, x), x + x)
print(json.dumps({"log": autotune_guard.choice_log(), "timer_calls": len(demo.TIMER_CALLS)}))
"""


def test_a_real_tunings_cache_file_becomes_a_table_that_pins_its_winner(guard, tmp_path, monkeypatch):
    if not hasattr(triton.runtime.autotuner.Autotuner, "check_disk_cache"):
        pytest.skip("Triton's autotune disk cache exists from 3.4 on")
    from kernels import demo

    guard({"AUTOTUNE_MODE": "auto"})
    x = torch.rand(1000)
    demo.add(x, x)  # Triton times the 8 candidates of key 1000 in this process
    (key,) = [k for k in demo.add_kernel.cache if k[0] == 1000]
    timings = dict(demo.add_kernel.configs_timings)
    winner = demo.add_kernel.cache[key]
    assert len(timings) == 8
    cache_dir = tmp_path / "triton-cache"
    path = write_like_triton(cache_dir, demo.add_kernel, key, timings, monkeypatch)
    assert path.startswith(str(cache_dir)) and path.endswith("add_kernel.autotune.json")

    table = tmp_path / "tables" / "interpret.json"
    proc = report("import", str(cache_dir), "--arch", "interpret", "-o", str(table))
    assert proc.returncode == 0, proc.stderr
    assert "1 kernel, 1 key" in proc.stdout
    document = json.loads(table.read_text())
    assert document["format"] == "autotune_guard.table/1" and document["arch"] == "interpret"
    text = f"1000,{F32},{F32},{F32}"
    assert document["kernels"] == {"add_kernel": {text: {"kwargs": dict(winner.kwargs), "num_warps": winner.num_warps,
                                                         "num_stages": winner.num_stages, "num_ctas": 1}}}
    # TRITON_CACHE_DIR is the default directory.
    again = report("import", "--arch", "interpret", "-o", str(tmp_path / "again.json"),
                   env=clean_env(TRITON_CACHE_DIR=cache_dir))
    assert again.returncode == 0 and json.loads((tmp_path / "again.json").read_text())["kernels"] == document["kernels"]

    # A pinned run with that table and AUTOTUNE_ON_MISS=error runs Triton's winner, untimed.
    run = last_json(run_python(PINNED, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error",
                                                     AUTOTUNE_TABLE_PATH=table.parent)).stdout)
    expected = f"BLOCK={winner.kwargs['BLOCK']},num_warps={winner.num_warps},num_stages={winner.num_stages},num_ctas=1"
    assert run["log"] == {f"interpret|kernels.demo.add_kernel|{text}": f"{expected};table"}
    assert run["timer_calls"] == 0


def test_unusable_caches_are_named(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = report("import", str(empty), "--arch", "sm90", "-o", str(tmp_path / "t.json"))
    assert proc.returncode == 2 and str(empty) in proc.stderr and "TRITON_CACHE_AUTOTUNING" in proc.stderr
    bad = tmp_path / "cache" / "abc" / "k.autotune.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"key": [1], "configs_timings": [[{"kwargs": {}}, ')
    proc = report("import", str(tmp_path / "cache"), "--arch", "sm90", "-o", str(tmp_path / "t.json"))
    assert proc.returncode == 2 and str(bad) in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "t.json").exists()
    proc = report("import", str(tmp_path / "cache"), "-o", str(tmp_path / "t.json"))
    assert proc.returncode == 2 and "--arch" in proc.stderr


def test_the_newest_file_wins_and_extra_fields_are_kept(tmp_path):
    """Two files for one kernel and key (another candidate list, another Triton): the newest wins,
    with a note; ir_override travels into the table."""
    old = tmp_path / "c" / "h1" / "mm.autotune.json"
    new = tmp_path / "c" / "h2" / "mm.autotune.json"
    for path in (old, new):
        path.parent.mkdir(parents=True)
    base = {"num_warps": 4, "num_ctas": 1, "num_stages": 3, "maxnreg": None, "pre_hook": None}
    old.write_text(json.dumps({"key": [64, "torch.float16"], "configs_timings": [
        [{"kwargs": {"B": 32}, **base, "ir_override": None}, [2.0, 1.9, 2.1]],
        [{"kwargs": {"B": 64}, **base, "ir_override": None}, [1.0, 0.9, 1.1]]]}))
    new.write_text(json.dumps({"key": [64, "torch.float16"], "configs_timings": [
        [{"kwargs": {"B": 32}, **base, "ir_override": "/o/mm.ttgir"}, [0.5, 0.4, 0.6]],
        [{"kwargs": {"B": 64}, **base, "ir_override": None}, [1.0, 0.9, 1.1]]]}))
    os.utime(old, (1, 1))
    proc = report("import", str(tmp_path / "c"), "--arch", "sm90", "-o", str(tmp_path / "sm90.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert len(result["notes"]) == 1 and str(new) in result["notes"][0]
    entry = json.loads((tmp_path / "sm90.json").read_text())["kernels"]["mm"]["64,torch.float16"]
    assert entry == {"kwargs": {"B": 32}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "ir_override": "/o/mm.ttgir"}


# Hostile cache files (the architecture review's cases): each is one line naming the file and exit 2,
# never a traceback, and no table is written that `report show` would refuse.
HUGE_INT = "9" * 5000
GOOD_CONFIG = {"kwargs": {"B": 32}, "num_warps": 4, "num_ctas": 1, "num_stages": 3, "maxnreg": None, "pre_hook": None}


def _cache_text(config_text=None, key_text='[64, "torch.float16"]'):
    config_text = config_text or json.dumps(GOOD_CONFIG)
    return f'{{"key": {key_text}, "configs_timings": [[{config_text}, [1.0, 0.9, 1.1]]]}}'


HOSTILE = {
    "a 5,000-digit integer": _cache_text(json.dumps(GOOD_CONFIG).replace('"num_warps": 4', f'"num_warps": {HUGE_INT}')),
    "a 5,000-digit integer in the key": _cache_text(key_text=f"[{HUGE_INT}]"),
    "100,000 nested brackets": "[" * 100000 + "]" * 100000,
    "100,000 nested brackets in a kwarg": _cache_text(json.dumps(GOOD_CONFIG).replace(
        '"B": 32', '"B": ' + "[" * 100000 + "]" * 100000)),
    '"num_warps": "x"': _cache_text(json.dumps({**GOOD_CONFIG, "num_warps": "x"})),
    "a list-valued kwarg": _cache_text(json.dumps({**GOOD_CONFIG, "kwargs": {"B": [32, 64]}})),
    "an object-valued kwarg": _cache_text(json.dumps({**GOOD_CONFIG, "kwargs": {"B": {"v": 32}}})),
    "kwargs a list": _cache_text(json.dumps({**GOOD_CONFIG, "kwargs": [32]})),
    "a boolean num_stages": _cache_text(json.dumps({**GOOD_CONFIG, "num_stages": True})),
    "a key part that is an object": _cache_text(key_text='[{"n": 64}]'),
    "timings a string": _cache_text().replace("[1.0, 0.9, 1.1]", '"fast"'),
    "not UTF-8": None,
    "a FIFO": None,
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_cache_file_is_one_line_naming_it(tmp_path, case):
    cache = tmp_path / "cache"
    (cache / "h0").mkdir(parents=True)
    (cache / "h0" / "good.autotune.json").write_text(_cache_text())  # a usable file beside it changes nothing
    bad = cache / "h1" / "mm.autotune.json"
    bad.parent.mkdir()
    if case == "a FIFO":
        os.mkfifo(bad)
    elif case == "not UTF-8":
        bad.write_bytes(b'{"key": [1], "configs_timings": "\xff\xfe"}')
    else:
        bad.write_text(HOSTILE[case])
    table = tmp_path / "sm90.json"
    for given in (cache, bad):  # the cache directory, and the one file named
        proc = report("import", str(given), "--arch", "sm90", "-o", str(table))
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (case, proc.stderr[-2000:])
        assert len(lines) == 1 and str(bad) in lines[0], (case, proc.stderr[-2000:])
        assert lines[0].startswith("python -m autotune_guard.report: error: ")
        assert not table.exists() and proc.stdout == ""
    if case == "a FIFO":
        assert "FIFO" in lines[0]


def test_fields_the_cache_file_omits_are_left_to_triton_and_the_table_is_one_show_reads(tmp_path):
    """No default is written down here: a field Triton's file leaves out stays out of the table
    (a pinned run takes Triton's default for it), and `report show` reads what import wrote."""
    cache = tmp_path / "c" / "h" / "mm.autotune.json"
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({"key": [64, "a,b", "torch.float16"], "configs_timings": [
        [{"kwargs": {"B": 32}}, [2.0, 1.9, 2.1]],
        [{"kwargs": {"B": 64}, "num_warps": 8, "maxnreg": None}, [1.0, 0.9, 1.1]]]}))
    table = tmp_path / "sm90.json"
    proc = report("import", str(cache.parent.parent), "--arch", "sm90", "-o", str(table))
    assert proc.returncode == 0, proc.stderr
    # The key is spelled as tuning keys are everywhere: a part holding a comma is quoted.
    assert json.loads(table.read_text())["kernels"] == {"mm": {'64,"a,b",torch.float16': {"kwargs": {"B": 64},
                                                                                          "num_warps": 8}}}
    shown = report("show", "--json", str(table))
    assert shown.returncode == 0, shown.stderr
    assert [row["configs"] for row in json.loads(shown.stdout)["keys"]] == [{"B=64,num_warps=8": 1}]
