"""max-autotune's template selection on a GPU, in cold processes where the installed package's
``.pth`` installs the guard: record -> ``report merge`` -> pinned makes 0 template benchmarks and
runs the recorded winner. The processes are scripts/gpu/templates_proof.py's worker (a 1024x1024
fp16 ``mm`` under ``torch.compile(mode="max-autotune")``); the CPU tier is test_inductor_templates.py.
"""

import json
import os
import subprocess
import sys

import pytest

from support import TESTS

try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except Exception:
    HAS_CUDA = False

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU: max-autotune's Triton GEMM templates need one "
                                "(scripts/gpu/templates_proof.py on a GPU machine)")]

PROOF = os.path.join(os.path.dirname(TESTS), "scripts", "gpu", "templates_proof.py")


def worker(tmp_path, name, **settings):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.pop("TRITON_INTERPRET", None)
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"ic-{name}"), **{k: str(v) for k, v in settings.items()})
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, PROOF, "worker", str(out)], env=env, capture_output=True, text=True,
                          timeout=500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text()), proc.stderr


def test_record_merge_pinned_makes_no_template_benchmark(tmp_path):
    recorded, _ = worker(tmp_path, "record", AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=tmp_path / "rec")
    assert recorded["template_benchmarks"] >= 1
    (key, choice), = recorded["choices"].items()
    assert key.split("|")[1] == "torch.compile template selection:mm" and choice.endswith(";timed")
    (tmp_path / "table").mkdir()
    merged = subprocess.run([sys.executable, "-m", "autotune_guard.report", "merge", str(tmp_path / "rec"), "-o",
                             str(tmp_path / "table" / f"{key.split('|')[0]}.json")], capture_output=True, text=True)
    assert merged.returncode == 0, merged.stderr
    for i in (1, 2):
        pinned, stderr = worker(tmp_path, f"pinned{i}", AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error",
                                AUTOTUNE_TABLE_PATH=tmp_path / "table")
        assert pinned["template_benchmarks"] == 0 and pinned["gpu_timings"] == 0
        assert pinned["choices"] == {key: choice.replace(";timed", ";table")}
        assert pinned["hash"] == recorded["hash"] and not pinned["ungoverned"]


def test_pinned_without_an_entry_refuses_with_on_miss_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ic"))
    proc = subprocess.run([sys.executable, PROOF, "worker", str(tmp_path / "out.json")], env=env, capture_output=True,
                          text=True, timeout=500)
    assert proc.returncode != 0
    assert "torch.compile template selection:mm" in proc.stderr and "AUTOTUNE_ON_MISS=error" in proc.stderr
