"""Interpreter start-up cost of ``autotune_guard.pth``, measured side by side in one run.

Three variants of ``python -c pass``, interleaved round-robin (the order rotates every round) so
that machine noise hits them alike:

* ``without``  a fresh venv (``--without-pip``) whose site-packages holds nothing of ours;
* ``inactive`` a second fresh venv with the package installed from a wheel, no ``AUTOTUNE_*``;
* ``active``   that venv with ``AUTOTUNE_MODE=pinned``, never importing Triton.

Process wall time is noisy at the sub-millisecond level, so the share of start-up our files take
is also timed inside cold interpreters: ``site.addsitedir`` of the site-packages folder (its
listing, and every ``.pth`` in it run as ``site`` runs it), under ``-S`` so nothing else happens.

Usage:  python scripts/bench_startup.py [--rounds 300] [--site-rounds 150] [--wheel PATH]
Goals:  inactive - without <= +0.3 ms, active - without <= +2 ms (issue 2).
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOALS_MS = {"inactive": 0.3, "active": 2.0}


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def build_wheel(dest: str) -> str:
    # No build isolation: hatchling is in the dev environment and there may be no network.
    sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dest, REPO])
    wheels = glob.glob(os.path.join(dest, "autotune_guard-*.whl"))
    if not wheels:
        raise SystemExit(f"no wheel was built in {dest}")
    return wheels[0]


def make_venv(path: str) -> str:
    sh([sys.executable, "-m", "venv", "--without-pip", path])
    return os.path.join(path, "bin", "python")


def purelib(python: str) -> str:
    return sh([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()


def install_wheel(python: str, wheel: str) -> str:
    """Install into the venv's site-packages with pip's ordinary wheel install (which also
    compiles the ``.pyc`` files, whatever PYTHONDONTWRITEBYTECODE says); returns site-packages."""
    site = purelib(python)
    sh([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site, wheel])
    return site


def child_env(active: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "PYTHONPATH", "VIRTUAL_ENV"))}
    if active:
        env["AUTOTUNE_MODE"] = "pinned"
    return env


def spawn_wall_ms(python: str, env: dict, args=("-c", "pass")) -> float:
    """Wall time of one cold interpreter, from spawn to reaped."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        t0 = time.perf_counter()
        pid = os.posix_spawn(python, [python, *args], env, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
        _, status = os.waitpid(pid, 0)
        elapsed = (time.perf_counter() - t0) * 1e3
    finally:
        os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{python} -c pass failed (status {status})")
    return elapsed


# A typical one-line .pth of another package (setuptools installs one much like it).
OTHER_PTH = 'import os; os.environ.get("OTHER_PACKAGE_SWITCH", "local") == "local" and None\n'


def addsitedir_us(python: str, folder: str, env: dict) -> float:
    """``site.addsitedir`` of a site-packages folder (its listing and every ``.pth`` in it), timed
    inside a cold interpreter started with ``-S``: the start-up share of our files, with far less
    noise than a whole process.  A failed import first fills the import system's directory
    caches for the standard library, as a normal start does anyway (``import sitecustomize``),
    so that an active ``.pth`` is not charged for it."""
    code = (
        "import sys, time, site\n"
        "try:\n"
        "    import _autotune_guard_bench_absent_\n"
        "except ImportError:\n"
        "    pass\n"
        "t0 = time.perf_counter_ns(); site.addsitedir(sys.argv[1]); t1 = time.perf_counter_ns()\n"
        "print((t1 - t0) / 1000)\n"
    )
    return float(sh([python, "-S", "-c", code, folder], env=env).stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300, help="cold starts per variant (default 300)")
    ap.add_argument("--site-rounds", type=int, default=150, help="cold addsitedir timings per variant (default 150)")
    ap.add_argument("--wheel", help="a built autotune_guard wheel (default: build one from this checkout)")
    opts = ap.parse_args()

    wheel = os.path.abspath(opts.wheel) if opts.wheel else None
    home = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="ag-startup-") as tmp:
        wheel = wheel or build_wheel(os.path.join(tmp, "dist"))
        # Children start in an empty folder: with ``-c`` the working directory heads sys.path,
        # and a checkout there would be imported instead of the installed package.
        os.chdir(tmp)
        plain = make_venv(os.path.join(tmp, "plain"))
        guard = make_venv(os.path.join(tmp, "guard"))
        site = install_wheel(guard, wheel)
        pyc = sorted(glob.glob(os.path.join(site, "autotune_guard", "__pycache__", "*.pyc")))
        has_pyc = any(os.path.basename(p).startswith("_boot.") for p in pyc)
        if not has_pyc:  # never time a start that compiles our sources
            sh([guard, "-m", "compileall", "-q", os.path.join(site, "autotune_guard")])
            has_pyc = "no; compiled by this script"
        leftovers = [n for n in os.listdir(purelib(plain)) if "autotune" in n]
        assert not leftovers, leftovers

        variants = {
            "without": (plain, child_env(False)),
            "inactive": (guard, child_env(False)),
            "active": (guard, child_env(True)),
        }
        # The .pth really runs: active arms the watcher, inactive imports nothing of ours.
        probe = "import sys; print(int('autotune_guard._boot' in sys.modules), int(any('autotune' in m for m in sys.modules)))"
        seen = {n: sh([py, "-c", probe], env=env).stdout.split() for n, (py, env) in variants.items()}
        assert seen == {"without": ["0", "0"], "inactive": ["0", "0"], "active": ["1", "1"]}, seen

        names = list(variants)
        for name in names:  # warm the page cache
            for _ in range(5):
                spawn_wall_ms(*variants[name])
        wall = {n: [] for n in names}
        for r in range(opts.rounds):
            for name in names[r % 3:] + names[:r % 3]:
                wall[name].append(spawn_wall_ms(*variants[name]))

        # In-process: besides the three variants, a folder holding another package's one-line
        # .pth, alone and next to ours: Python's fixed cost of a first .pth file vs our share.
        empty, other, both = (os.path.join(tmp, d) for d in ("empty", "other", "both"))
        for d in (empty, other, both):
            os.makedirs(d)
        for d in (other, both):
            with open(os.path.join(d, "other_package.pth"), "w") as dst:
                dst.write(OTHER_PTH)
        with open(os.path.join(site, "autotune_guard.pth")) as src, open(os.path.join(both, "autotune_guard.pth"), "w") as dst:
            dst.write(src.read())
        folders = {"without": (empty, False), "inactive": (site, False), "active": (site, True),
                   "other .pth": (other, False), "other+ours": (both, False)}
        site_us = {n: [] for n in folders}
        keys = list(folders)
        for r in range(opts.site_rounds):
            for name in keys[r % 5:] + keys[:r % 5]:
                folder, active = folders[name]
                site_us[name].append(addsitedir_us(guard, folder, child_env(active)))
        os.chdir(home)

    med = {n: statistics.median(v) for n, v in wall.items()}
    q = {n: statistics.quantiles(v, n=4) for n, v in wall.items()}
    smed = {n: statistics.median(v) for n, v in site_us.items()}
    sq = {n: statistics.quantiles(v, n=4) for n, v in site_us.items()}
    print(f"autotune_guard start-up benchmark  ({time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs)")
    print(f"command: python scripts/bench_startup.py --rounds {opts.rounds} --site-rounds {opts.site_rounds}")
    print(f"our .pyc files present after pip's wheel install: {has_pyc} "
          f"(PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}; pip compiles regardless)")
    print()
    print("python -c pass, cold, wall time (spawn to reaped), variants interleaved:")
    print(f"  {'variant':<10} {'median ms':>10} {'quartiles ms':>16} {'vs without':>11} {'goal':>8}")
    for name in names:
        diff = med[name] - med["without"]
        goal = GOALS_MS.get(name)
        verdict = "" if goal is None else ("ok" if diff <= goal else "MISSED")
        print(f"  {name:<10} {med[name]:>10.3f} {q[name][0]:>7.3f}-{q[name][2]:<8.3f} "
              f"{'' if goal is None else f'{diff:+.3f}':>11} {'' if goal is None else f'<=+{goal}':>8}  {verdict}")
    print()
    print("site.addsitedir(folder) inside a cold interpreter (-S), i.e. the share of start-up the folder's files take:")
    print(f"  {'folder':<10} {'median us':>10} {'quartiles us':>16} {'vs empty':>9}  what")
    what = {"without": "an empty site-packages", "inactive": "ours, no AUTOTUNE_*",
            "active": "ours, AUTOTUNE_MODE=pinned (imports autotune_guard._boot, arms the watcher)",
            "other .pth": "only another package's one-line .pth",
            "other+ours": f"that and ours, inactive: ours adds {smed['other+ours'] - smed['other .pth']:+.0f} us"}
    for name in site_us:
        diff = "" if name == "without" else f"{smed[name] - smed['without']:+.0f}"
        print(f"  {name:<10} {smed[name]:>10.0f} {sq[name][0]:>7.0f}-{sq[name][2]:<8.0f} {diff:>9}  {what[name]}")
    ok = all(med[n] - med["without"] <= g for n, g in GOALS_MS.items())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
