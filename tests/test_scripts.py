"""scripts/venv.sh and scripts/test.sh: which (Python, Triton) pairs run, which are skipped, and that a
run that tested nothing fails (issue 14).

The set-up itself (venvs, torch, Triton) is what ``bash scripts/test.sh`` does for real; these tests
drive the scripts' own decisions with stand-in interpreters, so they need no network.
"""

import os
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


def test_test_sh_says_what_it_installs_shows_progress_and_needs_no_terminal(tmp_path):
    # A stand-in apt-get (first on PATH) that takes 3 s; no browser by the name test.sh looks for; a
    # Python that does not exist, so nothing else is set up. No terminal: a new session, stdin /dev/null.
    if os.geteuid() != 0:
        import pytest

        pytest.skip("test.sh installs chromium only as root")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "apt-get", f'echo "apt-get $*" >>"{tmp_path}/apt.args"\n'
             'if [ -t 0 ] || [ -t 1 ]; then echo "a terminal" >>"' + str(tmp_path) + '/apt.args"; fi\n'
             'for i in 1 2 3; do echo "Get:$i fake chromium part $i"; sleep 1; done\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GUARD_CHROMIUM": "no-such-browser-for-test",
           "GUARD_PROGRESS_EVERY": "1", "PYTHONS": str(tmp_path / "no-such-python"), "TRITONS": "3.9.0",
           "GUARD_VENVS": str(tmp_path / "venvs")}
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "test.sh")], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, start_new_session=True)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1 and lines[0].startswith("scripts/test.sh: installs chromium and redis-server with apt-get"), proc.stdout
    said = next(i for i, line in enumerate(lines) if line.startswith("chromium: missing; installing Debian's chromium"))
    progress = [line for line in lines[said:] if line.startswith("    ... ") and "fake chromium part" in line]
    assert progress and any(line.startswith("    done in ") for line in lines[said:]), proc.stdout
    args = (tmp_path / "apt.args").read_text().splitlines()
    assert args == ["apt-get update", "apt-get install -y -o Dpkg::Use-Pty=0 chromium chromium-driver"], args


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


def _pretend_venvs(tmp_path, tritons):
    """``GUARD_VENVS`` holding a set-up venv per Triton whose python is a stand-in: version queries
    say 3.11, pip and imports succeed, and ``-m pytest`` notes when it started and ended (3 s apart)."""
    venvs, notes = tmp_path / "venvs", tmp_path / "sessions.txt"
    for triton in tritons:
        want = subprocess.run(["bash", "-c", f'source "{VENV_SH}"; echo "torch==$TORCH triton=={triton} ${{VENV_DEPS[*]}}"'],
                              capture_output=True, text=True, check=True).stdout.strip()
        venv = venvs / f"py3.11-triton{triton}"
        (venv / "bin").mkdir(parents=True)
        (venv / ".autotune_guard-setup").write_text(want + "\n")
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")  # what scripts/venv.sh checks a venv by
        stand_in(venv / "bin", "python", 'case "$*" in\n'
                 '  *version_info*) echo 3.11 ;;\n'
                 f'  *"-m pytest"*) echo "start $(date +%s.%N) {triton} GUARD_LONG=$GUARD_LONG $*" >>"{notes}"; sleep 3;\n'
                 f'    echo "end $(date +%s.%N) {triton}" >>"{notes}"; echo "1 passed" ;;\n'
                 'esac\nexit 0\n')
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
