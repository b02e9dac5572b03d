#!/usr/bin/env bash
# The problem and the fix, on a CPU-only machine: an unmodified 3-rank torchrun program
# (examples/train.py: a float32 row sum whose candidates add in different orders) under Triton's
# interpreter, in each mode, with the evidence read back by `python -m autotune_guard.report`.
#   bash scripts/demo.sh   (2026-12-07, 2 cores at load 7-8: 96 s once the venv exists, 182 s the first time;
#                           about half that on an idle machine; downloads add to the first time)
# The venv is the tests' one for (python3, Triton 3.9.0) (scripts/venv.sh), made on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
PYTHON="${PYTHON:-python3}"
# Where and what, before anything is built: the venv is the only thing installed, and only there.
echo "scripts/demo.sh: uses the venv for $PYTHON and Triton 3.9.0 in $VENVS, made there the first time (torch $TORCH,"
echo "  Triton 3.9.0, numpy, pytest: about 2 GB), with this checkout ($PWD) installed into it; nothing is"
echo "  installed outside $VENVS. The demo's runs go to a new folder under /tmp."
guard_venv "$PYTHON" 3.9.0 || { echo "demo: could not set up a venv for $PYTHON with Triton 3.9.0 in $VENVS" >&2; exit 1; }

export TRITON_INTERPRET=1 OMP_NUM_THREADS=1
runs=$(mktemp -d /tmp/autotune-guard-demo.XXXXXX)
train="$PWD/examples/train.py"
# A step's title in bold on a terminal; plain text into a file or a pipe (no escape codes there).
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold="" plain=""; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
report() { (cd "$runs" && "$VENV_PY" -m autotune_guard.report "$@"); }

# job NAME: the program under torchrun with 3 ranks; its output (less torchrun's own warnings) is
# kept in $runs/NAME.log. Returns torchrun's exit status.
job() {
  local status=0
  (cd "$runs" && "$VENV_PY" -m torch.distributed.run --standalone --nproc-per-node 3 "$train") >"$runs/$1.raw" 2>&1 \
    || status=$?
  grep -v -e '^W[0-9]' -e '^\*\*\*' -e 'OMP_NUM_THREADS' "$runs/$1.raw" >"$runs/$1.log" || true
  return $status
}
hashes() { grep -o 'result hash [0-9a-f]*' "$runs/$1.log" | sort -u | wc -l; }

step "1. auto: Triton times the candidates on every rank; same data, yet the ranks compute different numbers"
AUTOTUNE_MODE=auto AUTOTUNE_VERIFY_EVERY=1 AUTOTUNE_DIGEST_PATH=auto/choices job auto
cat "$runs/auto.log"
n=$(hashes auto)
echo "-> 3 ranks, $n different result hash(es)$([ "$n" = 1 ] && echo ' (this time the noise happened to agree; run again)')"
report show auto/choices || true

step "2. record the winners, merge them into a table"
AUTOTUNE_RECORD_PATH=rec/rec job record
report merge rec/rec -o tables/interpret.json
report show tables/interpret.json

step "3. pinned from that table: no timing, every rank the same config, checked at every barrier"
AUTOTUNE_MODE=pinned AUTOTUNE_TABLE_PATH=tables AUTOTUNE_ON_MISS=error AUTOTUNE_VERIFY_EVERY=1 \
  AUTOTUNE_VERIFY_STRICT=1 AUTOTUNE_DIGEST_PATH=pinned/choices job pinned
cat "$runs/pinned.log"
n=$(hashes pinned)
echo "-> 3 ranks, $n result hash"
[ "$n" = 1 ] || { echo "pinned ranks computed different numbers" >&2; exit 1; }
report show --check pinned/choices

step "4. consensus: the rank that meets a kernel first tunes it for the job, the others pin its winner"
AUTOTUNE_MODE=consensus AUTOTUNE_DIGEST_PATH=consensus/choices job consensus
cat "$runs/consensus.log"
echo "-> 3 ranks, $(hashes consensus) result hash"
report show --check consensus/choices

step "5. positive control: AUTOTUNE_CHAOS=1 makes the ranks differ on purpose; the verifier stops the job"
if AUTOTUNE_MODE=pinned AUTOTUNE_CHAOS=1 AUTOTUNE_VERIFY_EVERY=1 AUTOTUNE_VERIFY_STRICT=1 job chaos; then
  echo "chaos was NOT caught" >&2; exit 1
fi
# The verifier's report (the ERROR record and its lines), not the ranks' tracebacks.
awk '/autotune_guard\[rank [0-9]+\] ERROR/ {shown = 1; print; next} shown && /^  / {print; next} {shown = 0}' \
  "$runs/chaos.log"
stopped=$(grep -c '^\[rank[0-9]*\]: .*ChoiceMismatchError:' "$runs/chaos.log" || true)
echo "-> the job stopped at its first barrier: $stopped of 3 ranks raised ChoiceMismatchError, no result hash"
echo "   (ranks' tracebacks in $runs/chaos.log)"

step "6. the two runs compared: auto vs pinned (add --format markdown for a CI job summary)"
report diff auto/choices pinned/choices || true
echo; echo "files of this demo: $runs"
