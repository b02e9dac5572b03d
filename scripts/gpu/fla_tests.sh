#!/usr/bin/env bash
# fla's own tests under the guard (issue 46's puzzle): where the README's second run spends its time.
#
#   FLA_TESTS=DIR bash scripts/gpu/fla_tests.sh     # after acceptance.sh's setup (its venv, fla-core installed)
#
# DIR holds fla's tests/conftest.py and tests/ops/test_gla.py and an empty pytest.ini (so that this repo's
# pytest settings stay out); from a clone of fla-org/flash-linear-attention (bc3b101d was used), kept in
# .whl/ so that it travels to the device:
#   mkdir -p .whl/flatests/tests/ops && printf '[pytest]\n' > .whl/flatests/pytest.ini
#   git -C FLA show bc3b101d:tests/conftest.py > .whl/flatests/tests/conftest.py
#   git -C FLA show bc3b101d:tests/ops/test_gla.py > .whl/flatests/tests/ops/test_gla.py
# Each run has a cold Triton cache:
#   run1    the README's command (consensus, a table directory) on test_fused_recurrent's 8 cases
#   run2    the README's command again from run 1's table, on the whole file, for WINDOW seconds
#   pinned  pinned without a table (every key the fallback config, nothing timed), the same window
# Each run's log and per-test durations (junit XML) go into $OUT/fla-tests.tgz, with run 1's table; the
# durations side by side into $OUT/fla-tests.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
FINAL="${OUT:-$(mktemp -d)}"; mkdir -p "$FINAL"
PY=${PY:-/tmp/ag-gpu-venv/bin/python}
TESTS=$(cd "${FLA_TESTS:?FLA_TESTS: the folder of the fla tests}" && pwd)
WINDOW=${WINDOW:-60}
W=/tmp/fla-tests; rm -rf "$W"; mkdir -p "$W/table"
OUT="$W/results"; mkdir -p "$OUT"  # packed into $FINAL/fla-tests.tgz

one() {  # one NAME LIMIT SELECT SETTINGS...: pytest on fla's test file, stopped (SIGINT: its report stays) at LIMIT s
  local name=$1 limit=$2 select=$3; shift 3
  local start=$SECONDS
  mkdir -p "$W/calls-$name"
  (cd "$TESTS" && env TRITON_CACHE_DIR="$W/cache-$name" ACCEPT_CALLS="$W/calls-$name" \
    PYTHONPATH="$REPO/scripts/gpu/acceptance/counting" "$@" timeout -s INT "$limit" "$PY" -m pytest -p no:cacheprovider -q \
    tests/ops/test_gla.py ${select:+-k "$select"} --junitxml="$OUT/fla-$name.xml" > "$OUT/fla-$name.log" 2>&1)
  local rc=$? calls
  calls=$("$PY" -c "import glob, json, sys; print(sum(json.load(open(f)).get('do_bench', 0) for f in glob.glob(sys.argv[1] + '/calls.*.json')))" "$W/calls-$name")
  echo "$name: exit $rc in $((SECONDS - start)) s; $(grep -Eo '[0-9]+ passed' "$OUT/fla-$name.log" | tail -1); do_bench calls: $calls"
}

one run1 150 "test_fused_recurrent and not varlen and not state" AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/table"
one run2 "$WINDOW" "" AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/table"
one pinned "$WINDOW" "" AUTOTUNE_MODE=pinned
cp "$W/table"/*.json "$OUT/" 2>/dev/null
"$PY" - "$OUT" <<'PYEOF' | tee "$FINAL/fla-tests.txt"
import sys, xml.etree.ElementTree as ET
runs = ("run1", "run2", "pinned")
times = {}
for run in runs:
    try:
        cases = ET.parse(f"{sys.argv[1]}/fla-{run}.xml").getroot().iter("testcase")
    except (OSError, ET.ParseError):
        continue
    for case in cases:
        failed = case.find("failure") is not None or case.find("error") is not None
        times.setdefault(case.get("name"), {})[run] = float(case.get("time")) if not failed else None
print("| test (in order) | " + " | ".join(f"{r} s" for r in runs) + " |")
print("|---|" + "---|" * len(runs))
for name, by in times.items():
    print(f"| {name} | " + " | ".join("-" if r not in by else ("failed" if by[r] is None else f"{by[r]:.2f}") for r in runs) + " |")
PYEOF
tar czf "$FINAL/fla-tests.tgz" -C "$OUT" .
