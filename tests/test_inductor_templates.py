"""max-autotune's template selection (Inductor's ``AlgorithmSelectorCache``) under the guard, on the CPU.

On the CPU, ``torch.compile(mode="max-autotune")`` of a frozen ``nn.Linear`` makes Inductor select
between its C++ GEMM template and aten's ``_mkl_linear`` (``packed_linear``), timing both: the same
seam as the Triton GEMM templates on a GPU (tests/test_gpu_templates.py). The end-to-end tests run
it in cold processes with the installed package's ``.pth``; the naming and the pinned rule are
tested on plain data.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from autotune_guard import SelectionError
from autotune_guard.adapters.inductor import template_choices as tc
from autotune_guard.core.model import ChoiceKey
from autotune_guard.core.settings import AutotunePolicy

WORKER = """
import hashlib, json, sys
import torch
import torch._inductor.config as ic
from torch._dynamo.utils import counters
ic.freezing = True
torch.manual_seed(0)
m = torch.nn.Linear(128, 128, bias=False).eval()
x = torch.randn(64, 128)
with torch.no_grad():
    y = torch.compile(m, mode="max-autotune")(x)
result = {"benchmarks": int(counters["inductor"]["select_algorithm_autotune"]),
          "hash": hashlib.sha256(y.numpy().tobytes()).hexdigest()[:16]}
if "autotune_guard._boot" in sys.modules:
    import autotune_guard
    result["choices"] = {k: v for k, v in autotune_guard.choice_log().items() if "template selection" in k}
    result["ungoverned"] = autotune_guard.ungoverned()
print(json.dumps(result))
"""
KERNEL = "torch.compile template selection:packed_linear"


def compile_in_a_cold_process(tmp_path, name, **settings):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "_AUTOTUNE_GUARD_"))}
    env.pop("TRITON_INTERPRET", None)
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"inductor-{name}"), **{k: str(v) for k, v in settings.items()})
    return subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=400,
                          cwd=tmp_path)


def result_of(proc):
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_record_merge_then_pinned_makes_no_benchmark_and_the_recorded_choice(tmp_path):
    recorded = result_of(compile_in_a_cold_process(tmp_path, "record", AUTOTUNE_MODE="record",
                                                   AUTOTUNE_RECORD_PATH=tmp_path / "rec"))
    assert recorded["benchmarks"] == 1  # Inductor timed its choices once, under the guard
    (key, choice), = recorded["choices"].items()
    arch, kernel, inputs = key.split("|", 2)
    assert (arch, kernel) == ("cpu", KERNEL) and inputs.startswith("[('cpu', 'torch.float32', 64, 128")
    assert choice.endswith(";timed") and not recorded["ungoverned"]
    (record_file,) = [p for p in tmp_path.iterdir() if p.name.startswith("rec.rank0")]
    entry = json.loads(record_file.read_text())["kernels"][KERNEL][inputs]
    assert len(entry["timings"]) == 2 and all(t[0] > 0 for t in entry["timings"].values())  # both choices timed
    assert {c["kwargs"]["choice"] for c in entry["candidates"]} >= {"_mkl_linear"}
    (tmp_path / "table").mkdir()
    merged = subprocess.run([sys.executable, "-m", "autotune_guard.report", "merge", str(tmp_path / "rec"), "-o",
                             str(tmp_path / "table" / "cpu.json")], capture_output=True, text=True)
    assert merged.returncode == 0, merged.stderr
    pinned = result_of(compile_in_a_cold_process(tmp_path, "pinned", AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error",
                                                 AUTOTUNE_TABLE_PATH=tmp_path / "table"))
    assert pinned["benchmarks"] == 0
    assert pinned["choices"] == {key: choice.replace(";timed", ";table")}
    assert pinned["hash"] == recorded["hash"] and not pinned["ungoverned"]


@pytest.mark.slow
def test_pinned_with_on_miss_error_refuses_a_selection_with_no_entry(tmp_path):
    proc = compile_in_a_cold_process(tmp_path, "refused", AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error")
    assert proc.returncode != 0
    assert f"kernel {KERNEL} key ([('cpu'" in proc.stderr and "no table entry and AUTOTUNE_ON_MISS=error" in proc.stderr


@pytest.mark.slow
def test_pinned_without_an_entry_takes_inductors_deterministic_choice_untimed_and_says_so(tmp_path):
    proc = compile_in_a_cold_process(tmp_path, "default", AUTOTUNE_MODE="pinned")
    result = result_of(proc)
    assert result["benchmarks"] == 0
    assert list(result["choices"].values()) == ["choice=_mkl_linear;fallback (deterministic)"]  # aten, as config.deterministic picks
    assert "no table entry: Inductor's deterministic choice, choice=_mkl_linear, untimed" in proc.stderr


# --- names, keys and the pinned rule on plain data ----------------------------------------------------


def test_a_template_choice_is_named_without_inductors_process_wide_counter():
    assert tc.choice_text("triton_mm_17", "BLOCK_M=64, num_warps=4", extern=False) == "triton_mm(BLOCK_M=64, num_warps=4)"
    assert tc.choice_text("cpp_CppMicroGemmFP32Vec_3", "", extern=False) == "cpp_CppMicroGemmFP32Vec"
    assert tc.choice_text("bmm_v2", "", extern=True) == "bmm_v2"  # an aten name is kept as it is
    assert tc.kernel_name("mm") == "torch.compile template selection:mm"
    assert (tc.arch_of("cuda", "sm90"), tc.arch_of("cpu", "sm90")) == ("sm90", "cpu")


def test_choices_that_read_alike_are_told_apart_in_order():
    descs = tc.descriptors(["triton_mm(a)", "mm", "triton_mm(a)"])
    assert [d["kwargs"]["choice"] for d in descs] == ["triton_mm(a)#1", "mm", "triton_mm(a)#2"]


KEY = ChoiceKey("sm90", "torch.compile template selection:mm", "[('cuda', 'torch.float16', 8, 8, 8, 1, 0)]")
DESCS = tc.descriptors(["triton_mm(BLOCK_M=64)", "mm", "triton_mm(BLOCK_M=128)"])
EXTERNS = [False, True, False]


def test_the_pinned_rule_takes_the_table_entry_else_refuses_or_takes_aten():
    entry = {"kwargs": {"choice": "triton_mm(BLOCK_M=128)"}}
    assert tc.pinned_pick(KEY, DESCS, EXTERNS, entry, AutotunePolicy(mode="pinned"))[:2] == (2, "table")
    pick = tc.pinned_pick(KEY, DESCS, EXTERNS, None, AutotunePolicy(mode="pinned"))
    assert pick.index == 1 and pick.why == "deterministic" and pick.warning is None
    stale = {"kwargs": {"choice": "triton_mm(BLOCK_M=256)"}}
    assert "matches no choice offered" in tc.pinned_pick(KEY, DESCS, EXTERNS, stale, AutotunePolicy(mode="pinned")).warning
    with pytest.raises(SelectionError, match=r"template selection:mm key .* its table entry matches no choice offered"):
        tc.pinned_pick(KEY, DESCS, EXTERNS, stale, AutotunePolicy(mode="pinned", on_miss="error"))
    assert tc.pinned_pick(KEY, DESCS, [False] * 3, None, AutotunePolicy(mode="pinned")).index == 0  # no aten: the first


def test_the_fingerprint_follows_the_tables_contents(tmp_path):
    (tmp_path / "sm90.json").write_text('{"a": 1}')
    before = tc.tables_fingerprint((str(tmp_path),))
    assert tc.tables_fingerprint((str(tmp_path),)) == before
    (tmp_path / "sm90.json").write_text('{"a": 2}')
    os.utime(tmp_path / "sm90.json", ns=(1, 1))
    assert tc.tables_fingerprint((str(tmp_path),)) != before


def test_a_max_autotune_compile_key_is_pinned_rules_fingerprint_or_bypasses_the_cache(tmp_path):
    import torch._inductor.config as inductor_config

    import autotune_guard
    from autotune_guard.adapters.inductor import template_cache, templates

    try:
        autotune_guard.install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": str(tmp_path)})
        assert template_cache.cache_tag() is None  # not max-autotune: Inductor's key as it is
        with inductor_config.patch(max_autotune=True):
            tag = template_cache.cache_tag()
            assert templates.governed() and tag.startswith("pinned|min_cost|chaos=None|")
            autotune_guard.install({"AUTOTUNE_MODE": "record", "AUTOTUNE_RECORD_PATH": str(tmp_path / "rec")})
            assert template_cache.cache_tag() == "bypass"
    finally:
        autotune_guard.uninstall()
    assert template_cache.cache_tag() is None
