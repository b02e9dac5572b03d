"""Numerics provenance: a table records the effective FP-fusion setting beside each kernel's
provenance (TRITON_DEFAULT_FP_FUSION, TRITON_FORCE_DISABLE_FP_FUSION, the kernel's own
enable_fp_fusion); pinned under other numerics, an entry is refused with AUTOTUNE_ON_MISS=error and
otherwise named once and used; ``report show`` shows the setting and ``report diff`` a difference.
Real kernels in cold processes under TRITON_INTERPRET=1 (Triton 3.9 reads both variables)."""

import json
import os
import textwrap

import pytest

from support import clean_env, run_python

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

KERNEL = "fused_kernels.axpy"
MODULE = '''
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({'BLOCK': 16}, num_warps=1), triton.Config({'BLOCK': 32}, num_warps=1)],
                 key=["n"], do_bench=lambda call, quantiles: (call(), [1.0, 1.0, 1.0])[1])
@triton.jit
def axpy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 3.0 + 1.0, mask=mask)
'''
RUN = textwrap.dedent("""
    import json, sys, torch, triton, autotune_guard, fused_kernels
    extra = {"enable_fp_fusion": False} if "own-off" in sys.argv else {}
    for n in (100, 300):
        x = torch.arange(n, dtype=torch.float32); out = torch.empty_like(x)
        fused_kernels.axpy[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, **extra)
    print(json.dumps(autotune_guard.choice_log()))
""")
FUSION_VARS = ("TRITON_DEFAULT_FP_FUSION", "TRITON_FORCE_DISABLE_FP_FUSION")


def _run_argv(tmp_path, argv, check=True, **settings):
    code = RUN.replace('"own-off" in sys.argv', repr("own-off" in argv))
    env = {k: v for k, v in clean_env(**settings).items() if k not in FUSION_VARS or k in settings}
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    return run_python(code, env=env, check=check)


def _table(tmp_path, **fusion):
    from autotune_guard import report

    (tmp_path / "fused_kernels.py").write_text(MODULE)
    _run_argv(tmp_path, (), AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=tmp_path / "rec", **fusion)
    (tmp_path / "tables").mkdir()
    assert report.main(["merge", str(tmp_path / "rec"), "-o", str(tmp_path / "tables" / "interpret.json")]) == 0
    return dict(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tmp_path / "tables")


def _reads_force_disable() -> bool:
    import triton

    return hasattr(getattr(getattr(triton, "knobs", None), "language", None), "force_disable_fp_fusion")


def _named(proc):
    return [line for line in proc.stderr.splitlines() if "other numerics" in line]


def test_fusion_on_table_pinned_with_fusion_off_is_refused_or_named_once(tmp_path, capsys):
    from autotune_guard import report

    pinned = _table(tmp_path, TRITON_DEFAULT_FP_FUSION="1")
    table = json.loads((tmp_path / "tables" / "interpret.json").read_text())
    assert table["provenance"][KERNEL]["fp_fusion"] == "on"
    assert table["provenance"][KERNEL]["fp_fusion_by"] == "TRITON_DEFAULT_FP_FUSION=1"

    same = _run_argv(tmp_path, (), TRITON_DEFAULT_FP_FUSION="1", AUTOTUNE_ON_MISS="error", **pinned)
    assert not _named(same)

    refused = _run_argv(tmp_path, (), check=False, TRITON_DEFAULT_FP_FUSION="0", AUTOTUNE_ON_MISS="error", **pinned)
    assert refused.returncode != 0
    assert "FP fusion on when recorded (TRITON_DEFAULT_FP_FUSION=1), off now (TRITON_DEFAULT_FP_FUSION=0)" \
        in refused.stderr and "AUTOTUNE_ON_MISS=error" in refused.stderr and KERNEL in refused.stderr

    used = _run_argv(tmp_path, (), TRITON_DEFAULT_FP_FUSION="0", **pinned)
    assert len(_named(used)) == 1 and "entries are used" in _named(used)[0]  # two keys, said once
    assert json.loads(used.stdout.splitlines()[-1]) == json.loads(same.stdout.splitlines()[-1])

    consensus = _run_argv(tmp_path, (), check=False, TRITON_DEFAULT_FP_FUSION="0", AUTOTUNE_ON_MISS="error",
                          **{**pinned, "AUTOTUNE_MODE": "consensus"})  # a process alone, its table's entries
    assert consensus.returncode != 0 and "off now (TRITON_DEFAULT_FP_FUSION=0)" in consensus.stderr

    capsys.readouterr()
    assert report.main(["show", str(tmp_path / "tables" / "interpret.json")]) == 0
    assert "FP fusion on (TRITON_DEFAULT_FP_FUSION=1)" in capsys.readouterr().out


def test_forced_off_and_the_kernels_own_setting_are_numerics_too(tmp_path):
    pinned = _table(tmp_path)  # fusion variables unset: Triton 3.9's default (on)
    table = json.loads((tmp_path / "tables" / "interpret.json").read_text())
    assert table["provenance"][KERNEL]["fp_fusion"] == "on"
    assert "unset" in table["provenance"][KERNEL]["fp_fusion_by"]

    forced = _run_argv(tmp_path, (), check=False, TRITON_FORCE_DISABLE_FP_FUSION="1", AUTOTUNE_ON_MISS="error",
                       **pinned)
    if _reads_force_disable():
        assert forced.returncode != 0 and "off now (TRITON_FORCE_DISABLE_FP_FUSION=1)" in forced.stderr
    else:  # a Triton without the variable (3.3): it changes nothing, and nothing is named
        assert forced.returncode == 0 and not _named(forced)

    own = _run_argv(tmp_path, ("own-off",), check=False, TRITON_DEFAULT_FP_FUSION="1", AUTOTUNE_ON_MISS="error",
                    **pinned)
    assert own.returncode != 0 and "off now (the kernel's enable_fp_fusion=False)" in own.stderr


def test_a_table_without_the_field_is_read_and_not_compared(tmp_path, capsys):
    from autotune_guard import report

    pinned = _table(tmp_path, TRITON_DEFAULT_FP_FUSION="1")
    path = tmp_path / "tables" / "interpret.json"
    table = json.loads(path.read_text())
    for name in ("fp_fusion", "fp_fusion_by"):  # as a table made before the field
        del table["provenance"][KERNEL][name]
    path.write_text(json.dumps(table))
    old = _run_argv(tmp_path, (), TRITON_DEFAULT_FP_FUSION="0", AUTOTUNE_ON_MISS="error", **pinned)
    assert not _named(old) and "another version" not in old.stderr
    capsys.readouterr()
    assert report.main(["show", str(path)]) == 0
    assert "FP fusion not recorded" in capsys.readouterr().out
