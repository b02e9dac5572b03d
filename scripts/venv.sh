# Sourced by scripts/test.sh and scripts/demo.sh: one virtual environment per (Python, Triton),
# kept outside the checkout, with torch installed first and the Triton under test over it.
#
# Why torch first and Triton with --no-deps: the torch a plain package index serves for Linux is a
# CUDA build that pins its own Triton (torch 2.13.0 -> triton==3.7.1), so asking pip for both at
# once is unsatisfiable for any other Triton. torch is installed as the index serves it (the CPU
# build where the index or a wheel directory offers one, else the CUDA build and its nvidia-*
# libraries, several GB), then the Triton under test replaces the one torch brought.

# Not an AUTOTUNE_* name: the guard refuses AUTOTUNE_* names it does not know.
VENVS="${GUARD_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/autotune_guard/venvs}"
TORCH="${TORCH:-2.13.0}"
VENV_DEPS=(numpy pytest pytest-xdist hatchling wrapt python-dotenv redis helion==1.5.1)  # helion: its family's tests
SKIPPED=3  # guard_venv's status for a pair the index has no wheel for
PROGRESS_EVERY="${GUARD_PROGRESS_EVERY:-15}"  # seconds between the progress lines of a long step

# with_progress LOG CMD...: run CMD with stdin from /dev/null (it can ask no question, and needs no
# terminal) and its output in LOG; every PROGRESS_EVERY seconds one line says how long it has run,
# how much it has written to disk (PROGRESS_DIR, when set) and LOG's last line, or, when that line is
# the one already shown, for how long LOG has said nothing new (pip downloading a big wheel says one
# line, then nothing for a minute: that must not read as the same line repeated, as if hung).
# At the end, how long it took, or (on failure) LOG's last lines.
with_progress() {
  local log=$1 start=$SECONDS n=0 rc shown="" last since=$SECONDS size
  shift
  "$@" </dev/null >"$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    n=$((n + 1))
    [ $((n % PROGRESS_EVERY)) = 0 ] || continue
    last=$(tail -n 1 "$log" 2>/dev/null | cut -c1-100)
    size=""
    [ -n "${PROGRESS_DIR:-}" ] && size=", $(du -sh "$PROGRESS_DIR" 2>/dev/null | cut -f1) on disk"
    if [ "$last" != "$shown" ]; then
      echo "    ... $((SECONDS - start)) s$size: $last"
      shown=$last since=$SECONDS
    else
      echo "    ... $((SECONDS - start)) s$size: still working, no new line for $((SECONDS - since)) s"
    fi
  done
  wait "$pid"
  rc=$?
  if [ $rc = 0 ]; then
    echo "    done in $((SECONDS - start)) s"
  else
    echo "    failed (exit $rc) after $((SECONDS - start)) s; the last lines of $log:"
    tail -n 5 "$log" | sed 's/^/      /'
  fi
  return $rc
}

# index_has PYTHON PACKAGE VERSION: whether the package index serves a wheel of PACKAGE==VERSION
# that PYTHON can install (a local build label such as 2.13.0+cpu counts). When the index cannot
# be asked, say yes and let the install fail loudly.
index_has() {
  local listing
  if ! listing=$("$1" -m pip index versions "$2" 2>&1); then
    grep -q "No matching distribution" <<<"$listing" && return 1
    return 0
  fi
  grep -Eq "Available versions:(.*[ ,])? ?${3//./\\.}(\+[^ ,]*)?(,|$)" <<<"$listing"
}

# venv_ready VENV: whether VENV is a virtual environment of its own: its pyvenv.cfg, and its python's
# sys.prefix is VENV (a folder without pyvenv.cfg whose bin/python is the base Python would send
# every pip install into the base Python).
venv_ready() {
  [ -f "$1/pyvenv.cfg" ] && [ -x "$1/bin/python" ] && AUTOTUNE_DISABLE=1 "$1/bin/python" -c '
import os, sys
sys.exit(not (sys.prefix != sys.base_prefix and os.path.realpath(sys.prefix) == os.path.realpath(sys.argv[1])))' \
    "$1" 2>/dev/null
}

# source_stamp: what the checkout's package is (a hash of its files): reinstalled only when it changed,
# so that two scripts of one checkout never reinstall it under each other's running processes.
source_stamp() {
  find autotune_guard pyproject.toml -name __pycache__ -prune -o -type f -print | LC_ALL=C sort \
    | xargs sha256sum | sha256sum | cut -d' ' -f1
}

# build_venv PYTHON VENV WANT: VENV made anew in a temporary folder beside it, checked, moved into
# place, and only then stamped (a build cut short leaves no stamp, and no half venv under VENV's name).
build_venv() {
  local python=$1 venv=$2 want=$3 tmp
  tmp=$(mktemp -d "$venv.building.XXXXXX") && chmod 755 "$tmp" || return 1  # as python -m venv makes it: others run it
  "$python" -m venv "$tmp" && venv_ready "$tmp" || { echo "  $tmp: not a venv of its own after python -m venv"; rm -rf "$tmp"; return 1; }
  local pip=(env TMPDIR="$tmp/.pip-tmp" "$tmp/bin/python" -m pip install --no-input --disable-pip-version-check)
  # pip downloads and unpacks under TMPDIR: inside the folder whose size the progress lines say
  mkdir -p "$tmp/.pip-tmp" || { rm -rf "$tmp"; return 1; }
  local PROGRESS_DIR=$tmp
  for wanted in "triton $triton" "torch $TORCH"; do
    if ! index_has "$tmp/bin/python" $wanted; then
      rm -rf "$tmp"
      SKIP_WHY="the package index serves no ${wanted% *} ${wanted#* } wheel for Python $pyver here"
      echo "SKIP Python $pyver, Triton $triton: $SKIP_WHY"
      return $SKIPPED
    fi
  done
  echo "--- setting up $venv ($want)"
  local log="$tmp/setup.log"
  echo "  installing torch==$TORCH: the CPU build where the index or a wheel directory serves one (about 0.2 GB"
  echo "  downloaded), else the CUDA build with its nvidia-* libraries (about 4 GB downloaded, 5 GB on disk)"
  with_progress "$log" "${pip[@]}" --progress-bar off "torch==$TORCH" || { rm -rf "$tmp"; return 1; }
  echo "  installing triton==$triton (about 0.2 GB) over the Triton torch brought"
  with_progress "$log" "${pip[@]}" --progress-bar off --no-deps "triton==$triton" || { rm -rf "$tmp"; return 1; }
  echo "  installing ${VENV_DEPS[*]}"
  with_progress "$log" "${pip[@]}" --progress-bar off "${VENV_DEPS[@]}" || { rm -rf "$tmp"; return 1; }
  # Scripts pip wrote name the temporary folder's python: they name the venv's once it is moved.
  rm -rf "$tmp/.pip-tmp"
  grep -lsI "^#!$tmp/bin/" "$tmp"/bin/* | xargs -r sed -i "1s|^#!$tmp/bin/|#!$venv/bin/|"
  rm -rf "$venv" && mv "$tmp" "$venv" || { rm -rf "$tmp"; return 1; }
  if ! venv_ready "$venv" || ! AUTOTUNE_DISABLE=1 "$venv/bin/python" -c '
import sys, torch, triton
sys.exit(triton.__version__ != sys.argv[1] or torch.__version__.split("+")[0] != sys.argv[2])' "$triton" "$TORCH"; then
    echo "  $venv: torch $TORCH and Triton $triton are not what it runs after set-up: not stamped"
    return 1
  fi
  echo "$want" >"$venv/.autotune_guard-setup"
}

# guard_venv PYTHON TRITON: make (or reuse) the venv, install autotune_guard from this checkout
# into it (as a regular package, so that its .pth runs), and set VENV_PY. Returns 0 when ready,
# $SKIPPED (after printing one SKIP line, its reason in SKIP_WHY) when the pair cannot be set up here
# (no such Python, or no wheel for it), 1 on failure.
# Scripts started at once share $VENVS. Two flocks per venv: <venv>.build.lock, exclusive while one
# script looks at the venv and sets it up; <venv>.lock, held shared by every script that runs from
# the venv (until it ends, VENV_LOCK_FD) and exclusive by the one that builds or reinstalls, which so
# waits for those running from it. Scripts of one checkout that find it set up run side by side.
guard_venv() {
  local python=$1 triton=$2 pyver venv stamp want installed build use rc=0 source
  if ! pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); then
    SKIP_WHY="no such Python"; echo "SKIP $python, Triton $triton: $SKIP_WHY"; return $SKIPPED
  fi
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    SKIP_WHY="autotune_guard needs Python 3.10 or newer"; echo "SKIP Python $pyver, Triton $triton: $SKIP_WHY"; return $SKIPPED
  fi
  venv="$VENVS/py$pyver-triton$triton"
  stamp="$venv/.autotune_guard-setup"
  installed="$venv/.autotune_guard-installed"
  want="torch==$TORCH triton==$triton ${VENV_DEPS[*]}"
  mkdir -p "$VENVS" || return 1
  if [ -n "${VENV_LOCK_FD:-}" ]; then exec {VENV_LOCK_FD}>&-; VENV_LOCK_FD=; fi  # the previous pair's venv
  exec {build}>>"$venv.build.lock" {use}>>"$venv.lock" || return 1
  flock -x "$build"
  source=$(source_stamp)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! venv_ready "$venv" || [ "$(cat "$installed" 2>/dev/null)" != "$source" ]; then
    flock -x "$use"  # the scripts running from it end first
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! venv_ready "$venv"; then
      build_venv "$python" "$venv" "$want" || rc=$?
    fi
    if [ $rc = 0 ] && [ "$(cat "$installed" 2>/dev/null)" != "$source" ]; then
      if venv_ready "$venv" && "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
          --no-build-isolation --force-reinstall .; then
        echo "$source" >"$installed"
      else
        rc=1
      fi
    fi
  fi
  if [ $rc != 0 ]; then
    exec {build}>&- {use}>&-
    return $rc
  fi
  flock -s "$use"  # held shared while this script runs from the venv
  exec {build}>&-
  VENV_LOCK_FD=$use
  VENV_PY="$venv/bin/python"
  AUTOTUNE_DISABLE=1 "$VENV_PY" - "$venv" <<'EOF' || return 1
import os, subprocess, sys, sysconfig
import torch, triton
def size(path):
    out = subprocess.run(["du", "-sh", path], capture_output=True, text=True).stdout.split()
    return out[0] if out else "?"
site = sysconfig.get_paths()["purelib"]
nvidia = os.path.join(site, "nvidia")
build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
extra = f", nvidia-* libraries {size(nvidia)}" if os.path.isdir(nvidia) else ""
print(f"--- Python {sys.version.split()[0]}, Triton {triton.__version__}, torch {torch.__version__} ({build}, "
      f"{size(os.path.dirname(torch.__file__))}{extra}); venv {sys.argv[1]}: {size(sys.argv[1])}", flush=True)
EOF
}
