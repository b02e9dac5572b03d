#!/usr/bin/env bash
# Set up and run the test suite on a fresh machine: one virtual environment per (Python, Triton),
# outside the checkout (scripts/venv.sh: torch first, then the Triton under test over it), with
# autotune_guard installed as a regular package so that its .pth really runs in every process.
#
#   bash scripts/test.sh                      # Triton 3.9.0 and 3.3.1 (newest, oldest) with python3: CI
#   bash scripts/test.sh --all                # every Triton minor 3.3 ... 3.9 (latest patch of each)
#   PYTHONS="python3.11 python3.12" bash scripts/test.sh
#   TRITONS=3.9.0 bash scripts/test.sh -k pinned   # one release; other arguments go to pytest
#
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

ALL_TRITONS="3.3.1 3.4.0 3.5.1 3.6.0 3.7.1 3.8.0 3.9.0"
TRITONS="${TRITONS:-3.9.0 3.3.1}"
PYTHONS="${PYTHONS:-python3}"
pytest_args=()
for arg in "$@"; do
  case "$arg" in
    --all) TRITONS="$ALL_TRITONS" ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) pytest_args+=("$arg") ;;
  esac
done

echo "scripts/test.sh: installs chromium and redis-server with apt-get when they are missing (root only); makes or reuses one venv per"
echo "  (Python, Triton) for $PYTHONS x Triton $TRITONS in $VENVS (torch $TORCH, Triton, numpy,"
echo "  pytest: a few GB the first time); then runs the tests in each. It asks no question."
ensure_chromium
ensure_redis_server

summary=() failed=0 ran=0
long=1  # the first pair also runs the 10-minute claimer (tests/conftest.py: long_claimer), beside the suite
for python in $PYTHONS; do
  for triton in $TRITONS; do
    echo "=== $python, Triton $triton"
    start=$SECONDS
    guard_venv "$python" "$triton"
    case $? in
      0) ;;
      "$SKIPPED") summary+=("skipped  $python, Triton $triton: $SKIP_WHY"); continue ;;
      *) summary+=("FAILED   $python, Triton $triton: set-up failed"); failed=1; continue ;;
    esac
    # The redis client (the extra redis: pip install .[redis]) for the table-store tests: added to a venv
    # that lacks it, without rebuilding the venv (a few hundred KB).
    if ! AUTOTUNE_DISABLE=1 "$VENV_PY" -c 'import redis' 2>/dev/null; then
      echo "  installing the redis client (pip install redis) for the table-store tests"
      "$VENV_PY" -m pip install -q --no-input --disable-pip-version-check redis \
        || echo "  pip install redis failed: the table-store tests cannot run"
    fi
    # From tests/, so that the installed package (not the source tree) is what gets imported. The
    # tests' directories lie in a folder of this run's own: every pytest session that starts sets
    # /tmp/pytest-of-<user> back to 0700, which a test acting as a second user must reach.
    basetemp=$(mktemp -d "${TMPDIR:-/tmp}/autotune-guard-tests.XXXXXX")
    (cd tests && GUARD_LONG="${GUARD_LONG:-$long}" TRITON_INTERPRET=1 "$VENV_PY" -m pytest -p no:cacheprovider -q \
      --basetemp "$basetemp/t" "${pytest_args[@]}" .)
    rc=$? long=0
    rm -rf "$basetemp"
    took="$(( (SECONDS - start) / 60 ))m$(( (SECONDS - start) % 60 ))s"
    case $rc in
      0) summary+=("passed   $python, Triton $triton ($took)"); ran=1 ;;
      5) summary+=("FAILED   $python, Triton $triton: pytest collected no test"); failed=1 ;;
      *) summary+=("FAILED   $python, Triton $triton: pytest exit $rc ($took)"); failed=1 ;;
    esac
  done
done

echo "=== summary (venvs in $VENVS)"
printf '  %s\n' "${summary[@]}"
if [ $failed = 0 ] && [ $ran = 0 ]; then
  echo "no (Python, Triton) pair could run: nothing was tested" >&2
  exit 1
fi
exit $failed
