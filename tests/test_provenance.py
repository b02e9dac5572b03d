"""Provenance: records and tables say what each kernel was (hashes of its source, candidate list
and tuning options; Triton version; device), and pinned mode names a table recorded against
another version of a kernel, or refuses it with AUTOTUNE_ON_MISS=error. Real kernels in a module
of their own, changed between cold processes, under TRITON_INTERPRET=1."""

import os
import textwrap

import pytest

from support import clean_env, rank_file, run_python

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

KERNEL = "stale_kernels.scale_body"
BODY = "tl.load(x_ptr + offs, mask=mask) * 2"
MODULE = '''
import triton
import triton.language as tl

@triton.autotune(configs=[{configs}], key=["n"], do_bench=lambda call, quantiles: (call(), [1.0, 1.0, 1.0])[1])
@triton.jit
def scale_body(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, {body}, mask=mask)
'''
RUN = textwrap.dedent("""
    import json, torch, triton, autotune_guard, stale_kernels
    for n in (100, 300):
        x = torch.arange(n, dtype=torch.float32); out = torch.empty_like(x)
        stale_kernels.scale_body[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    print(json.dumps(autotune_guard.choice_log()))
""")


def _version(tmp_path, blocks=(16, 32), body=BODY):
    configs = ", ".join(f"triton.Config({{'BLOCK': {b}}}, num_warps=1)" for b in blocks)
    (tmp_path / "stale_kernels.py").write_text(MODULE.format(configs=configs, body=body))


def _run(tmp_path, check=True, **settings):
    env = clean_env(**settings)
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    return run_python(RUN, env=env, check=check)


def _table(tmp_path):
    from autotune_guard import report

    _version(tmp_path)
    _run(tmp_path, AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=tmp_path / "rec")
    (tmp_path / "tables").mkdir()
    assert report.main(["merge", str(tmp_path / "rec"), "-o", str(tmp_path / "tables" / "interpret.json")]) == 0
    return dict(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tmp_path / "tables")


def test_records_and_tables_carry_provenance_and_show_prints_it(tmp_path, capsys):
    import triton

    from autotune_guard import report
    from autotune_guard.core import schema

    _table(tmp_path)
    entries = schema.read_document(rank_file(tmp_path / "rec", 0))["kernels"][KERNEL]
    recorded = {e["provenance"]["source"] for e in entries.values()}
    prov = next(iter(entries.values()))["provenance"]
    assert len(entries) == 2 and len(recorded) == 1
    assert prov["count"] == 2 and prov["triton"] == triton.__version__ and prov["device"] == "interpret"
    assert all(len(prov[name]) == 12 for name in ("source", "candidates", "options"))
    table = schema.read_document(str(tmp_path / "tables" / "interpret.json"))
    assert table["provenance"][KERNEL] == prov
    capsys.readouterr()
    assert report.main(["show", str(tmp_path / "tables" / "interpret.json")]) == 0
    shown = capsys.readouterr().out
    assert f"provenance: source {prov['source']}, candidates {prov['candidates']}, 2 candidates" in shown
    assert f"triton {triton.__version__}, device interpret" in shown


def test_pinned_names_a_table_recorded_against_other_source_or_candidates(tmp_path):
    pinned = _table(tmp_path)
    same = _run(tmp_path, **pinned)
    assert "another version" not in same.stderr

    _version(tmp_path, body="tl.load(x_ptr + offs, mask=mask) * 2 + 0")  # the source changed
    changed = _run(tmp_path, **pinned)
    lines = [line for line in changed.stderr.splitlines() if "another version" in line]
    assert len(lines) == 1 and KERNEL in lines[0] and "its source changed" in lines[0]
    assert "candidate" not in lines[0]
    assert changed.stdout.strip() == same.stdout.strip()  # the entries still match a config: used

    _version(tmp_path, blocks=(16, 32, 64))  # a candidate added
    added = _run(tmp_path, **pinned)
    lines = [line for line in added.stderr.splitlines() if "another version" in line]
    assert len(lines) == 1 and "its candidate list changed (2 candidates then, 3 now)" in lines[0]
    assert "source" not in lines[0]

    refused = _run(tmp_path, check=False, AUTOTUNE_ON_MISS="error", **pinned)
    assert refused.returncode != 0
    assert "its candidate list changed" in refused.stderr and "AUTOTUNE_ON_MISS=error" in refused.stderr
