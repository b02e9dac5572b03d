#!/usr/bin/env bash
# Set up and run the test suite on a fresh machine: one virtual environment per (Python, Triton),
# outside the checkout (scripts/venv.sh: torch first, then the Triton under test over it), with
# autotune_guard installed as a regular package so that its .pth really runs in every process.
#
#   bash scripts/test.sh                      # Triton 3.9.0 (the newest supported) with python3
#   TRITONS="3.9.0 3.3.1" bash scripts/test.sh   # newest and oldest, both at once: CI (.ci/run)
#   bash scripts/test.sh --all                # every Triton minor the index holds from 3.3 on (latest patch of each)
#   PYTHONS="python3.11 python3.12" bash scripts/test.sh
#   TRITONS=3.3.1 bash scripts/test.sh -k pinned   # one release; other arguments go to pytest
#   GUARD_WORKERS=0 bash scripts/test.sh      # each pair's tests in one process (default: 2 pytest-xdist workers)
#
# The venvs are set up one after another, then every pair's tests run at once (they mostly wait on
# torchrun jobs), with the 10-minute claimer of tests/conftest.py in a session of its own beside them.
# A (Python, Triton) pair the package index has no wheel for is skipped with one line; any other
# failure, and a pytest run that collected no test (exit 5), fails the script. At the end: one
# line per pair. Venvs live in $GUARD_VENVS (default ~/.cache/autotune_guard/venvs) and
# are reused while their torch and Triton stay the same.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh

# apt_install NAME COMMAND "PACKAGES" "FOR WHAT" "HOW MUCH": Debian's PACKAGES when COMMAND is
# missing and this is root with apt-get; otherwise, or when apt-get fails, one line says what cannot
# run (those tests then skip, and fail where CI is set). Returns 0 when it installed them now.
apt_install() {
  local name=$1 command=$2 packages=$3 purpose=$4 size=$5 log
  command -v "$command" >/dev/null 2>&1 && return 1
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "$name: missing, and installing it needs root with apt-get: the $purpose cannot run"
    return 1
  fi
  log=$(mktemp "/tmp/autotune-guard-$name.XXXXXX")
  echo "$name: missing; installing Debian's ${packages// / and } with apt-get, for the $purpose"
  echo "  ($size; apt-get's output: $log)"
  if with_progress "$log" env DEBIAN_FRONTEND=noninteractive bash -c \
      "apt-get update && apt-get install -y -o Dpkg::Use-Pty=0 $packages"; then
    return 0
  fi
  echo "$name: apt-get install $name failed (its output: $log): the $purpose cannot run"
  return 1
}

# The browser test (tests/test_report_html.py) opens a page in Debian's headless Chromium: installed
# by apt_install when missing.
# GUARD_CHROMIUM names the browser command (default chromium).
CHROMIUM="${GUARD_CHROMIUM:-chromium}"
ensure_chromium() {
  apt_install chromium "$CHROMIUM" "chromium chromium-driver" "browser test" "about 1 minute, about 100 MB downloaded" \
    && echo "chromium: installed $("$CHROMIUM" --version 2>/dev/null) with apt-get"
  return 0
}

# The table-store tests (tests/test_redis_store.py, test_redis_tls.py, test_store_snapshot.py) start
# Debian's redis-server on a loopback port. The redis client goes into each venv (scripts/venv.sh).
ensure_redis_server() {
  apt_install redis-server redis-server redis-server "table-store tests" \
      "under a minute, a few MB downloaded; it is started only by the tests, on 127.0.0.1" || return 0
  echo "redis-server: installed $(redis-server --version 2>/dev/null | cut -d' ' -f3) with apt-get"
  # Debian's package starts a system service on port 6379; the tests start their own and need none.
  command -v systemctl >/dev/null 2>&1 && systemctl stop redis-server >/dev/null 2>&1
  return 0
}

# --all: the latest release of every minor the package index holds from 3.3 on (scripts/triton_minors.py),
# so a new minor is tested the day it is there; this list where the index cannot be read.
ALL_TRITONS="3.3.1 3.4.0 3.5.1 3.6.0 3.7.1 3.8.0 3.9.0"
TRITONS="${TRITONS:-3.9.0}"  # a user has the newest; .ci/run adds the oldest
PYTHONS="${PYTHONS:-python3}"
pytest_args=()
for arg in "$@"; do
  case "$arg" in
    --all) TRITONS="$(python3 scripts/triton_minors.py 2>/dev/null || echo "$ALL_TRITONS")" ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) pytest_args+=("$arg") ;;
  esac
done

WORKERS="${GUARD_WORKERS:-2}"  # pytest-xdist workers per pytest session (0: none, one process)
echo "scripts/test.sh: installs chromium and redis-server with apt-get when they are missing (root only); makes or reuses"
echo "  one venv per (Python, Triton) for $PYTHONS x Triton $TRITONS in $VENVS: torch $TORCH, Triton, numpy,"
echo "  pytest, pytest-xdist, the redis client and this checkout ($PWD) as a package (a few GB the first time);"
echo "  nothing else is installed. Then the pairs' test sessions run at once, each over $WORKERS pytest-xdist workers"
echo "  (GUARD_WORKERS), their output in a folder under ${TMPDIR:-/tmp}. It asks no question."
[ "$TRITONS" = 3.9.0 ] && echo "  Triton 3.9.0 is the newest supported; CI also tests the oldest: TRITONS=\"3.9.0 3.3.1\" bash scripts/test.sh"
ensure_chromium
ensure_redis_server

# session_args: the pytest arguments of every session; a session of its own runs the 10-minute
# claimer (tests/conftest.py: long_claimer) beside the first pair's, unless the arguments name test
# files without it (a selection that does not want it).
long="${GUARD_LONG:-1}"
for arg in "${pytest_args[@]}"; do
  case "$arg" in
    -*) ;;
    *) if [ -e "tests/${arg%%::*}" ]; then case "$arg" in *test_zz_long_claimer*) ;; *) long=0 ;; esac; fi ;;
  esac
done

# Phase 1, one pair after another (pip, the index and the disk are shared): every venv.
summary=() failed=0 ran=0 ready=() held=()
for python in $PYTHONS; do
  for triton in $TRITONS; do
    echo "=== set-up: $python, Triton $triton"
    guard_venv "$python" "$triton"
    case $? in
      0) ;;
      "$SKIPPED") summary+=("skipped  $python, Triton $triton: $SKIP_WHY"); continue ;;
      *) summary+=("FAILED   $python, Triton $triton: set-up failed"); failed=1; continue ;;
    esac
    # guard_venv holds the venv's lock shared while this script uses it, and lets it go at the next
    # set-up: every pair's sessions run after all set-ups, so each lock is kept to the end.
    held+=("$VENV_LOCK_FD") VENV_LOCK_FD=
    # The redis client (the extra redis: pip install .[redis]) for the table-store tests, and
    # pytest-xdist for the workers: added to a venv that lacks them, without rebuilding it (a few hundred KB).
    for module in redis xdist; do
      if ! AUTOTUNE_DISABLE=1 "$VENV_PY" -c "import $module" 2>/dev/null; then
        package=$([ $module = xdist ] && echo pytest-xdist || echo redis)
        echo "  installing $package into $VENV_PY's venv (pip install $package)"
        "$VENV_PY" -m pip install -q --no-input --disable-pip-version-check "$package" \
          || echo "  pip install $package failed: $([ $module = xdist ] && echo 'the tests run in one process' || echo 'the table-store tests cannot run')"
      fi
    done
    ready+=("$python|$triton|$VENV_PY")
  done
done

# Phase 2, all at once: the sessions mostly wait on torchrun jobs, so the pairs, and within a pair
# its workers (--dist loadfile: a module's tests stay together), share the cores. From tests/, so
# that the installed package (not the source tree) is what gets imported. Each session's temporary
# directories lie in a folder of its own: every pytest session that starts sets
# /tmp/pytest-of-<user> back to 0700, which a test acting as a second user must reach.
# Short names: a test binds a unix socket in its directory, and a socket's path holds 107 bytes at most.
runs=$(mktemp -d "${TMPDIR:-/tmp}/ag-tests.XXXXXX")
pids=() names=() starts=()
session() {  # session NAME LONG PYTHON ARGS...: one pytest session in the background, its output in $runs/NAME.log
  local name=$1 long_claimer=$2 py=$3
  shift 3
  (cd tests && GUARD_LONG=$long_claimer TRITON_INTERPRET=1 "$py" -m pytest -p no:cacheprovider -q \
    --basetemp "$runs/${#pids[@]}" "$@") >"$runs/$name.log" 2>&1 &
  pids+=($!) names+=("$name") starts+=($SECONDS)
}
# poll: note the sessions that ended; RUNNING: how many still run (the long claimer's not counted,
# it only waits). About once a minute, a line with each session's progress.
codes=() took=() RUNNING=0
poll() {
  local i line
  RUNNING=0
  for i in "${!pids[@]}"; do
    [ -n "${codes[$i]:-}" ] && continue
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      [[ ${names[$i]} == long-claimer-* ]] || RUNNING=$((RUNNING + 1))
      continue
    fi
    wait "${pids[$i]}"; codes[$i]=$?
    took[$i]="$(( (SECONDS - starts[i]) / 60 ))m$(( (SECONDS - starts[i]) % 60 ))s"
  done
  if [ $((SECONDS - ${said_at:-0})) -ge 60 ]; then
    said_at=$SECONDS line="    ... $SECONDS s:"
    for i in "${!pids[@]}"; do
      line+=" ${names[$i]} $([ -n "${codes[$i]:-}" ] && echo done || grep -o '\[ *[0-9]*%\]' "$runs/${names[$i]}.log" | tail -n 1);"
    done
    echo "$line"
  fi
}
SESSIONS="${GUARD_SESSIONS:-2}"  # pairs whose tests run at once (--all has 7)
said_at=$SECONDS
workers=()
if [ "$WORKERS" != 0 ]; then workers=(-n "$WORKERS" --dist loadfile); fi
for i in "${!ready[@]}"; do
  IFS='|' read -r python triton py <<<"${ready[$i]}"
  while poll; [ "$RUNNING" -ge "$SESSIONS" ]; do sleep 5; done
  name="py$($py -c 'import sys; print("%d.%d" % sys.version_info[:2])')-triton$triton"
  if [ "$i" = 0 ] && [ "$long" = 1 ]; then
    session "long-claimer-$name" 1 "$py" "${pytest_args[@]}" test_zz_long_claimer.py
    session "$name" 0 "$py" "${workers[@]}" --ignore=test_zz_long_claimer.py "${pytest_args[@]}" .
  else
    session "$name" 0 "$py" "${workers[@]}" "${pytest_args[@]}" .
  fi
  echo "=== $python, Triton $triton: pytest started (its output: $runs/$name.log)"
done
while poll; [ "$RUNNING" -gt 0 ] || [ "${#codes[@]}" -lt "${#pids[@]}" ]; do sleep 5; done
for i in "${!pids[@]}"; do
  echo "=== ${names[$i]} (${took[$i]}; $runs/${names[$i]}.log)"
  cat "$runs/${names[$i]}.log"
  case "${codes[$i]}" in
    0) summary+=("passed   ${names[$i]} (${took[$i]})"); ran=1 ;;
    5) if [[ ${names[$i]} == long-claimer-* ]]; then summary+=("selected none ${names[$i]}")
       else summary+=("FAILED   ${names[$i]}: pytest collected no test"); failed=1; fi ;;
    *) summary+=("FAILED   ${names[$i]}: pytest exit ${codes[$i]} (${took[$i]})"); failed=1 ;;
  esac
done
[ $failed = 0 ] && rm -rf "$runs"

echo "=== summary (venvs in $VENVS; $SECONDS s in all)"
printf '  %s\n' "${summary[@]}"
if [ $failed = 0 ] && [ $ran = 0 ]; then
  echo "no (Python, Triton) pair could run: nothing was tested" >&2
  exit 1
fi
exit $failed
