#!/usr/bin/env bash
# Every GPU benchmark and the GPU test tier, in one go, on a machine with a CUDA GPU.
#
#   bash scripts/run_gpu_bench.sh [bench_gpu.py options]     # results in $OUT (default: a new temp dir)
#
# autotune_guard and python-dotenv come as wheels in .whl/ (no network needed):
#   pip download --no-deps -d .whl python-dotenv==1.2.4
#   pip wheel --no-deps --no-build-isolation -w .whl .
# They are installed into a fresh venv that also sees the interpreter's own packages (torch,
# triton, wrapt), so that autotune_guard's .pth really runs at every interpreter start there.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
BASE="${PYTHON:-python3}"
VENV="${VENV:-/tmp/ag-gpu-venv}"
STEPS="${STEPS-tests templates compile bench launch startup}"  # any of: tests templates compile bench launch startup diagnose; empty: set-up only

main() {
echo "=== setup ($(date -u '+%Y-%m-%d %H:%M:%S UTC'))"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv || true
rm -rf "$VENV"
"$BASE" -m venv --system-site-packages "$VENV" 2>/dev/null || "$BASE" -m venv --without-pip --system-site-packages "$VENV" || return 1
PY="$VENV/bin/python"
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_path('purelib'))")
if ! "$PY" -c "import torch" 2>/dev/null; then
  # The interpreter is itself a venv: --system-site-packages shows its base, not its packages.
  IMAGE_SITE=$("$BASE" -c "import sysconfig; print(sysconfig.get_path('purelib'))")
  echo "import site; site.addsitedir('$IMAGE_SITE')" > "$SITE/zz_image_site.pth"
  echo "venv sees $IMAGE_SITE through zz_image_site.pth"
fi
"$BASE" -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl || return 1
(cd / && "$PY" - <<'PYEOF') || return 1
import importlib, os, subprocess, sys
for name in ("torch", "triton", "wrapt", "dotenv", "autotune_guard"):
    module = importlib.import_module(name)
    print(f"{name:15} {getattr(module, '__version__', '?'):12} {os.path.dirname(module.__file__)}")
probe = "import sys; print('autotune_guard._boot' in sys.modules)"
env = dict(os.environ, AUTOTUNE_MODE="pinned")
armed = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stdout.strip()
assert armed == "True", f"the .pth did not run: {armed!r}"
print("the .pth runs in", sys.executable)
PYEOF

if [[ " $STEPS " == *" tests "* ]]; then
  echo; echo "=== GPU test tier"
  (cd tests && timeout 540 "$PY" -m pytest -p no:cacheprovider -q -rs test_gpu.py test_gpu_compile.py test_gpu_helion.py) 2>&1 \
    | tee "$OUT/pytest.txt"
fi
if [[ " $STEPS " == *" templates "* ]]; then
  echo; echo "=== max-autotune template selection: tests, then the proof (plain vs pinned, cold processes)"
  (cd tests && timeout 540 "$PY" -m pytest -p no:cacheprovider -q -rs test_gpu_templates.py) 2>&1 \
    | tee "$OUT/pytest-templates.txt"
  timeout 540 "$PY" scripts/gpu/templates_proof.py --out "$OUT/templates" 2>&1 | tee "$OUT/templates.txt"
fi
if [[ " $STEPS " == *" compile "* ]]; then
  echo; echo "=== torch.compile benchmark"
  timeout 540 "$PY" scripts/gpu/bench_compile.py --out "$OUT" 2>&1 | tee "$OUT/compile.txt"
fi
if [[ " $STEPS " == *" bench "* ]]; then
  echo; echo "=== GPU benchmarks"
  timeout 330 "$PY" scripts/gpu/bench_gpu.py all --out "$OUT" "$@"
fi
if [[ " $STEPS " == *" launch "* ]]; then
  echo; echo "=== launch path, stubbed launch (Triton's JITFunction, no interpreter)"
  timeout 60 "$PY" scripts/bench_launch.py --no-interpret 2>&1 | tee -a "$OUT/launch.txt"
fi
if [[ " $STEPS " == *" startup "* ]]; then
  echo; echo "=== interpreter start-up"
  timeout 100 "$PY" scripts/bench_startup.py --rounds 200 --site-rounds 100 --wheel .whl/autotune_guard-*.whl 2>&1 \
    | tee "$OUT/startup.txt"
fi
if [[ " $STEPS " == *" diagnose "* ]]; then
  # Where the steady-state launch time goes: Triton's single-config branch alone, the pinned
  # path without its lock, garbage collector on and off.
  echo; echo "=== steady state, diagnosis"
  for gc in "" --no-gc; do
    (cd "$OUT" && AUTOTUNE_MODE=pinned timeout 90 "$PY" "$REPO/scripts/gpu/bench_gpu.py" steady --diagnose $gc --reps 40) \
      2>&1 | tee -a "$OUT/diagnose.txt"
  done
fi

echo; echo "=== summary ($OUT)"; cat "$OUT/table.md" 2>/dev/null; tail -3 "$OUT/pytest.txt" 2>/dev/null
}

main "$@" 2>&1 | tee "$OUT/run.log"
