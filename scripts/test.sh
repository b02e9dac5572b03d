#!/usr/bin/env bash
# Set up and run the test suite on a fresh machine: one virtual environment per Triton release
# (the oldest and the newest supported), torch pinned to the CPU build, autotune_guard installed
# as a regular package so that its .pth really runs at every interpreter start.
#   bash scripts/test.sh                  # Triton 3.9.0 and 3.3.1
#   TRITONS=3.9.0 bash scripts/test.sh -k pinned   # one release, pytest arguments passed on
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TRITONS="${TRITONS:-3.9.0 3.3.1}"
status=0
for triton in $TRITONS; do
  venv=".venv-test-$triton"
  echo "=== Triton $triton ($venv)"
  [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    torch==2.13.0 "triton==$triton" numpy pytest hatchling wrapt python-dotenv
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall .
  # Run from outside the checkout so the installed package, not the source tree, is imported.
  (cd tests && TRITON_INTERPRET=1 "../$venv/bin/python" -m pytest -p no:cacheprovider -q "$@" .) || status=1
done
exit $status
