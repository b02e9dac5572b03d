"""The GPU tier: real kernels compiled for and run on a CUDA GPU, in cold processes where the
installed package's ``.pth`` installs the guard from ``AUTOTUNE_*`` variables.

Skipped where there is no CUDA GPU (the CPU suite covers the same logic through Triton's
interpreter).  ``bash scripts/run_gpu_bench.sh`` runs this tier on a GPU machine.  The kernels are
those of the GPU benchmarks (scripts/gpu/gpu_kernels.py); every timer wraps Triton's own
``triton.testing.do_bench`` and counts its calls.
"""

import json
import os
import subprocess
import sys

import pytest

from support import REPO, last_json, rank_file, run_python


def _cuda_device():
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.device_count() > 0
    except Exception:
        return False


pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not _cuda_device(),
    reason="no CUDA GPU on this machine: the GPU tier runs real kernels (bash scripts/run_gpu_bench.sh on a GPU machine)",
)]

ROWSUM = "gpu_kernels.rowsum_body"
ADD = "gpu_kernels.add_body"
F32 = "torch.float32"

# Runs rowsum over each COLS and one add, checks the results against torch, prints one JSON line.
PROGRAM = """
import hashlib, json
import torch, triton.testing
import gpu_kernels
from autotune_guard import active_policy, choice_log
from autotune_guard.runtime import current

calls = []

def timer(kernel_call, quantiles):
    calls.append(1)
    return triton.testing.do_bench(kernel_call, quantiles=quantiles)

rowsum = gpu_kernels.make_rowsum(timer)
add = gpu_kernels.make_add(timer)
gen = torch.Generator(device="cuda").manual_seed(0)
hashes = {}
for cols in COLS:
    x = torch.randn(512, cols, device="cuda", generator=gen)
    out = gpu_kernels.rowsum(rowsum, x)
    ref = x.double().sum(dim=1)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5
    hashes[f"rowsum {cols}"] = hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest()
x = torch.randn(4096, device="cuda", generator=gen)
y = torch.randn(4096, device="cuda", generator=gen)
assert torch.equal(gpu_kernels.add(add, x, y, torch.empty_like(x)), x + y)
torch.cuda.synchronize()
policy = active_policy()
print(json.dumps({"timer_calls": len(calls), "log": choice_log(), "arch": current().facts.get("arch"),
                  "mode": policy.mode if policy else None, "hashes": hashes,
                  "capability": list(torch.cuda.get_device_capability()), "name": torch.cuda.get_device_name()}))
"""


def gpu_env(**settings) -> dict:
    """This environment on the GPU: no AUTOTUNE_* but the test's, no interpreter, the kernels importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = os.path.join(REPO, "scripts", "gpu")
    env.update({k: str(v) for k, v in settings.items()})
    return env


def run_program(cols, cwd, check=True, **settings):
    proc = run_python(PROGRAM.replace("COLS", repr(list(cols))), env=gpu_env(**settings), check=check, cwd=cwd,
                      timeout=600)
    return proc if not check else last_json(proc.stdout)


def rowsum_key(cols):
    return f"{cols},{F32},{F32}"


@pytest.fixture(scope="module")
def pinned_run(tmp_path_factory):
    return run_program([16384, 4096, 1000], tmp_path_factory.mktemp("pinned"), AUTOTUNE_MODE="pinned")


def test_pinned_never_times_real_kernels(pinned_run, tmp_path):
    assert pinned_run["mode"] == "pinned"
    assert pinned_run["timer_calls"] == 0
    arch = pinned_run["arch"]
    assert sorted(pinned_run["log"]) == sorted(
        [f"{arch}|{ROWSUM}|{rowsum_key(c)}" for c in (16384, 4096, 1000)] + [f"{arch}|{ADD}|4096,{F32},{F32},{F32}"])
    assert all(v.endswith(";fallback (min_cost)") for v in pinned_run["log"].values())  # no table
    # min_cost: the smallest tile, BLOCK=256 with 4 warps, for every row-sum key.
    assert {v for k, v in pinned_run["log"].items() if ROWSUM in k} == {
        "BLOCK=256,num_warps=4,num_stages=3,num_ctas=1;fallback (min_cost)"}
    # The control: the same program in auto mode does time, with the same timer.
    auto = run_program([16384], tmp_path, AUTOTUNE_MODE="auto")
    assert auto["mode"] == "auto"
    assert auto["timer_calls"] == 10 + 4  # every row-sum candidate, every add candidate
    assert all(v.endswith(";timed") for v in auto["log"].values()) and len(auto["log"]) == 2


def test_arch_is_detected_from_the_device(pinned_run):
    major, minor = pinned_run["capability"]
    assert pinned_run["arch"] == f"sm{major}{minor}"
    if any(name in pinned_run["name"] for name in ("H100", "H200", "H800", "GH200")):
        assert pinned_run["arch"] == "sm90"
    assert all(entry.startswith(pinned_run["arch"] + "|") for entry in pinned_run["log"])


def test_table_round_trip_record_merge_pin(tmp_path):
    cols = [16384, 1000]
    prefix = tmp_path / "runs" / "rec"
    recorded = run_program(cols, tmp_path, AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=prefix)
    assert recorded["mode"] == "record" and recorded["timer_calls"] == 2 * 10 + 4
    arch = recorded["arch"]
    record_file = rank_file(tmp_path / "runs" / "rec", 0)
    document = json.loads(open(record_file).read())
    assert document["arch"] == arch and document["complete"] is True
    assert set(document["kernels"]) == {ROWSUM, ADD}

    tables = tmp_path / "tables"
    merge = subprocess.run([sys.executable, "-m", "autotune_guard.report", "merge", str(prefix), "-o",
                            str(tables / f"{arch}.json")], capture_output=True, text=True, env=gpu_env(), cwd=tmp_path)
    assert merge.returncode == 0, merge.stderr
    table = json.loads((tables / f"{arch}.json").read_text())
    assert table["arch"] == arch and set(table["kernels"]) == {ROWSUM, ADD}

    pinned = run_program(cols, tmp_path, AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tables, AUTOTUNE_ON_MISS="error")
    assert pinned["timer_calls"] == 0
    # Every key runs the recorded winner: the same configs, hence the same output bits.
    assert {k: v.split(";")[0] for k, v in pinned["log"].items()} == {k: v.split(";")[0] for k, v in recorded["log"].items()}
    assert all(v.endswith(";table") for v in pinned["log"].values())
    assert pinned["hashes"] == recorded["hashes"]

    # Without the table the same settings refuse, naming kernel, key and arch: the table is what answered.
    refused = run_program(cols, tmp_path, check=False, AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error")
    assert refused.returncode != 0
    assert ROWSUM in refused.stderr and rowsum_key(16384) in refused.stderr and f"arch {arch}" in refused.stderr


def test_real_timer_calls_outside_governed_autotuners_are_named_and_inside_them_not(tmp_path):
    code = """
import torch, triton, triton.testing
import gpu_kernels
import kernels.custom_tuners as ct
rowsum = gpu_kernels.make_rowsum(None)  # Triton's own default timer
x = torch.randn(512, 4096, device="cuda")
gpu_kernels.rowsum(rowsum, x)
gptq = ct.gptq()  # times with triton.testing.do_bench itself
for _ in range(2):
    assert torch.equal(ct.launch(gptq, device="cuda"), torch.arange(100., device="cuda") * 2)
ct.tune_by_hand(device="cuda")
triton.testing.do_bench(lambda: x.sum())
torch.cuda.synchronize()
"""
    env = gpu_env(AUTOTUNE_MODE="auto", AUTOTUNE_LOG_LEVEL="INFO")
    env["PYTHONPATH"] += os.pathsep + os.path.join(REPO, "tests")
    proc = run_python(code, env=env, cwd=tmp_path, timeout=600)
    assert "2 not governed: kernels.custom_tuners.double_kernel, kernels.custom_tuners.tune_by_hand" in proc.stderr, \
        proc.stderr
    assert proc.stderr.count("kernels.custom_tuners.double_kernel: its autotuner") == 1
    assert "gpu_kernels" not in " ".join(line for line in proc.stderr.splitlines() if "not governed" in line)
    assert "outside any autotuner" in proc.stderr
