"""Parity between two programs (docs/parity.md): a trainer and an inference program of the
repository (tests/progs/parity_trainer.py, parity_server.py) share demo.add_kernel; pinned from one
table, ``report diff --check`` of their evidence exits 0, counting the keys one met alone; with one
config changed in one program's table it exits 1 naming it; under another FP-fusion setting it
exits 1 naming the numerics. Real cold processes under TRITON_INTERPRET=1."""

import json
import os
import subprocess
import sys

import pytest

from support import TESTS, clean_env

pytestmark = pytest.mark.slow  # every test here starts processes (conftest.py: the slow tier)

ADD = "kernels.demo.add_kernel"
FUSION_VARS = ("TRITON_DEFAULT_FP_FUSION", "TRITON_FORCE_DISABLE_FP_FUSION")


def _program(name, *argv, **settings):
    env = {k: v for k, v in clean_env(**settings).items() if k not in FUSION_VARS or k in settings}
    proc = subprocess.run([sys.executable, os.path.join(TESTS, "progs", name), *argv], env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return proc


def _diff(a, b, capsys):
    from autotune_guard import report

    capsys.readouterr()
    code = report.main(["diff", "--check", str(a), str(b)])
    return code, capsys.readouterr().out


@pytest.fixture
def table(tmp_path):
    """One table for both programs: the trainer's record run, merged."""
    from autotune_guard import report

    _program("parity_trainer.py", AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=tmp_path / "rec")
    (tmp_path / "tables").mkdir()
    path = tmp_path / "tables" / "interpret.json"
    assert report.main(["merge", str(tmp_path / "rec"), "-o", str(path)]) == 0
    return path


def test_two_programs_from_one_table_agree_and_one_changed_config_is_named(tmp_path, table, capsys):
    pinned = dict(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=table.parent, TRITON_DEFAULT_FP_FUSION="1")
    _program("parity_trainer.py", AUTOTUNE_DIGEST_PATH=tmp_path / "trainer" / "c", **pinned)
    _program("parity_server.py", "100", "500", AUTOTUNE_DIGEST_PATH=tmp_path / "server" / "c", **pinned)
    code, out = _diff(tmp_path / "trainer" / "c", tmp_path / "server" / "c", capsys)
    assert code == 0, out
    # add 100 met by both; add 300 and scale 100, 300 by the trainer alone, add 500 by the server alone
    assert "1 same, 0 changed, 3 only in A, 1 only in B" in out and "is not a difference" in out
    assert "NUMERICS" not in out

    changed = tmp_path / "server_tables"
    changed.mkdir()
    document = json.loads(table.read_text())
    entry = document["kernels"][ADD]["100,torch.float32,torch.float32,torch.float32"]
    blocks = [b for b in (32, 64, 128, 256) if b != entry["kwargs"]["BLOCK"]]  # demo.ADD_CONFIGS' blocks
    entry["kwargs"]["BLOCK"] = blocks[0]  # another candidate of the kernel: pinned as the table says
    (changed / "interpret.json").write_text(json.dumps(document))
    _program("parity_server.py", "100", "500", AUTOTUNE_DIGEST_PATH=tmp_path / "server2" / "c",
             **{**pinned, "AUTOTUNE_TABLE_PATH": changed})
    code, out = _diff(tmp_path / "trainer" / "c", tmp_path / "server2" / "c", capsys)
    assert code == 1, out
    lines = [line for line in out.splitlines() if "CHANGED" in line]
    assert len(lines) == 1 and ADD in lines[0] and "key (100," in lines[0]
    assert f"BLOCK={blocks[0]}," in out and "1 changed, 3 only in A, 1 only in B" in out


def test_two_programs_under_other_fp_fusion_are_named(tmp_path, table, capsys):
    pinned = dict(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=table.parent)
    _program("parity_trainer.py", AUTOTUNE_DIGEST_PATH=tmp_path / "trainer" / "c", TRITON_DEFAULT_FP_FUSION="1",
             **pinned)
    _program("parity_server.py", "100", AUTOTUNE_DIGEST_PATH=tmp_path / "server" / "c",
             TRITON_DEFAULT_FP_FUSION="0", **pinned)
    code, out = _diff(tmp_path / "trainer" / "c", tmp_path / "server" / "c", capsys)
    assert code == 1, out
    assert "1 same, 0 changed" in out  # the configs agree: only the numerics differ
    line = next(line for line in out.splitlines() if "NUMERICS" in line)
    assert ADD in line and "A FP fusion on (TRITON_DEFAULT_FP_FUSION=1)" in line
    assert "B FP fusion off (TRITON_DEFAULT_FP_FUSION=0)" in line
    assert "scale_kernel" not in line  # met by the trainer alone: not compared
    from autotune_guard import report

    page = tmp_path / "diff.html"  # the HTML page says it too, under its summary
    assert report.main(["diff", "--format", "html", "-o", str(page), str(tmp_path / "trainer" / "c"),
                        str(tmp_path / "server" / "c")]) == 0
    said = page.read_text().split('<section id="ag-numerics">', 1)[1].split("</section>", 1)[0]
    assert "1 kernel met under other numerics (FP fusion)" in said and ADD in said
    assert "A FP fusion on (TRITON_DEFAULT_FP_FUSION=1); B FP fusion off (TRITON_DEFAULT_FP_FUSION=0)" in said
