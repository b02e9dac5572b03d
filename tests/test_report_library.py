"""A library's own config choice (fla's ``CachedAutotuner`` with ``FLA_CACHE_MODE``: a config
put into Triton's cache before Triton's run, logged as ``library``) through the whole loop:
record -> merge (the table is made from everything else; the library's keys named, one line per
kernel) -> pinned (the table's keys pinned untimed, the library's left to it); ``show`` marks
them.  A real ``triton.runtime.autotuner.Autotuner`` subclass under TRITON_INTERPRET=1."""

import torch
import triton

from support import rank_file

from kernels import seams

KERNEL = "kernels.seams.double_body"
F32 = "torch.float32"


def _x(n):
    return torch.arange(n, dtype=torch.float32)


def _record(guard, prefix):
    from autotune_guard import evidence

    guard({"AUTOTUNE_RECORD_PATH": prefix})
    kernel = seams.make(cls=seams.CachedAutotuner)
    for n in (100, 200):
        assert seams.launch(kernel, _x(n)).equal(_x(n) * 2)  # timed by Triton
    seams.LIBRARY_CONFIG.append(triton.Config({"BLOCK": 8}))  # the library's own, no candidate
    for n in (300, 400):
        assert seams.launch(kernel, _x(n)).equal(_x(n) * 2)
    evidence.write_files(complete=True)


def test_fla_style_record_merge_pinned_round_trip(guard, tmp_path, capsys):
    from autotune_guard import choice_log, report
    from autotune_guard.core import schema

    del seams.RAN[:], seams.TIMER_CALLS[:], seams.LIBRARY_CONFIG[:]
    prefix, table = str(tmp_path / "rec"), tmp_path / "interpret.json"
    try:
        _record(guard, prefix)
        capsys.readouterr()
        assert report.main(["merge", prefix, "-o", str(table)]) == 0
        out = capsys.readouterr().out
        notes = [line for line in out.splitlines() if "left out" in line]
        assert len(notes) == 1 and KERNEL in notes[0] and "library" in notes[0]
        assert f"(300,{F32},{F32})" in notes[0] and f"(400,{F32},{F32})" in notes[0] and "2 keys" in notes[0]
        entries = schema.read_document(str(table))["kernels"][KERNEL]
        assert sorted(entries) == [f"100,{F32},{F32}", f"200,{F32},{F32}"]

        assert report.main(["show", prefix]) == 0
        shown = capsys.readouterr().out.splitlines()
        marked = [line for line in shown if "library-decided" in line]
        assert len(marked) == 2 and all("(300," in line or "(400," in line for line in marked)

        guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": str(table)})
        kernel = seams.make(cls=seams.CachedAutotuner)  # a cold autotuner
        del seams.TIMER_CALLS[:], seams.LIBRARY_CONFIG[:]
        for n in (100, 200):
            assert seams.launch(kernel, _x(n)).equal(_x(n) * 2)
        seams.LIBRARY_CONFIG.append(triton.Config({"BLOCK": 8}))  # the library chooses these keys again
        for n in (300, 400):
            assert seams.launch(kernel, _x(n)).equal(_x(n) * 2)
        log = choice_log()
        assert seams.TIMER_CALLS == []
        assert [log[f"interpret|{KERNEL}|{n},{F32},{F32}"].rpartition(";")[2] for n in (100, 200, 300, 400)] == \
            ["table", "table", "library", "library"]
        assert log[f"interpret|{KERNEL}|100,{F32},{F32}"].partition(";")[0] == \
            schema.read_document(rank_file(prefix, 0))["kernels"][KERNEL][f"100,{F32},{F32}"]["signature"]
    finally:
        del seams.LIBRARY_CONFIG[:]


def test_merge_of_only_library_choices_writes_an_empty_table_and_says_why(guard, tmp_path, capsys):
    from autotune_guard import evidence, report
    from autotune_guard.core import schema

    del seams.LIBRARY_CONFIG[:]
    prefix, table = str(tmp_path / "rec"), tmp_path / "interpret.json"
    try:
        guard({"AUTOTUNE_RECORD_PATH": prefix})
        kernel = seams.make(cls=seams.CachedAutotuner)
        seams.LIBRARY_CONFIG.append(kernel.configs[1])
        seams.launch(kernel, _x(50))
        evidence.write_files(complete=True)
        capsys.readouterr()
        assert report.main(["merge", "--json", prefix, "-o", str(table)]) == 0
        import json

        result = json.loads(capsys.readouterr().out)
        assert result["left_out_library"] == {KERNEL: [f"50,{F32},{F32}"]} and result["entries"] == []
        assert schema.read_document(str(table))["kernels"] == {}
    finally:
        del seams.LIBRARY_CONFIG[:]
