"""Zero-code activation: the ``.pth`` at interpreter start, the post-import hook, and the package
installed into fresh virtual environments (wheel, ``pip install .``, ``pip install -e .``).

Everything here runs in cold interpreters, because start-up is what is under test.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

import pytest

from support import REPO, TESTS, clean_env, last_json, rank_file, run_python, torchrun

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)

# What a cold interpreter has loaded of the guard and its heavy dependencies.
LOADED = "sorted(m for m in sys.modules if m.split('.')[0] in ('autotune_guard', 'wrapt', 'dotenv'))"

PROBE = f"""
import json, sys
loaded_at_start = {LOADED}
watchers = sum(type(f).__name__ == "ImportWatch" for f in sys.meta_path)
import triton
from triton.runtime.autotuner import Autotuner
info = {{"loaded_at_start": loaded_at_start, "watchers": watchers, "venv": sys.prefix != sys.base_prefix,
        "patched": getattr(Autotuner.run, "_autotune_guard", False), "loaded_after": {LOADED}}}
if "autotune_guard.adapters.triton" in sys.modules:
    from autotune_guard import active_policy
    info["mode"] = active_policy().mode
print(json.dumps(info))
"""


def installs(stderr: str) -> int:
    """How many times a policy was installed (one debug line each, AUTOTUNE_LOG_LEVEL=debug)."""
    return sum("installed policy:" in line for line in stderr.splitlines())


def test_inactive_start_imports_nothing_of_the_guard():
    result = last_json(run_python(PROBE, env=clean_env()).stdout)
    assert result["loaded_at_start"] == [] and result["watchers"] == 0
    # At Triton's import the .pth's name-check finder looks for AUTOTUNE_* set in the program since
    # start-up (three small modules); with none, nothing is patched and no dependency is loaded.
    assert result["patched"] is False
    assert set(result["loaded_after"]) <= {"autotune_guard", "autotune_guard._boot", "autotune_guard._watch"}, result


def test_active_start_defers_wrapt_and_dotenv_until_triton(tmp_path):
    env_file = tmp_path / "job.env"
    env_file.write_text("AUTOTUNE_ON_MISS=first\n")
    proc = run_python(PROBE, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_ENV_FILE=str(env_file),
                                           AUTOTUNE_LOG_LEVEL="debug"))
    result = last_json(proc.stdout)
    # Only the tiny start-up module; one watcher although a venv runs every .pth twice.
    assert result["loaded_at_start"] == ["autotune_guard", "autotune_guard._boot", "autotune_guard._watch"]
    assert result["watchers"] == 1 and result["venv"] is True
    assert result["patched"] is True and result["mode"] == "pinned"
    assert "wrapt" in result["loaded_after"] and "dotenv" in result["loaded_after"]
    assert installs(proc.stderr) == 1


def test_disable_turns_everything_off():
    env = clean_env(AUTOTUNE_DISABLE="1", AUTOTUNE_MODE="pined")  # disabled: even a bad value is not read
    result = last_json(run_python(PROBE, env=env).stdout)
    assert result["watchers"] == 0 and result["patched"] is False
    assert not any(m in result["loaded_after"] for m in ("wrapt", "dotenv", "autotune_guard.adapters.triton"))


PROBE_RUN = PROBE + """
import torch
from kernels import demo
x = torch.randn(300)
assert torch.equal(demo.add(x, x), x + x)
print(json.dumps({"timer_calls": len(demo.TIMER_CALLS), "pid": __import__("os").getpid()}))
"""


def test_the_hook_fires_once_with_torch_first_in_subprocesses_and_python_m(tmp_path):
    (tmp_path / "agprobe.py").write_text(PROBE_RUN)
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_LOG_LEVEL="debug",
                    PYTHONPATH=os.pathsep.join([str(tmp_path), TESTS]))
    parent = """
import json, subprocess, sys
import torch  # torch first: the watcher fires on it, Triton comes later
child = subprocess.run([sys.executable, "-m", "agprobe"], capture_output=True, text=True)  # inherits the env
sys.stderr.write(child.stderr)
print(child.stdout.strip().splitlines()[0])
print(child.stdout.strip().splitlines()[1])
import triton
from triton.runtime.autotuner import Autotuner
print(json.dumps({"parent_patched": getattr(Autotuner.run, "_autotune_guard", False)}))
"""
    proc = run_python(parent, env=env, cwd=tmp_path)
    lines = [json.loads(line) for line in proc.stdout.strip().splitlines()[-3:]]
    child_probe, child_launch, parent_result = lines
    assert child_probe["patched"] and child_probe["mode"] == "pinned" and child_launch["timer_calls"] == 0
    assert parent_result == {"parent_patched": True}
    assert installs(proc.stderr) == 2  # once in the child, once in the parent


TORCHRUN_SCRIPT = """
import json, os
import torch, torch.distributed as dist
dist.init_process_group("gloo")
import autotune_guard
from triton.runtime.autotuner import Autotuner
from kernels import demo
torch.manual_seed(0)
for n in (100, 250, 1000):
    x = torch.randn(n)
    assert torch.equal(demo.add(x, x), x + x)
mine = {"rank": dist.get_rank(), "patched": getattr(Autotuner.run, "_autotune_guard", False),
        "timer_calls": len(demo.TIMER_CALLS), "digest": autotune_guard.choice_digest(), "pid": os.getpid()}
everyone = [None] * dist.get_world_size()
dist.all_gather_object(everyone, mine)
if dist.get_rank() == 0:
    print("RESULT " + json.dumps(everyone), flush=True)
dist.destroy_process_group()
"""


def test_every_torchrun_worker_is_guarded(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TORCHRUN_SCRIPT)
    prefix = tmp_path / "choices"
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_DIGEST_PATH=str(prefix), AUTOTUNE_LOG_LEVEL="debug")
    proc = torchrun(str(script), 2, env=env)
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    ranks = json.loads(line[len("RESULT "):])
    assert [r["rank"] for r in ranks] == [0, 1] and len({r["pid"] for r in ranks}) == 2
    assert all(r["patched"] and r["timer_calls"] == 0 for r in ranks)
    assert ranks[0]["digest"] == ranks[1]["digest"]
    files = {rank: json.loads(open(rank_file(tmp_path / "choices", rank)).read()) for rank in (0, 1)}
    assert [files[r]["digest"] for r in (0, 1)] == [ranks[0]["digest"]] * 2
    assert len(files[0]["log"]) == 3
    assert installs(proc.stdout + proc.stderr) == 2  # once per worker (the launcher never imports Triton)


INSTALL_API = """
import json, sys
import autotune_guard as ag
r = {"initial": ag.active_policy()}
p = ag.install({"AUTOTUNE_MODE": "pinned"})  # before Triton is imported: carried out at its import
r["triton_before"] = "triton" in sys.modules
import torch
from triton.runtime.autotuner import Autotuner
from kernels import demo
r["patched"], r["same"] = getattr(Autotuner.run, "_autotune_guard", False), ag.active_policy() is p
demo.add(torch.randn(256), torch.randn(256))
r["calls_pinned"] = len(demo.TIMER_CALLS)
r["errors"] = []
for bad in ({"AUTOTUNE_MODE": "pined"}, {"AUTOTUNE_MDOE": "pinned"}, {"mode": "auto", "digest_path": "/proc/autotune-guard/x"}):
    try:
        ag.install(bad)
        r["errors"].append(None)
    except Exception as exc:
        r["errors"].append(type(exc).__name__ + ("/PermissionError" if isinstance(exc, PermissionError) else ""))
r["kept"] = ag.active_policy() is p
demo.add(torch.randn(300), torch.randn(300))  # a new key, still pinned
r["calls_after_bad"] = len(demo.TIMER_CALLS)
q = ag.install(deterministic=True)  # the environment (nothing set) plus a determinism request
r["deterministic"] = [q.mode, ag.active_policy() is q]
r["instance"] = ag.install(ag.AutotunePolicy(mode="pinned", on_miss="first")).on_miss == ag.active_policy().on_miss
ag.install({"mode": "auto"})
demo.add(torch.randn(400), torch.randn(400))
r["calls_auto"] = len(demo.TIMER_CALLS)
r["log"] = ag.choice_log()
print(json.dumps(r))
"""


def test_install_api_before_triton_bad_mappings_and_deterministic():
    result = last_json(run_python(INSTALL_API, env=clean_env()).stdout)
    assert result["initial"] is None and result["triton_before"] is False
    assert result["patched"] is True and result["same"] is True and result["calls_pinned"] == 0
    # an unusable path is a PolicyError (it names the setting) that is also the PermissionError it was
    assert result["errors"] == ["PolicyError", "PolicyError", "OutputPathError/PermissionError"]
    assert result["kept"] is True and result["calls_after_bad"] == 0  # the previous policy stayed
    assert result["deterministic"] == ["pinned", True] and result["instance"] is True
    assert result["calls_auto"] == 8  # auto: Triton times again
    # A new policy starts a new log: only the auto choice, observed as timed.
    assert list(result["log"].values())[0].endswith(";timed") and len(result["log"]) == 1


# --- the package in fresh virtual environments -------------------------------------------------

def _copy_repo(dest):
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".pytest_cache",
                                                               ".venv*", "dist", "build", "*.egg-info"))
    return dest


def _fresh_venv(path):
    """A venv without pip whose only link to the dev environment is a plain path line (which
    does not run that directory's .pth files): torch, triton and wrapt come from there."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(site, "zz_deps.pth"), "w") as out:
        out.write(sysconfig.get_paths()["purelib"] + "\n")
    return python, site


def _pip(python, *args, cwd=None):
    # --ignore-installed: the fresh venv sees the test environment's site-packages through its
    # path line, and where the package is installed there (CI) pip would call it satisfied.
    if args[0] == "install":
        args = ("install", "--ignore-installed", *args[1:])
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
    return proc


FRESH_RUN = PROBE_RUN + """
import autotune_guard
print(json.dumps({"package": autotune_guard.__file__, "log": autotune_guard.choice_log()}))
"""


def _install_and_run(tmp_path, how):
    root = tmp_path / how
    root.mkdir()
    source = _copy_repo(root / "src")
    python, site = _fresh_venv(root / "venv")
    if how == "wheel":
        wheels = root / "wheels"
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                        str(source)], check=True, capture_output=True, timeout=300)
        (wheel,) = wheels.glob("autotune_guard-*.whl")
        _pip(python, "install", "--no-deps", "--no-index", str(wheel))
    elif how == "regular":
        _pip(python, "install", "--no-deps", "--no-index", "--no-build-isolation", ".", cwd=source)
    else:
        _pip(python, "install", "--no-deps", "--no-index", "--no-build-isolation", "-e", ".", cwd=source)
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_LOG_LEVEL="debug")
    proc = run_python(FRESH_RUN, python=str(python), env=env, cwd=root)  # cwd: not the repository
    inactive = run_python(PROBE, python=str(python), env=clean_env(), cwd=root)
    return {"root": root, "source": source, "python": python, "site": site, "proc": proc,
            "inactive": last_json(inactive.stdout)}


def test_installed_into_fresh_venvs_the_pth_runs(tmp_path):
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = dict(zip(("wheel", "regular", "editable"),
                        pool.map(lambda how: _install_and_run(tmp_path, how), ("wheel", "regular", "editable"))))
    shipped = open(os.path.join(REPO, "autotune_guard.pth")).read()
    for how, r in done.items():
        site, proc = r["site"], r["proc"]
        # At the root of site-packages, exactly as shipped, sorting after any editable path file.
        pth_files = sorted(name for name in os.listdir(site) if name.endswith(".pth"))
        assert open(os.path.join(site, "autotune_guard.pth")).read() == shipped, how
        path_files = [name for name in pth_files if name not in ("autotune_guard.pth", "zz_deps.pth")]
        assert bool(path_files) == (how == "editable"), (how, pth_files)  # the editable install's path file
        assert all(name < "autotune_guard.pth" for name in path_files), (how, pth_files)
        lines = [json.loads(line) for line in proc.stdout.strip().splitlines()[-3:]]
        probe, launched, package = lines
        assert probe["loaded_at_start"] == ["autotune_guard", "autotune_guard._boot", "autotune_guard._watch"] and probe["watchers"] == 1, how
        assert probe["venv"] is True, how
        assert probe["patched"] and probe["mode"] == "pinned" and launched["timer_calls"] == 0, how
        assert installs(proc.stderr) == 1, how
        assert package["log"] and all(v.endswith(";fallback (min_cost)") for v in package["log"].values())  # no table
        where = str(r["source"]) if how == "editable" else site
        assert package["package"].startswith(where + os.sep), (how, package["package"])
        assert r["inactive"]["loaded_at_start"] == [] and r["inactive"]["patched"] is False, how
    # Uninstalling removes the .pth; an active start then is a plain start.
    wheel = done["wheel"]
    _pip(wheel["python"], "uninstall", "-y", "autotune-guard")
    assert not os.path.exists(os.path.join(wheel["site"], "autotune_guard.pth"))
    proc = run_python("import sys; print(sorted(m for m in sys.modules if 'autotune' in m))",
                      python=str(wheel["python"]), env=clean_env(AUTOTUNE_MODE="pinned"), cwd=wheel["root"])
    assert proc.stdout.strip() == "[]" and proc.stderr == ""


NEWER_TRITON = r"""
import json
import triton
from kernels import demo
import autotune_guard, torch
from autotune_guard.adapters import triton as triton_adapter

# The release under test made newer than the newest tested one by lowering the latter (faking
# triton.__version__ instead would also change which of Triton's seams the guard uses).
triton_adapter.NEWEST_TESTED_TRITON = (3, 2)
autotune_guard.install({"AUTOTUNE_MODE": "pinned"})
autotune_guard.install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "first"})  # a second install: no second warning
x = torch.ones(100)
print(json.dumps({"sum": float(demo.add(x, x).sum()), "timer_calls": len(demo.TIMER_CALLS),
                  "log": autotune_guard.choice_log(), "triton": triton.__version__}))
"""


def test_a_triton_newer_than_the_newest_tested_warns_once_and_is_still_guarded():
    proc = run_python(NEWER_TRITON)
    warnings = [line for line in proc.stderr.splitlines() if "newer than" in line]
    result = last_json(proc.stdout)
    assert len(warnings) == 1, proc.stderr
    assert f"Triton {result['triton']} is newer than 3.2," in warnings[0], warnings
    assert result["sum"] == 200.0 and result["timer_calls"] == 0
    assert list(result["log"].values()) and all(v.endswith(";fallback (first)") for v in result["log"].values())
    # The release under test is not newer than the newest tested: no warning.
    current = run_python(NEWER_TRITON.replace("triton_adapter.NEWEST_TESTED_TRITON = (3, 2)", "pass"))
    assert "newer than" not in current.stderr, current.stderr
