"""Autotuner subclasses of kernel libraries, modelled in ``kernels.seams``: fla's
``CachedAutotuner`` (puts its own config into Triton's cache, then calls Triton's run) and
FlagGems' ``LibTuner`` (a run of its own that never calls Triton's).  Real kernels under
TRITON_INTERPRET=1."""

import logging

import pytest
import torch
import triton

from support import rank_file

from kernels import seams

F32 = "torch.float32"


def _x(n):
    return torch.arange(n, dtype=torch.float32)


def _entry(n, kernel="double_body"):
    return f"interpret|kernels.seams.{kernel}|{n},{F32},{F32}"


@pytest.fixture
def fresh():
    del seams.RAN[:], seams.TIMER_CALLS[:], seams.LIBRARY_CONFIG[:]
    yield
    del seams.LIBRARY_CONFIG[:]


def test_a_config_the_library_put_in_the_cache_is_logged_as_the_librarys(guard, fresh):
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "auto"})
    kernel = seams.make(cls=seams.CachedAutotuner)
    seams.launch(kernel, _x(100))  # nothing prefilled: Triton times
    assert choice_log()[_entry(100)].endswith(";timed") and len(seams.TIMER_CALLS) == 4
    seams.LIBRARY_CONFIG.append(kernel.configs[3])  # BLOCK=32, one of the candidates
    assert seams.launch(kernel, _x(300)).equal(_x(300) * 2)
    assert choice_log()[_entry(300)] == "BLOCK=32,num_warps=4,num_stages=3,num_ctas=1;library"
    assert len(seams.TIMER_CALLS) == 4 and seams.RAN[-1][:2] == (32, 300)


def test_record_keeps_what_the_library_chose_and_merge_leaves_it_out(guard, fresh, tmp_path, capsys):
    from autotune_guard import evidence, report
    from autotune_guard.core import schema as files

    prefix = str(tmp_path / "rec")
    guard({"AUTOTUNE_RECORD_PATH": prefix})
    kernel = seams.make(cls=seams.CachedAutotuner)
    seams.LIBRARY_CONFIG.append(triton.Config({"BLOCK": 8}))  # not one of the kernel's candidates
    assert seams.launch(kernel, _x(100)).equal(_x(100) * 2)
    evidence.write_files(complete=True)
    record = files.read_document(rank_file(prefix, 0))
    entry = record["kernels"]["kernels.seams.double_body"][f"100,{F32},{F32}"]
    assert entry["how"] == "library" and entry["config"]["kwargs"] == {"BLOCK": 8} and entry["timings"] is None
    assert sorted(c["kwargs"]["BLOCK"] for c in entry["candidates"]) == [16, 32, 64, 128]
    capsys.readouterr()
    code = report.main(["merge", prefix, "-o", str(tmp_path / "interpret.json")])  # the library's key is left out, named
    said = capsys.readouterr()
    out = said.out
    assert code == 0 and "left out 1 key of kernel kernels.seams.double_body" in out and "library" in out, said


def test_pinned_leaves_the_librarys_choice_and_says_so_once_or_refuses(guard, fresh, ag_log):
    from autotune_guard import SelectionError, choice_log

    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = seams.make(cls=seams.CachedAutotuner)
    seams.LIBRARY_CONFIG.append(kernel.configs[3])  # BLOCK=32; min_cost would be 16
    for n in (100, 300, 100):
        assert seams.launch(kernel, _x(n)).equal(_x(n) * 2)
    assert [r[:2] for r in seams.RAN] == [(32, 100), (32, 300), (32, 100)]
    assert choice_log()[_entry(100)].endswith(";library") and choice_log()[_entry(300)].endswith(";library")
    warnings = [m for m in ag_log.messages(logging.WARNING) if "FLA_CACHE_MODE" in m]
    assert len(warnings) == 1 and "kernel kernels.seams.double_body" in warnings[0]
    assert "kernels.seams.CachedAutotuner" in warnings[0] and "BLOCK=32" in warnings[0]
    # Without a prefilled config the same autotuner is pinned as usual.
    seams.LIBRARY_CONFIG.clear()
    seams.launch(kernel, _x(500))
    assert choice_log()[_entry(500)] == "BLOCK=16,num_warps=4,num_stages=3,num_ctas=1;fallback (min_cost)"
    assert seams.TIMER_CALLS == []

    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "error", "AUTOTUNE_BLOCK_SIZES": "BLOCK=16"})
    seams.LIBRARY_CONFIG.append(kernel.configs[3])
    with pytest.raises(SelectionError, match=r"kernels\.seams\.double_body.*FLA_CACHE_MODE.*AUTOTUNE_ON_MISS=error"):
        seams.launch(kernel, _x(700))


def test_a_subclass_whose_run_never_reaches_tritons_is_named(guard, fresh, ag_log):
    from autotune_guard import SelectionError, choice_log

    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = seams.make(cls=seams.OwnRunTuner)
    for n in (100, 300):
        assert seams.launch(kernel, _x(n)).equal(_x(n) * 2)
    named = [m for m in ag_log.messages(logging.WARNING) if "overrides run()" in m]
    assert len(named) == 1 and "kernel kernels.seams.double_body" in named[0]
    assert "kernels.seams.OwnRunTuner" in named[0] and "pinned mode" in named[0]
    assert choice_log() == {}

    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "error"})
    with pytest.raises(SelectionError, match=r"kernels\.seams\.double_body.*OwnRunTuner.*AUTOTUNE_ON_MISS=error"):
        seams.launch(kernel, _x(100))
    # A plain autotuner, and a subclass that calls Triton's run, are not named.
    guard({"AUTOTUNE_MODE": "pinned"})
    before = len([m for m in ag_log.messages(logging.WARNING) if "overrides run()" in m])
    seams.launch(seams.make(), _x(100))
    seams.launch(seams.make(cls=seams.CachedAutotuner), _x(100))
    # (with no table each is named as a min_cost fallback, a warning of another kind)
    assert len([m for m in ag_log.messages(logging.WARNING) if "overrides run()" in m]) == before
