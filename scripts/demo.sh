#!/usr/bin/env bash
# Set up and run the demonstration on a fresh CPU-only machine: an unmodified 3-rank torchrun
# program (examples/train.py) with autotuned Triton kernels under Triton's interpreter, in each
# mode, with the evidence read back by `python -m autotune_guard.report`.
#   bash scripts/demo.sh          (about 2 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
venv=.venv-demo
[ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check torch==2.13.0 triton==3.9.0 numpy hatchling wrapt python-dotenv
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall .

export TRITON_INTERPRET=1 OMP_NUM_THREADS=1
runs=$(mktemp -d /tmp/autotune-guard-demo.XXXXXX)
py="$PWD/$venv/bin/python"
job() { (cd "$runs" && "$py" -m torch.distributed.run --standalone --nproc-per-node 3 "$OLDPWD/examples/train.py" 2>&1 \
          | grep -v -e '^W[0-9]' -e '^\*\*\*' -e 'OMP_NUM_THREADS') }
report() { (cd "$runs" && "$py" -m autotune_guard.report "$@") }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. auto: Triton times on every rank; the ranks may choose differently"
AUTOTUNE_MODE=auto AUTOTUNE_DIGEST_PATH=auto/choices job
report show auto/choices.rank*.json || true

step "2. record the winners, merge them into a table"
AUTOTUNE_RECORD_PATH=rec/rec job
report merge rec/rec.rank*.json -o tables/interpret.json
report show rec/rec.rank*.json || true

step "3. pinned from that table: no timing, every rank the same, checked at each barrier"
AUTOTUNE_MODE=pinned AUTOTUNE_TABLE_PATH=tables AUTOTUNE_ON_MISS=error AUTOTUNE_VERIFY_EVERY=1 \
  AUTOTUNE_VERIFY_STRICT=1 AUTOTUNE_DIGEST_PATH=pinned/choices job
report show --check pinned/choices.rank*.json

step "4. consensus: rank that meets a kernel first tunes it for the job, the others pin its winner"
AUTOTUNE_MODE=consensus AUTOTUNE_DIGEST_PATH=consensus/choices job
report show --check consensus/choices.rank*.json

step "5. positive control: AUTOTUNE_CHAOS=1 makes ranks differ on purpose; the verifier stops the job"
if AUTOTUNE_MODE=pinned AUTOTUNE_CHAOS=1 AUTOTUNE_VERIFY_EVERY=1 AUTOTUNE_VERIFY_STRICT=1 job > "$runs/chaos.log"; then
  echo "chaos was NOT caught" >&2; exit 1
fi
grep -A3 -m1 'ERROR' "$runs/chaos.log"
echo "ranks that stopped with ChoiceMismatchError: $(grep -c '^\[rank[0-9]*\]: .*ChoiceMismatchError:' "$runs/chaos.log" || true) of 3"
echo "(the job failed on purpose: the verifier caught the divergent choices; full log: $runs/chaos.log)"

step "6. the two runs compared: auto vs pinned"
report diff auto/choices pinned/choices || true
echo; echo "files of this demo: $runs"
