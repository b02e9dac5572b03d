#!/usr/bin/env bash
# FlagGems 5.0.2 under the guard on a GPU: 4 cold pinned processes, record -> merge -> 4 cold
# pinned processes from the table (AUTOTUNE_ON_MISS=error). Wheels in .whl/ (autotune_guard,
# python-dotenv) and .whl/fg/ (flag_gems, sqlalchemy, PyYAML, packaging). Results in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$(mktemp -d)}"; mkdir -p "$OUT"
RES="$OUT"; OUT=/tmp/fg-proof; rm -rf "$OUT"; mkdir -p "$OUT"  # every file here; a summary in $RES
STEPS="" OUT="$OUT/setup" bash scripts/run_gpu_bench.sh > "$OUT/setup.txt" 2>&1  # (its summary step fails without tests)
PY=/tmp/ag-gpu-venv/bin/python
$PY -c "import autotune_guard" || { cat "$OUT/setup.txt"; exit 1; }
SITE=$($PY -c "import sysconfig; print(sysconfig.get_path('purelib'))")
NEED="flag_gems sqlalchemy"
$PY -c "import yaml" 2>/dev/null || NEED="$NEED pyyaml"
$PY -c "import packaging" 2>/dev/null || NEED="$NEED packaging"
python3 -m pip install -q --no-index --no-deps --find-links .whl/fg --target "$SITE" $NEED >> "$OUT/setup.txt" 2>&1 || { cat "$OUT/setup.txt"; exit 1; }
export TRITON_CACHE_DIR=/tmp/fg-triton-cache AUTOTUNE_LOG_LEVEL=INFO
W=scripts/gpu/flaggems_worker.py
cold() {  # name, then settings: a fresh FlagGems database per process
  local name=$1; shift
  rm -rf "/tmp/fgc-$name"
  env FLAGGEMS_CACHE_DIR="/tmp/fgc-$name" "$@" timeout 200 $PY $W "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $(grep -h 'autotune choices' "$OUT/$name.log" | tail -1)"
}
for i in 1 2; do cold "plain$i"; done  # no AUTOTUNE_* setting: unguarded
for i in 1 2 3 4; do cold "pinned$i" AUTOTUNE_MODE=pinned; done
cold record AUTOTUNE_MODE=record AUTOTUNE_RECORD_PATH="$OUT/rec"
mkdir -p "$OUT/table"
$PY -m autotune_guard.report merge "$OUT/rec" -o "$OUT/table/sm90.json" > "$OUT/merge.txt" 2>&1; echo "merge rc=$?"; cat "$OUT/merge.txt"
for i in 1 2 3 4; do cold "table$i" AUTOTUNE_MODE=pinned AUTOTUNE_ON_MISS=error AUTOTUNE_TABLE_PATH="$OUT/table"; done
$PY - "$OUT" "$RES" <<'PYEOF' | tee "$RES/summary.txt"
import json, sys, os, shutil
out, res = sys.argv[1], sys.argv[2]
runs_all = {f[:-5]: json.load(open(os.path.join(out, f))) for f in sorted(os.listdir(out)) if f.endswith(".json")}
json.dump(runs_all, open(os.path.join(res, "runs.json"), "w"), indent=1)
shutil.copy(os.path.join(out, "table", "sm90.json"), os.path.join(res, "table-sm90.json"))
shutil.copy(os.path.join(out, "merge.txt"), os.path.join(res, "merge.txt"))
for group in ("plain", "pinned", "record", "table"):
    runs = [json.load(open(os.path.join(out, f))) for f in sorted(os.listdir(out)) if f.startswith(group) and f.endswith(".json")]
    for op in ("mm", "softmax", "layer_norm"):
        calls = [r["ops"][op]["bench_calls"] for r in runs]
        hashes = {r["ops"][op]["hash"] for r in runs}
        print(f"{group:7} {op:11} processes={len(runs)} bench_calls={calls} hashes={len(hashes)} {sorted(hashes)}")
    print(f"{group:7} choices={[len(r['choices']) for r in runs]} ungoverned={[len(r['ungoverned']) for r in runs]}")
PYEOF
