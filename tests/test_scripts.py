"""scripts/venv.sh and scripts/test.sh: which (Python, Triton) pairs run, which are skipped, and that a
run that tested nothing fails (issue 14).

The set-up itself (venvs, torch, Triton) is what ``bash scripts/test.sh`` does for real; these tests
drive the scripts' own decisions with stand-in interpreters, so they need no network.
"""

import hashlib
import os
import re
import shutil
import subprocess

import pytest

from support import REPO

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

VENV_SH = os.path.join(REPO, "scripts", "venv.sh")


def stand_in(tmp_path, name, body):
    """An executable that plays an interpreter: ``body`` is a shell script."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def index_has(tmp_path, listing, status, package, version):
    python = stand_in(tmp_path, "python", f"cat <<'EOF'\n{listing}\nEOF\nexit {status}\n")
    proc = subprocess.run(["bash", "-c", f'source "{VENV_SH}"; index_has "$0" "$1" "$2"', python, package, version],
                          capture_output=True, text=True, timeout=30)
    return proc.returncode == 0


LISTING = ("WARNING: pip index is currently an experimental command.\ntriton (3.8.0)\n"
           "Available versions: 3.8.0, 3.7.1, 3.3.1, 13.9.0, 3.9.01")


def test_index_has_reads_the_versions_pip_lists_for_that_python(tmp_path):
    assert index_has(tmp_path, LISTING, 0, "triton", "3.8.0")  # the first in the list
    assert index_has(tmp_path, LISTING, 0, "triton", "3.7.1")
    assert index_has(tmp_path, LISTING, 0, "triton", "3.3.1")
    assert not index_has(tmp_path, LISTING, 0, "triton", "3.9.0")  # not 13.9.0, not 3.9.01
    torch = "torch (2.15.0)\nAvailable versions: 2.15.0, 2.13.0+cpu, 2.12.1"
    assert index_has(tmp_path, torch, 0, "torch", "2.13.0")  # a local build label counts
    assert not index_has(tmp_path, torch, 0, "torch", "2.13.1")
    # No wheel for this Python at all: no.  The index could not be asked: yes, the install will say why.
    assert not index_has(tmp_path, "ERROR: No matching distribution found for triton", 1, "triton", "3.9.0")
    assert index_has(tmp_path, "ERROR: Could not fetch URL: connection refused", 1, "triton", "3.9.0")


def test_test_sh_skips_a_python_too_old_and_fails_when_nothing_ran(tmp_path):
    old = stand_in(tmp_path, "python3.9", 'case "$2" in *print*) echo 3.9 ;; *) exit 1 ;; esac\n')
    env = {**os.environ, "PYTHONS": f"{old} {tmp_path / 'no-such-python'}", "TRITONS": "3.9.0 3.3.1",
           "GUARD_VENVS": str(tmp_path / "venvs")}
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "test.sh")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for triton in ("3.9.0", "3.3.1"):
        assert f"SKIP Python 3.9, Triton {triton}: autotune_guard needs Python 3.10 or newer" in lines
        assert f"SKIP {tmp_path / 'no-such-python'}, Triton {triton}: no such Python" in lines
    assert sum(line.startswith("  skipped ") for line in lines) == 4
    assert "no (Python, Triton) pair could run: nothing was tested" in proc.stderr
    assert not (tmp_path / "venvs").exists()  # nothing was set up for pairs that cannot run


def _path_without(tmp_path, *names):
    """A PATH of one folder: links to every program on this PATH but ``names`` (the machine keeps them)."""
    bin_dir = tmp_path / "path"
    if bin_dir.exists():
        return str(bin_dir)
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        for entry in (os.listdir(folder) if os.path.isdir(folder) else []):
            if entry not in names and not (bin_dir / entry).exists():
                os.symlink(os.path.join(folder, entry), bin_dir / entry)
    return str(bin_dir)


# The stand-in pytest of _pretend_venvs, here: which programs the test sessions find on their PATH.
SEEN_BY_TESTS = ('  *"-m pytest"*) for p in redis-server chromium; do echo "$p=$(command -v $p | xargs -r readlink -f)|$($p --version 2>/dev/null '
                 '| head -n 1)"; done >>"{notes}"; echo "1 passed" ;;\n')


def _test_sh_without(tmp_path, missing, first_on_path=None):
    """scripts/test.sh on a pretend venv (no pytest runs) with a PATH that lacks ``missing``; its
    output, GUARD_VENVS, and what its test session found: {program: (path, first line of --version)}."""
    venvs, notes, python = _pretend_venvs(tmp_path, ("3.9.0",), pytest_body=SEEN_BY_TESTS)
    notes.unlink(missing_ok=True)
    path = _path_without(tmp_path, *missing)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GUARD_", "AUTOTUNE_")) and k != "CI"}
    env.update(PATH=f"{first_on_path}:{path}" if first_on_path else path, PYTHONS=python, TRITONS="3.9.0",
               GUARD_VENVS=str(venvs), GUARD_LONG="0")
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "test.sh")], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL, start_new_session=True)
    seen = dict(line.split("=", 1) for line in notes.read_text().splitlines()) if notes.exists() else {}
    return proc, venvs, {name: tuple(found.split("|", 1)) for name, found in seen.items()}


def test_test_sh_installs_nothing_where_redis_server_and_chromium_are_missing_and_names_what_is_skipped(tmp_path):
    """Issue 58: the test command ran apt-get install as root (116 packages). Now, with neither program
    on PATH and an apt-get that cannot download, it asks apt-get only to simulate and download, and
    names the tests it skips; the test session finds neither."""
    apt = tmp_path / "apt"
    apt.mkdir()
    stand_in(apt, "apt-get", f'echo "apt-get $*" >>"{tmp_path}/apt.args"\necho "E: no network here"; exit 100\n')
    proc, venvs, seen = _test_sh_without(tmp_path, ("redis-server", "chromium", "chromium-browser", "apt-get"), apt)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = (tmp_path / "apt.args").read_text().splitlines()
    assert calls and all(call.startswith(("apt-get install -s ", "apt-get download ")) for call in calls), calls
    said = proc.stdout.splitlines()
    assert "redis-server: not on PATH (nor GUARD_REDIS_SERVER), and not unpacked (apt-get download redis-server " \
        "redis-tools failed: E: no network here):" in said, said
    assert any(line.startswith("  the table-store tests (") and line.endswith("are skipped") for line in said), said
    assert "chromium: not on PATH (nor GUARD_CHROMIUM): the 2 browser tests of tests/test_report_html.py are skipped" \
        in said, said
    assert seen == {"redis-server": ("", ""), "chromium": ("", "")}, seen
    assert not (venvs / "debian" / "redis-server").exists() and not list((venvs / "debian").glob("*.unpacking.*"))


def test_test_sh_installs_with_no_apt_get_install_and_ci_says_what_it_installs():
    script = open(os.path.join(REPO, "scripts", "test.sh")).read()
    code = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if re.search(r"apt-get (-\S+ )*install(?! -s)", line)], "test.sh installs with apt-get"
    assert "id -u" not in script and "sudo" not in script and "systemctl" not in script
    ci = open(os.path.join(REPO, ".ci", "run")).read()
    assert "apt-get install" in ci and "redis-server" in ci and "chromium" in ci  # CI installs them, and says so


def _machine_state():
    """What an install would change: dpkg's list and the base Python's packages (md5 of each)."""
    dpkg = subprocess.run(["dpkg", "-l"], capture_output=True, text=True, check=True).stdout
    pip = subprocess.run(["python3", "-m", "pip", "list"], capture_output=True, text=True).stdout
    return hashlib.md5(dpkg.encode()).hexdigest(), hashlib.md5(pip.encode()).hexdigest()


def test_test_sh_unpacks_a_real_redis_server_into_its_folder_where_path_has_none(tmp_path):
    """The real thing: no redis-server on PATH, the real apt-get: Debian's redis-server downloaded and
    unpacked (dpkg -x) under GUARD_VENVS, and the test session runs it; dpkg's list and the base
    Python's packages are the same after. Needs Debian's package lists and the network."""
    if not shutil.which("dpkg") or subprocess.run(["apt-get", "install", "-s", "redis-server"],
                                                  capture_output=True).returncode != 0:
        pytest.skip("no apt-get whose package lists name redis-server here")
    before = _machine_state()
    proc, venvs, seen = _test_sh_without(tmp_path, ("redis-server",))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _machine_state() == before, "dpkg -l or the base Python's pip list changed"
    unpacked = tmp_path / "venvs" / "debian" / "redis-server"
    assert f"redis-server: not on PATH; Debian's redis-server unpacked (dpkg -x, not installed) in {unpacked}:" \
        in proc.stdout, proc.stdout
    found, version = seen["redis-server"]
    assert found == str(unpacked / "bin" / "redis-server") and version.startswith("Redis server v="), seen
    # a second run reuses the folder: nothing downloaded again
    stamp = (unpacked / ".unpacked").stat().st_mtime
    proc, _, seen = _test_sh_without(tmp_path, ("redis-server",))
    assert proc.returncode == 0 and "Debian's redis-server unpacked" in proc.stdout, proc.stdout
    assert (unpacked / ".unpacked").stat().st_mtime == stamp and seen["redis-server"][1].startswith("Redis server v=")


def _base_site(python="python3"):
    """The base Python's site-packages and what it holds."""
    out = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return out, sorted(os.listdir(out)) if os.path.isdir(out) else []


def test_demo_and_tests_started_at_once_over_a_planted_venv_both_pass_and_install_nothing_outside_it(tmp_path):
    # Issue 44: a folder named as the venv, with the stamp of a set-up one but no pyvenv.cfg and the
    # base Python as its bin/python (what one run found), made pip install into the base Python;
    # two scripts at once shared the folder with no lock. Now: checked, rebuilt once under a lock
    # in a temporary folder, and both scripts pass. Needs the package index (pip's cache serves it).
    venvs = tmp_path / "venvs"
    pyver = subprocess.run(["python3", "-c", 'import sys; print("%d.%d" % sys.version_info[:2])'],
                           capture_output=True, text=True, check=True).stdout.strip()
    planted = venvs / f"py{pyver}-triton3.9.0"
    (planted / "bin").mkdir(parents=True)
    os.symlink(subprocess.run(["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True,
                              check=True).stdout.strip(), planted / "bin" / "python")
    want = subprocess.run(["bash", "-c", f'source "{VENV_SH}"; echo "torch==$TORCH triton==3.9.0 ${{VENV_DEPS[*]}}"'],
                          capture_output=True, text=True, check=True).stdout.strip()
    (planted / ".autotune_guard-setup").write_text(want + "\n")
    site, before = _base_site()
    env = {**os.environ, "GUARD_VENVS": str(venvs), "TRITONS": "3.9.0", "GUARD_CHROMIUM": "true", "GUARD_LONG": "0"}
    env = {k: v for k, v in env.items() if not k.startswith("AUTOTUNE_")}
    scripts = [["bash", os.path.join(REPO, "scripts", "demo.sh")],
               ["bash", os.path.join(REPO, "scripts", "test.sh"), "-k", "test_index_has_reads_the_versions"]]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL) for cmd in scripts]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n=====\n".join(o[-3000:] for o in outs)
    assert sum(o.count("--- setting up ") for o in outs) == 1, outs
    assert (planted / "pyvenv.cfg").is_file() and not list(venvs.glob("*.building.*"))
    assert _base_site() == (site, before), "something was installed into the base Python"
    assert not any(name.startswith(("autotune_guard", "hatchling")) for name in os.listdir(site)) or \
        any(name.startswith(("autotune_guard", "hatchling")) for name in before)


def _pretend_venvs(tmp_path, tritons, pytest_body=None):
    """``GUARD_VENVS`` holding a set-up venv per Triton whose python is a stand-in: version queries
    say 3.11, pip and imports succeed, and ``-m pytest`` notes when it started and ended (3 s apart)."""
    venvs, notes = tmp_path / "venvs", tmp_path / "sessions.txt"
    for triton in tritons:
        want = subprocess.run(["bash", "-c", f'source "{VENV_SH}"; echo "torch==$TORCH triton=={triton} ${{VENV_DEPS[*]}}"'],
                              capture_output=True, text=True, check=True).stdout.strip()
        venv = venvs / f"py3.11-triton{triton}"
        (venv / "bin").mkdir(parents=True, exist_ok=True)
        (venv / ".autotune_guard-setup").write_text(want + "\n")
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")  # what scripts/venv.sh checks a venv by
        stand_in(venv / "bin", "python", 'case "$*" in\n'
                 '  *version_info*) echo 3.11 ;;\n'
                 + ((f'  *"-m pytest"*) echo "start $(date +%s.%N) {triton} GUARD_LONG=$GUARD_LONG $*" >>"{notes}"; sleep 3;\n'
                     f'    echo "end $(date +%s.%N) {triton}" >>"{notes}"; echo "1 passed" ;;\n')
                    if pytest_body is None else pytest_body.format(notes=notes)) + 'esac\nexit 0\n')
    python = stand_in(tmp_path, "python3.11", 'case "$*" in *version_info*) echo 3.11 ;; esac\nexit 0\n')
    return venvs, notes, python


def test_test_sh_says_where_and_what_then_runs_the_pairs_at_once(tmp_path):
    """The venvs are ready (stand-ins): the two pairs' pytest sessions and the long claimer's run at
    the same time, each pair over 2 pytest-xdist workers; the first lines said where and what."""
    venvs, notes, python = _pretend_venvs(tmp_path, ("3.9.0", "3.3.1"))
    env = {**os.environ, "PYTHONS": python, "TRITONS": "3.9.0 3.3.1", "GUARD_VENVS": str(venvs),
           "GUARD_CHROMIUM": "true"}
    env.pop("GUARD_LONG", None)
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "test.sh")], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = proc.stdout.split("=== set-up")[0]
    assert f"in {venvs}:" in said and f"this checkout ({REPO}) as a package" in said and "nothing else is installed" in said
    sessions = [line.split() for line in notes.read_text().splitlines()]
    starts = [float(s[1]) for s in sessions if s[0] == "start"]
    ends = [float(s[1]) for s in sessions if s[0] == "end"]
    assert len(starts) == 3 and max(starts) < min(ends), sessions  # all three at once
    mains = [" ".join(s) for s in sessions if s[0] == "start" and "GUARD_LONG=0" in s]
    assert len(mains) == 2 and all("-n 2 --dist loadfile" in m for m in mains), mains
    assert "--ignore=test_zz_long_claimer.py" in [m for m in mains if "3.9.0" in m][0]
    long = [" ".join(s) for s in sessions if s[0] == "start" and "GUARD_LONG=1" in s]
    assert len(long) == 1 and long[0].endswith("test_zz_long_claimer.py"), long
    assert "passed   py3.11-triton3.9.0" in proc.stdout and "passed   py3.11-triton3.3.1" in proc.stdout


def test_demo_sh_says_where_and_what_before_it_builds_and_a_failed_set_up_leaves_nothing(tmp_path):
    venvs = tmp_path / "venvs"
    env = {**os.environ, "PYTHON": str(tmp_path / "no-such-python"), "GUARD_VENVS": str(venvs)}
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "demo.sh")], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("scripts/demo.sh: uses the venv for") and f"in {venvs}," in lines[0], lines
    assert f"nothing is\n  installed outside {venvs}" in proc.stdout or f"installed outside {venvs}" in proc.stdout
    assert f"could not set up a venv for {tmp_path / 'no-such-python'} with Triton 3.9.0 in {venvs}" in proc.stderr
    assert not venvs.exists()  # nothing was made


def test_test_sh_without_tritons_tests_the_newest_and_names_the_ci_command(tmp_path):
    """Issue 45: the README's command tests Triton 3.9.0 alone (one session over both cores, and the
    long claimer's), and says how CI adds the oldest; .ci/run names both."""
    venvs, notes, python = _pretend_venvs(tmp_path, ("3.9.0", "3.3.1"))
    env = {**os.environ, "PYTHONS": python, "GUARD_VENVS": str(venvs), "GUARD_CHROMIUM": "true"}
    env.pop("GUARD_LONG", None), env.pop("TRITONS", None)
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "test.sh")], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    started = [line.split() for line in notes.read_text().splitlines() if line.startswith("start")]
    assert sorted(s[2] for s in started) == ["3.9.0", "3.9.0"], started  # the session and the claimer's
    assert 'CI also tests the oldest: TRITONS="3.9.0 3.3.1" bash scripts/test.sh' in proc.stdout, proc.stdout
    assert 'TRITONS="3.9.0 3.3.1" exec bash scripts/test.sh' in open(os.path.join(REPO, ".ci", "run")).read()


def _train_log(folder, hashes, first=20.0):
    """A train_lm.py job folder as acceptance.sh leaves it: each rank's RESULT line, calls per process."""
    folder.mkdir(parents=True)
    lines = [f'RESULT {{"first_step_s": {first}, "step_s": {[0.03] * 12}, "params": "{h}"}}' for h in hashes]
    (folder / "log.txt").write_text("\n".join(lines) + "\n")


def test_the_acceptance_summary_fails_a_run_that_should_time_nothing_and_names_one_that_did_not_run(tmp_path):
    # The train phase once said PASS with its pinned job skipped and the summary crashed on the missing log.
    script = os.path.join(REPO, "scripts", "gpu", "acceptance", "summarize.py")
    _train_log(tmp_path / "plain", ["a", "b"], 100.0)
    _train_log(tmp_path / "readme2", ["a", "a"])
    (tmp_path / "readme2" / "calls.1.json").write_text('{"do_bench": 3}')
    run = lambda *names: subprocess.run(["python3", script, str(tmp_path), *names], capture_output=True, text=True)  # noqa: E731
    found = run("plain", "readme2", "pinned", "--untimed", "readme2,pinned")
    assert found.returncode == 1, found.stderr
    assert "pinned: not run (no log)" in found.stdout and "| readme2 | 2 | 3 + 0 | 20.0 | 0.20x" in found.stdout
    assert "CHECK FAILED: pinned: did not run" in found.stdout
    assert "CHECK FAILED: readme2: 3 + 0 benchmark calls, 1 hashes (expected 0 + 0 and 1)" in found.stdout
    (tmp_path / "readme2" / "calls.1.json").write_text('{"do_bench": 0}')
    _train_log(tmp_path / "pinned", ["a", "a"])
    found = run("plain", "readme2", "pinned", "--untimed", "readme2,pinned")
    assert found.returncode == 0 and "CHECK FAILED" not in found.stdout, found.stdout


def test_a_long_step_says_its_time_and_size_and_never_repeats_a_stale_line(tmp_path):
    """Issue 58: pip's one line ("Downloading torch ... (190 MB)") was printed again every 15 s for
    30 s, which read as hung. Now a line already shown is not repeated: the progress line says for
    how long nothing new was said, and how much is on disk (PROGRESS_DIR) as it grows."""
    grow = tmp_path / "venv"
    grow.mkdir()
    body = (f'echo "Downloading torch-2.13.0-cp311.whl (190.3 MB)"; for i in 1 2 3 4; do sleep 1; '
            f'head -c 300000 /dev/urandom >"{grow}/part$i"; done')
    proc = subprocess.run(["bash", "-c", f'source "{VENV_SH}"; PROGRESS_EVERY=1 PROGRESS_DIR="{grow}" '
                           f'with_progress "{tmp_path}/log" bash -c "$0"', body],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("    ... ")]
    assert len(lines) >= 3, proc.stdout
    assert sum("Downloading torch" in line for line in lines) == 1, proc.stdout  # said once, not again and again
    stale = [line for line in lines if "still working, no new line for " in line]
    assert len(stale) >= 2 and len(set(stale)) == len(stale), proc.stdout  # each says a new time
    assert all(" on disk: " in line for line in lines) and proc.stdout.splitlines()[-1].startswith("    done in "), proc.stdout


def test_the_demo_writes_no_escape_codes_into_a_file(tmp_path):
    """Issue 58: the demo's titles carried raw \\033[1m into a file. Its venv here is a stand-in whose
    ranks print nothing, so the demo stops after its first title (no result hash)."""
    venvs = tmp_path / "venvs"
    want, source = subprocess.run(["bash", "-c", f'cd "{REPO}" && source scripts/venv.sh && '
                                   'echo "torch==$TORCH triton==3.9.0 ${VENV_DEPS[*]}" && source_stamp'],
                                  capture_output=True, text=True, check=True).stdout.splitlines()
    venv = venvs / "py3.11-triton3.9.0"
    (venv / "bin").mkdir(parents=True)
    (venv / ".autotune_guard-setup").write_text(want + "\n")
    (venv / ".autotune_guard-installed").write_text(source + "\n")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    stand_in(venv / "bin", "python", 'case "$*" in *version_info*) echo 3.11 ;; esac\nexit 0\n')
    python = stand_in(tmp_path, "python3.11", 'case "$*" in *version_info*) echo 3.11 ;; esac\nexit 0\n')
    out = tmp_path / "demo.out"
    with open(out, "w") as file:
        proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "demo.sh")], stdout=file, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHON": python, "GUARD_VENVS": str(venvs)}, timeout=120,
                              stdin=subprocess.DEVNULL)
    said = out.read_text()
    assert proc.returncode != 0 and "\n== 1. auto: Triton times the candidates on every rank" in said, said
    assert "\x1b" not in said, said
