"""Interpreter start-up cost of ``autotune_guard.pth``, measured side by side in one run.

Three variants of ``python -c pass``, interleaved round-robin (the order rotates every round) so
that machine noise hits them alike:

* ``without``  a fresh venv (``--without-pip``) whose site-packages holds nothing of ours;
* ``inactive`` a second fresh venv with the package installed from a wheel, no ``AUTOTUNE_*``;
* ``active``   that venv with ``AUTOTUNE_MODE=pinned``, never importing Triton.

Process wall time is noisy at the sub-millisecond level, so the share of start-up our files take
is also timed inside cold interpreters: ``site.addsitedir`` of the site-packages folder (its
listing, and every ``.pth`` in it run as ``site`` runs it), under ``-S`` so nothing else happens.

Without ``AUTOTUNE_*`` the ``.pth`` line puts a finder on ``sys.meta_path`` that compares each
name imported for the first time with ``triton`` and ``torch`` (settings the program sets before
importing Triton are then honoured). ``--torch-rounds N`` prices it where it costs most, ``import
torch`` (one call per module torch loads), in this interpreter's environment (it needs torch):
the calls counted, one non-matching call timed, and cold ``import torch`` timed in-process with
and without the finder, paired (same interpreter, rounds interleaved, the order alternating).

Usage:  python scripts/bench_startup.py [--rounds 300] [--site-rounds 150] [--wheel PATH] [--torch-rounds 20]
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
# Ours without the inactive finder (settings set in the program then did nothing): its share.
NO_FINDER_PTH = 'import os; "=AUTOTUNE_" in "=" + "=".join(os.environ) and __import__("autotune_guard._boot")._boot.main()\n'
# The alternative issue 20 asks to price: name settings set in the program once, at exit,
# instead of honouring them (the same hook size as the finder, so no cheaper).
NAME_AT_EXIT_PTH = ('import os; "=AUTOTUNE_" in "=" + "=".join(os.environ) and __import__("autotune_guard._boot")._boot.main()'
                    ' or __import__("atexit").register(lambda: "=AUTOTUNE_" in "=" + "=".join(os.environ)'
                    ' and __import__("autotune_guard._boot")._boot.name_late())\n')


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


# Run with the shipped .pth line's finder (or without it), in a cold interpreter, no AUTOTUNE_*.
TORCH_IMPORT = (
    "import sys, time\n"
    "sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, 'autotune_guard_late', 0)]\n"
    "if sys.argv[2] == 'with':\n"
    "    exec(open(sys.argv[1]).read())\n"
    "t0 = time.perf_counter_ns(); import torch; t1 = time.perf_counter_ns()\n"
    "print((t1 - t0) / 1e6)\n"
)
FINDER_CALLS = (
    "import sys, time\n"
    "exec(open(sys.argv[1]).read())\n"
    "finder = sys.meta_path[0]\n"
    "assert getattr(finder, 'autotune_guard_late', 0), sys.meta_path\n"
    "calls = [0]\n"
    "class Count:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        calls[0] += 1\n"
    "sys.meta_path.insert(0, Count())\n"
    "import torch\n"
    "n = 200000\n"
    "t0 = time.perf_counter_ns()\n"
    "for _ in range(n):\n"
    "    finder.find_spec('torch._inductor.runtime', None, None)\n"
    "t1 = time.perf_counter_ns()\n"
    "print(calls[0], (t1 - t0) / n)\n"
)


def torch_import_cost(rounds: int) -> None:
    """The inactive finder's price over ``import torch`` (see the module docstring)."""
    pth = os.path.join(REPO, "autotune_guard.pth")
    env = child_env(False)
    calls, per_call_ns = sh([sys.executable, "-c", FINDER_CALLS, pth], env=env).stdout.split()
    times = {"without": [], "with": []}
    for r in range(rounds):
        for variant in (("without", "with") if r % 2 == 0 else ("with", "without")):
            times[variant].append(float(sh([sys.executable, "-c", TORCH_IMPORT, pth, variant], env=env).stdout))
    pairs = [w - wo for w, wo in zip(times["with"], times["without"])]
    print(f"the inactive .pth's finder over `import torch` ({sys.executable}, {rounds} paired rounds):")
    print(f"  find_spec calls during `import torch`: {calls}; one non-matching call: {float(per_call_ns):.0f} ns; "
          f"calls x cost: {int(calls) * float(per_call_ns) / 1e6:.3f} ms")
    print(f"  cold `import torch` in-process, median ms: without {statistics.median(times['without']):.1f}, "
          f"with {statistics.median(times['with']):.1f}; median of paired differences {statistics.median(pairs):+.2f} ms "
          f"(quartiles {statistics.quantiles(pairs, n=4)[0]:+.2f} .. {statistics.quantiles(pairs, n=4)[2]:+.2f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300, help="cold starts per variant (default 300)")
    ap.add_argument("--site-rounds", type=int, default=150, help="cold addsitedir timings per variant (default 150)")
    ap.add_argument("--wheel", help="a built autotune_guard wheel (default: build one from this checkout)")
    ap.add_argument("--torch-rounds", type=int, default=0,
                    help="also price the inactive finder over `import torch`, in this interpreter (default 0: skip)")
    ap.add_argument("--only-torch", action="store_true", help="only the `import torch` part")
    opts = ap.parse_args()
    if opts.torch_rounds:
        torch_import_cost(opts.torch_rounds)
        if opts.only_torch:
            return 0
        print()

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
        names_of = ("empty", "other", "both", "alone", "no_finder", "at_exit")
        empty, other, both, alone, no_finder, at_exit = (os.path.join(tmp, d) for d in names_of)
        for d in (empty, other, both, alone, no_finder, at_exit):
            os.makedirs(d)
        for d, line in ((no_finder, NO_FINDER_PTH), (at_exit, NAME_AT_EXIT_PTH)):
            with open(os.path.join(d, "autotune_guard.pth"), "w") as dst:
                dst.write(line)
        for d in (other, both):
            with open(os.path.join(d, "other_package.pth"), "w") as dst:
                dst.write(OTHER_PTH)
        with open(os.path.join(site, "autotune_guard.pth")) as src:
            shipped = src.read()
        for d in (both, alone):
            with open(os.path.join(d, "autotune_guard.pth"), "w") as dst:
                dst.write(shipped)
        folders = {"without": (empty, False), "inactive": (site, False), "active": (site, True),
                   "other .pth": (other, False), "other+ours": (both, False), "ours alone": (alone, False),
                   "no finder": (no_finder, False), "name at exit": (at_exit, False)}
        site_us = {n: [] for n in folders}
        keys = list(folders)
        for r in range(opts.site_rounds):
            for name in keys[r % len(keys):] + keys[:r % len(keys)]:
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
    print(f"  {'folder':<12} {'median us':>10} {'quartiles us':>16} {'vs empty':>9}  what")
    what = {"without": "an empty site-packages", "inactive": "ours, no AUTOTUNE_*",
            "active": "ours, AUTOTUNE_MODE=pinned (imports autotune_guard._boot, arms the watcher)",
            "other .pth": "only another package's one-line .pth",
            "other+ours": f"that and ours, inactive: ours adds {smed['other+ours'] - smed['other .pth']:+.0f} us",
            "ours alone": "only our .pth line, inactive",
            "no finder": f"only our line without the inactive finder: the finder adds {smed['ours alone'] - smed['no finder']:+.0f} us",
            "name at exit": f"instead of the finder, a hook naming in-program settings at exit: it adds "
                            f"{smed['name at exit'] - smed['no finder']:+.0f} us"}
    for name in site_us:
        diff = "" if name == "without" else f"{smed[name] - smed['without']:+.0f}"
        print(f"  {name:<12} {smed[name]:>10.0f} {sq[name][0]:>7.0f}-{sq[name][2]:<8.0f} {diff:>9}  {what[name]}")
    ok = all(med[n] - med["without"] <= g for n, g in GOALS_MS.items())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
