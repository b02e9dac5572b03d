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
# line per pair.
# What it installs, and where: nothing outside $GUARD_VENVS (default ~/.cache/autotune_guard/venvs)
# but pip's download cache. There: one venv per pair (torch, the Triton, numpy, pytest, the redis
# client, ..., this checkout), reused while its torch and Triton stay the same; and, where no
# redis-server is on PATH (nor GUARD_REDIS_SERVER), Debian's redis-server unpacked into debian/
# (apt-get download and dpkg -x: no root, not installed). Chromium is found on PATH (or
# GUARD_CHROMIUM), else its 2 browser tests are skipped and named. No apt-get install, no root.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh

# The real programs some tests start are never installed: each is found (GUARD_REDIS_SERVER /
# GUARD_CHROMIUM, else PATH), or Debian's redis-server is unpacked without root into $DEBIAN (not
# installed: dpkg never hears of it); what is still missing has its tests skipped, and named here
# (under CI=true they fail). The test sessions find what was found first on PATH, through links in
# a folder of this run's own.
DEBIAN="$VENVS/debian"

# unpack_debian NAME PACKAGES...: PACKAGES, and those of their dependencies this machine lacks (an
# apt-get simulation lists them, no root needed), downloaded with apt-get download and unpacked with
# dpkg -x into $DEBIAN/NAME/root, once; later runs reuse it. Under a lock: scripts started at once.
unpack_debian() {
  local name=$1 dir="$DEBIAN/$1" tmp lacking deb lock rc=0
  shift
  command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 || { UNPACK_WHY="no apt-get and dpkg here"; return 1; }
  mkdir -p "$DEBIAN" && exec {lock}>>"$dir.lock" && flock -x "$lock" || { UNPACK_WHY="cannot write $DEBIAN"; return 1; }
  if [ ! -f "$dir/.unpacked" ]; then
    tmp=$(mktemp -d "$dir.unpacking.XXXXXX") || rc=1
    lacking=$(apt-get install -s --no-install-recommends "$@" 2>/dev/null | awk '/^Inst / {print $2}')
    # shellcheck disable=SC2046  # one package name a word
    if [ $rc = 0 ] && (cd "$tmp" && apt-get download $(printf '%s\n' "$@" $lacking | sort -u)) >"$tmp/download.log" 2>&1; then
      for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/root" || { rc=1; UNPACK_WHY="dpkg -x $deb failed"; }; done
      for deb in "$tmp"/*.deb; do dpkg-deb --showformat='${Package}=${Version}\n' -W "$deb"; done >"$tmp/.unpacked"
      rm -f "$tmp"/*.deb
    else
      UNPACK_WHY="apt-get download $* failed: $(grep -E '^(E|W):' "$tmp/download.log" | head -n 1)"; rc=1
    fi
    if [ $rc = 0 ]; then rm -rf "$dir" && mv "$tmp" "$dir" || rc=1; else rm -rf "$tmp"; fi
  fi
  exec {lock}>&-
  return $rc
}

# unpacked_command NAME PROGRAM: a script in $DEBIAN/NAME/bin that runs the unpacked PROGRAM with the
# unpacked libraries first (LD_LIBRARY_PATH); prints its path once it has run PROGRAM --version.
unpacked_command() {
  local dir="$DEBIAN/$1" command="$DEBIAN/$1/bin/${2##*/}" libs
  libs=$(find "$dir/root" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)
  mkdir -p "$dir/bin" || return 1
  {
    echo '#!/bin/sh'
    echo "# $2, unpacked by scripts/test.sh (not installed): its own libraries first"
    [ -n "$libs" ] && echo "export LD_LIBRARY_PATH=\"$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
    echo "exec \"$dir/root$2\" \"\$@\""
  } >"$command.$$" && chmod 755 "$command.$$" && mv -f "$command.$$" "$command" \
    && "$command" --version >/dev/null 2>&1 && echo "$command"  # mv: a script another run may be starting
}

# find_programs LINKS: links in LINKS to the redis-server and browser the tests are to use, one line
# each saying which, or which tests are skipped.
find_programs() {
  local links=$1 found
  mkdir -p "$links"
  found=${GUARD_REDIS_SERVER:-$(command -v redis-server)}
  if [ -n "${GUARD_REDIS_SERVER:-}" ] && ! found=$(command -v "$GUARD_REDIS_SERVER"); then
    echo "redis-server: GUARD_REDIS_SERVER=$GUARD_REDIS_SERVER is not a command here: the table-store tests are skipped"
  elif [ -n "$found" ]; then
    echo "redis-server: $found$([ -n "${GUARD_REDIS_SERVER:-}" ] && echo ' (GUARD_REDIS_SERVER)')"
  elif unpack_debian redis-server redis-server redis-tools && found=$(unpacked_command redis-server /usr/bin/redis-server); then
    echo "redis-server: not on PATH; Debian's redis-server unpacked (dpkg -x, not installed) in $DEBIAN/redis-server:"
    echo "  $(paste -sd' ' "$DEBIAN/redis-server/.unpacked")"
  else
    echo "redis-server: not on PATH (nor GUARD_REDIS_SERVER), and not unpacked (${UNPACK_WHY:-it does not run here}):"
    echo "  the table-store tests (tests/test_redis_*.py, test_store_*.py, ...) are skipped$([ -n "${CI:-}" ] && echo '; under CI they fail')"
  fi
  [ -n "$found" ] && ln -sf "$(realpath -s "$found")" "$links/redis-server"
  found=${GUARD_CHROMIUM:-$(command -v chromium || command -v chromium-browser)}
  if [ -n "$found" ] && found=$(command -v "$found"); then
    echo "chromium: $found$([ -n "${GUARD_CHROMIUM:-}" ] && echo ' (GUARD_CHROMIUM)')"
    ln -sf "$(realpath -s "$found")" "$links/chromium"
  else
    echo "chromium: not on PATH (nor GUARD_CHROMIUM): the 2 browser tests of tests/test_report_html.py are skipped$([ -n "${CI:-}" ] && echo '; under CI they fail')"
    echo "  (Debian's chromium brings about 120 packages; this script installs none: .ci/run does, as root)"
  fi
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
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) pytest_args+=("$arg") ;;
  esac
done

WORKERS="${GUARD_WORKERS:-2}"  # pytest-xdist workers per pytest session (0: none, one process)
echo "scripts/test.sh: makes or reuses one venv per (Python, Triton) for $PYTHONS x Triton $TRITONS in $VENVS:"
echo "  torch $TORCH, Triton, ${VENV_DEPS[*]} and this checkout ($PWD) as a package (a few GB the"
echo "  first time). The redis-server and chromium the tests start are found on PATH; a redis-server that is"
echo "  not is unpacked (apt-get download, dpkg -x; no root) into $DEBIAN, not installed."
echo "  nothing else is installed, and nothing outside $VENVS (pip's download cache aside). Then the pairs'"
echo "  test sessions run at once, each over $WORKERS pytest-xdist workers (GUARD_WORKERS), their output in a"
echo "  folder under ${TMPDIR:-/tmp}. It asks no question."
[ "$TRITONS" = 3.9.0 ] && echo "  Triton 3.9.0 is the newest supported; CI also tests the oldest: TRITONS=\"3.9.0 3.3.1\" bash scripts/test.sh"

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
[ "${#ready[@]}" -gt 0 ] && find_programs "$runs/bin"
pids=() names=() starts=()
session() {  # session NAME LONG PYTHON ARGS...: one pytest session in the background, its output in $runs/NAME.log
  local name=$1 long_claimer=$2 py=$3
  shift 3
  (cd tests && PATH="$runs/bin:$PATH" GUARD_LONG=$long_claimer TRITON_INTERPRET=1 "$py" -m pytest -p no:cacheprovider -q \
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
