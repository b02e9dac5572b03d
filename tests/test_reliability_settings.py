"""Nothing silently ignored, and a newcomer's first errors (issue 20, part C).

Settings the program sets in ``os.environ`` before Triton is imported are honoured, and named
once when set after; a verify cadence that never fired is named at exit (and fails under
``AUTOTUNE_VERIFY_STRICT``); a bad setting is one short message, while a caller that catches the
exception still gets it; errors point at what to do (chaos, no GPU, no numpy); hostile Store
values, special env files and pruning to nothing are named for what they are.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading

import pytest

from support import REPO, TESTS, clean_env, last_json, run_python, torchrun

from autotune_guard.core import consensus
from autotune_guard.deciding import consensus as engine
from autotune_guard.core.envfile import read_env_file
from autotune_guard.core.errors import ConsensusError, PolicyError, SelectionError
from autotune_guard.core.pinned import select
from autotune_guard.core.settings import policy_from_settings

PROGS = os.path.join(TESTS, "progs")
SHORT = "autotune_guard: error: "


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """A fresh venv whose site-packages holds this checkout's ``autotune_guard.pth`` and path lines
    to the live source and to the test environment (torch, triton, wrapt): the shipped start-up
    line, whatever the test environment's own site-packages holds."""
    root = tmp_path_factory.mktemp("shipped")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    python = str(root / "venv" / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(site, "_autotune_guard.pth"), "w") as out:
        out.write(REPO + "\n")
    with open(os.path.join(site, "zz_deps.pth"), "w") as out:
        out.write(sysconfig.get_paths()["purelib"] + "\n")
    with open(os.path.join(REPO, "autotune_guard.pth")) as src, open(os.path.join(site, "autotune_guard.pth"), "w") as out:
        out.write(src.read())
    return python


# --- 1. settings set inside the program ----------------------------------------------------------

@pytest.mark.slow
def test_the_inactive_start_imports_nothing_and_puts_one_name_check_on_meta_path(shipped):
    code = """
import json, sys
finders = [bool(getattr(f, "autotune_guard_late", 0)) for f in sys.meta_path]
import json.decoder, email.parser  # imports that are neither triton nor torch
print(json.dumps({"finders": finders, "ours": sorted(m for m in sys.modules if m.startswith("autotune_guard"))}))
"""
    result = last_json(run_python(code, python=shipped, env=clean_env()).stdout)
    assert result["finders"].count(True) == 1, result  # once, though .pth files run twice
    assert result["ours"] == []


PINNED_IN_PROGRAM = """
import os, sys
os.environ["AUTOTUNE_MODE"] = "pinned"
os.environ["AUTOTUNE_ON_MISS"] = "error"
import torch
from kernels import demo
print("launching", flush=True)
demo.add(torch.randn(300), torch.randn(300))
print("launched", flush=True)
"""


@pytest.mark.slow
def test_settings_set_in_the_program_before_triton_are_honoured(shipped):
    proc = run_python(PINNED_IN_PROGRAM, python=shipped, env=clean_env(), check=False)
    assert "launching" in proc.stdout and "launched" not in proc.stdout, (proc.stdout, proc.stderr)
    assert proc.returncode != 0
    # the refusal, said as one (uncaught.refusal_lines), not as a traceback
    assert "refused: kernel kernels.demo.add_kernel" in proc.stderr and "AUTOTUNE_ON_MISS=error" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_settings_set_in_the_program_before_torch_reach_the_policy(shipped):
    code = """
import json, os
os.environ["AUTOTUNE_MODE"] = "pinned"
os.environ["AUTOTUNE_BLOCK_SIZES"] = "BLOCK=32"
import torch
from kernels import demo
import autotune_guard
demo.add(torch.randn(300), torch.randn(300))
print(json.dumps({"mode": autotune_guard.active_policy().mode, "log": autotune_guard.choice_log()}))
"""
    proc = run_python(code, python=shipped, env=clean_env())
    result = last_json(proc.stdout)
    assert result["mode"] == "pinned"
    assert [v.split(",")[0] for v in result["log"].values()] == ["BLOCK=32"], result["log"]


@pytest.mark.slow
def test_a_lookup_of_triton_before_the_program_sets_its_settings_keeps_them_for_the_import(shipped):
    # transformers and accelerate look Triton up (find_spec) at their import: that is not the import
    lookup = "import importlib.util\nassert importlib.util.find_spec('triton') and importlib.util.find_spec('torch')\n"
    proc = run_python(lookup + PINNED_IN_PROGRAM, python=shipped, env=clean_env(), check=False)
    assert "launching" in proc.stdout and "launched" not in proc.stdout, (proc.stdout, proc.stderr)
    assert "refused: kernel kernels.demo.add_kernel" in proc.stderr and "AUTOTUNE_ON_MISS=error" in proc.stderr, proc.stderr
    assert "after Triton was imported" not in proc.stderr
    # a lookup, then settings, and Triton never imported: no warning naming a cause that did not happen
    quiet = run_python(lookup + "import os\nos.environ['AUTOTUNE_MODE'] = 'pinned'\n", python=shipped, env=clean_env())
    assert quiet.stderr == ""
    # a lookup made while another module is being imported is a lookup too
    nested = run_python(
        "import sys, types, importlib.util, importlib.abc\n"
        "class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        return importlib.util.spec_from_loader(name, self) if name == 'lib_that_looks' else None\n"
        "    def create_module(self, spec): return None\n"
        "    def exec_module(self, module): module.has_triton = importlib.util.find_spec('triton') is not None\n"
        "sys.meta_path.append(Finder())\nimport lib_that_looks\nassert lib_that_looks.has_triton\n"
        + PINNED_IN_PROGRAM, python=shipped, env=clean_env(), check=False)
    assert "refused: kernel kernels.demo.add_kernel" in nested.stderr and "launched" not in nested.stdout, nested.stderr


@pytest.mark.slow
def test_settings_set_after_triton_was_imported_are_named_once(shipped):
    code = """
import os
import triton
os.environ["AUTOTUNE_MODE"] = "pinned"
os.environ["AUTOTUNE_ON_MISS"] = "error"
import torch
print("done")
"""
    proc = run_python(code, python=shipped, env=clean_env())
    named = [line for line in proc.stderr.splitlines() if "after Triton was imported" in line]
    assert len(named) == 1, proc.stderr
    assert "AUTOTUNE_MODE" in named[0] and "AUTOTUNE_ON_MISS" in named[0] and "no effect" in named[0]
    # Nothing set: nothing said.
    quiet = run_python("import triton, torch", python=shipped, env=clean_env())
    assert quiet.stderr == ""


# --- 2. a verify cadence that never fired ---------------------------------------------------------

NEVER = "AUTOTUNE_VERIFY_EVERY=5 but no check ran: the program called torch.distributed.barrier 2 times"


@pytest.mark.slow
@pytest.mark.parametrize("strict", [False, True])
def test_a_cadence_that_never_fired_is_named_at_exit(strict):
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_CHAOS=1, AUTOTUNE_VERIFY_EVERY=5,
                    **({"AUTOTUNE_VERIFY_STRICT": 1} if strict else {}))
    proc = torchrun(os.path.join(PROGS, "allreduce_only.py"), 2, env=env, args=("3", "2"), check=False)
    assert re.findall(r"DONE rank (\d)", proc.stdout) and len(re.findall(r"DONE rank", proc.stdout)) == 2, proc.stdout
    lines = [line for line in proc.stderr.splitlines() if NEVER in line]
    if strict:  # every rank says it and fails, whichever torchrun reports first
        assert proc.returncode != 0
        assert sorted(line.split("]")[0] for line in lines) == ["autotune_guard[rank 0", "autotune_guard[rank 1"]
        assert all("ERROR" in line and "exit status 1" in line for line in lines), lines
    else:  # rank 0 says it for the job: every rank counts the same barriers
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert len(lines) == 1 and lines[0].startswith("autotune_guard[rank 0] WARNING"), proc.stderr[-3000:]
        assert "maybe_verify_choices" in lines[0]


@pytest.mark.slow
def test_a_cadence_that_fired_says_nothing_at_exit():
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_VERIFY_EVERY=2, AUTOTUNE_VERIFY_STRICT=1)
    proc = torchrun(os.path.join(PROGS, "allreduce_only.py"), 2, env=env, args=("2", "2"))
    assert "no check ran" not in proc.stderr


# --- 3. a bad setting: one short message ----------------------------------------------------------

@pytest.mark.slow
def test_a_bad_setting_is_one_short_message_and_a_caller_still_catches_it():
    proc = run_python("import triton", env=clean_env(AUTOTUNE_MODE="pined"), check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) <= 3 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(SHORT) and "AUTOTUNE_MODE='pined'" in lines[0]
    assert "allowed: auto, pinned, record, consensus" in lines[0] and "did you mean AUTOTUNE_MODE=pinned" in lines[0]
    caught = run_python("""
import json
try:
    import triton
except ImportError as exc:
    print(json.dumps(["ImportError", str(exc)]))
except Exception as exc:
    import autotune_guard
    print(json.dumps([type(exc).__name__, isinstance(exc, autotune_guard.GuardError), str(exc)]))
""", env=clean_env(AUTOTUNE_MODE="pined"))
    assert last_json(caught.stdout)[:2] == ["PolicyError", True] and caught.stderr == ""
    full = run_python("import triton", env=clean_env(AUTOTUNE_MODE="pined", AUTOTUNE_TRACEBACK=1), check=False)
    assert "Traceback" in full.stderr and "PolicyError: AUTOTUNE_MODE='pined'" in full.stderr


@pytest.mark.slow
def test_a_bad_setting_under_torchrun_shows_no_worker_traceback(tmp_path):
    script = tmp_path / "imports_triton.py"
    script.write_text("import torch.distributed\nimport triton\n")
    proc = torchrun(str(script), 2, env=clean_env(AUTOTUNE_MODE="pined"), check=False)
    assert proc.returncode != 0
    # Each worker that got to print says it in one line; torchrun may stop the second first.
    assert 1 <= proc.stderr.count(SHORT + "AUTOTUNE_MODE='pined'") <= 2, proc.stderr
    # torchrun's own failure summary remains; no frame of the worker's import is shown.
    assert "activation.py" not in proc.stderr and "wrapt/importer.py" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_an_uncaught_error_of_the_program_keeps_its_traceback():
    proc = run_python("import triton\nraise KeyError('the program')", env=clean_env(AUTOTUNE_MODE="pinned"),
                      check=False)
    assert "Traceback" in proc.stderr and "KeyError: 'the program'" in proc.stderr
    assert SHORT not in proc.stderr


# --- 4. errors that say what to do next -----------------------------------------------------------

def test_mode_chaos_points_at_the_chaos_switch():
    with pytest.raises(PolicyError, match=r"AUTOTUNE_MODE='chaos' is not a mode.*AUTOTUNE_MODE=pinned AUTOTUNE_CHAOS=1"):
        policy_from_settings({"AUTOTUNE_MODE": "chaos"})


NO_TIMER_KERNEL = '''
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"])
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''


@pytest.mark.slow
def test_a_timing_mode_without_a_gpu_says_what_works(tmp_path):
    (tmp_path / "no_timer.py").write_text(NO_TIMER_KERNEL)
    code = """
import torch
import no_timer
x = torch.randn(100)
no_timer.copy_kernel[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, torch.empty_like(x), 100)
"""
    code = "import triton\n" + code
    env = clean_env(AUTOTUNE_MODE="auto", PYTHONPATH=f"{tmp_path}{os.pathsep}{TESTS}")
    run_python(code, env=env)  # under the interpreter the wall clock times (issue 58; test_cpu_timer.py)
    proc = run_python(code, env={k: v for k, v in env.items() if k != "TRITON_INTERPRET"}, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    hint = [line for line in proc.stderr.splitlines() if line.startswith("autotune_guard: error: Triton found no GPU")]
    assert len(hint) == 1 and "TRITON_INTERPRET=1" in proc.stderr and "AUTOTUNE_MODE=pinned" in proc.stderr
    pinned = run_python(code, env={**env, "AUTOTUNE_MODE": "pinned"})  # pinned needs no GPU and no timer
    assert "active drivers" not in pinned.stderr


@pytest.mark.slow
def test_the_interpreter_without_numpy_is_named_once_at_activation():
    code = "import sys\nsys.modules['numpy'] = None  # numpy cannot be imported\nimport triton\nprint('imported')"
    proc = run_python(code, env=clean_env(AUTOTUNE_MODE="pinned"), check=False)
    named = [line for line in proc.stderr.splitlines() if "needs numpy" in line]
    assert len(named) == 1 and "pip install numpy" in named[0], proc.stderr
    # Triton's own import then fails on numpy (3.9 decorates its library with the interpreter):
    # the guard's line comes first.
    if "Traceback" in proc.stderr:
        assert proc.stderr.index("needs numpy") < proc.stderr.index("Traceback")
    with_numpy = run_python("import triton", env=clean_env(AUTOTUNE_MODE="pinned"))
    assert "numpy" not in with_numpy.stderr


# --- 5. hostile Store values, special env files, pruning to nothing -------------------------------

class DictStore:
    """A c10d Store's calls over a dict, for the reading side's pure logic."""

    def __init__(self, values):
        self.values = dict(values)

    def compare_set(self, key, expected, desired):
        if self.values.get(key, "") == expected:
            self.values[key] = desired
        return self.values[key]

    def add(self, key, amount):
        self.values[key] = int(self.values.get(key, 0)) + amount
        return self.values[key]

    def check(self, keys):
        return all(k in self.values for k in keys)

    def get(self, key):
        return self.values[key]

    def wait(self, keys, timeout=None):
        if not self.check(keys):
            raise RuntimeError("wait timeout after 0ms")


SIGS = ["BLOCK=16", "BLOCK=32"]
GOOD = json.loads(consensus.encode_winner(0, "BLOCK=32", SIGS))


@pytest.mark.parametrize("value, named", [
    ("{not json", "cannot read"),
    (json.dumps({**GOOD, "winner": ["BLOCK=32"]}), "'winner' is list"),
    (json.dumps({**GOOD, "rank": 1.5}), "'rank' is float"),
    (json.dumps({**GOOD, "winner": None, "died": "soon"}), "'winner' is NoneType"),
    (json.dumps({"format": GOOD["format"], "rank": 0, "claimer": "0:1:h", "died": "soon"}), "'died' is str"),
    ('{"format": %s, "rank": 0, "died": 1e999}' % json.dumps(GOOD["format"]), "'died' is float inf"),
    (json.dumps({"format": GOOD["format"], "rank": 0}), "no winner, error or death notice"),
    (b"\xff\xfe", "cannot read"),
])
def test_a_hostile_store_value_is_a_consensus_error_naming_the_key(value, named):
    name = consensus.decision_name("interp", "k.kernel", "(8,)")
    key = f"{consensus.STORE_PREFIX}{consensus.attempt_scope(os.environ)}/{name}"
    store = DictStore({key + "/claim": "someone-else", key + "/result": value})
    with pytest.raises(ConsensusError) as err:
        engine.decide(store, "kernel k.kernel key (8,)", name, 1, SIGS, lambda: None, timeout=5)
    assert key + "/result" in str(err.value) and named in str(err.value), str(err.value)


@pytest.mark.parametrize("candidates", ["[not json", "12", json.dumps([1, 2])])
def test_a_hostile_candidate_list_is_a_consensus_error_naming_the_key(candidates):
    name = consensus.decision_name("interp", "k.kernel", "(8,)")
    key = f"{consensus.STORE_PREFIX}{consensus.attempt_scope(os.environ)}/{name}"
    theirs = json.dumps({**GOOD, "candidates_hash": "other"})
    store = DictStore({key + "/claim": "someone-else", key + "/result": theirs, key + "/candidates": candidates})
    with pytest.raises(ConsensusError, match=re.escape(key + "/candidates")):
        engine.decide(store, "kernel k.kernel key (8,)", name, 1, SIGS, lambda: None, timeout=5)


def test_an_env_file_that_is_a_directory_or_a_fifo_is_named_and_never_waited_on(tmp_path):
    with pytest.raises(PolicyError, match="is a directory, not a file"):
        read_env_file(str(tmp_path))
    fifo = tmp_path / "settings.fifo"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_raises(read_env_file, str(fifo))), daemon=True)
    reader.start()
    reader.join(10)
    assert outcome and "is a named pipe (FIFO), not a file" in outcome[0], outcome  # no writer: would block
    with pytest.raises(PolicyError, match="no such file"):
        read_env_file(str(tmp_path / "absent.env"))


@pytest.mark.slow
def test_an_env_file_that_is_a_fifo_fails_the_import_of_triton_at_once(tmp_path):
    fifo = tmp_path / "job.env"
    os.mkfifo(fifo)
    proc = run_python("import triton", env=clean_env(AUTOTUNE_ENV_FILE=str(fifo)), check=False, timeout=60)
    assert proc.returncode == 1 and "is a named pipe (FIFO)" in proc.stderr, proc.stderr


NOBODY = 65534


def _written_by_nobody(path, text: str, mode: int) -> None:
    """``path`` created by the user nobody (a second real user), with ``mode``, in a forked child."""
    child = os.fork()
    if child == 0:
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.umask(0)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "w") as out:
                out.write(text)
            os._exit(0)
        except BaseException as exc:
            os.write(2, f"as nobody: {exc!r}\n".encode())
            os._exit(1)
    assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to act as a second user")
def test_an_env_file_of_another_user_is_refused_when_others_can_write_it_and_else_named():
    # right under the system's temporary folder: pytest's own is set back to 0700 by any pytest that starts
    base = tempfile.mkdtemp(prefix="autotune-guard-envfile-")
    os.chmod(base, 0o711)
    shared = pathlib.Path(base) / "shared"  # a folder every user can write, as /tmp is (1777)
    shared.mkdir()
    shared.chmod(0o1777)
    try:
        _env_files_in(shared)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _env_files_in(shared) -> None:
    show = "import json, triton, autotune_guard\nprint(json.dumps(autotune_guard.active_policy().mode))"
    planted = shared / "planted.env"
    _written_by_nobody(planted, "AUTOTUNE_MODE=pinned\n", 0o666)
    refused = run_python(show, env=clean_env(AUTOTUNE_ENV_FILE=str(planted)), check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert f"AUTOTUNE_ENV_FILE={str(planted)!r} is a file of nobody (uid {NOBODY}) that every user can write " \
           "(mode -rw-rw-rw-)" in refused.stderr and "refused" in refused.stderr, refused.stderr
    theirs = shared / "theirs.env"
    _written_by_nobody(theirs, "AUTOTUNE_MODE=pinned\n", 0o644)
    applied = run_python(show, env=clean_env(AUTOTUNE_ENV_FILE=str(theirs)))
    assert last_json(applied.stdout) == "pinned"
    named = [line for line in applied.stderr.splitlines() if "is a file of nobody" in line]
    assert len(named) == 1 and "WARNING" in named[0] and str(theirs) in named[0], applied.stderr
    mine = shared / "mine.env"
    mine.write_text("AUTOTUNE_MODE=pinned\n")
    mine.chmod(0o666)  # the running user's own file: theirs to keep as they like
    own = run_python(show, env=clean_env(AUTOTUNE_ENV_FILE=str(mine)))
    assert last_json(own.stdout) == "pinned" and "is a file of" not in own.stderr, own.stderr


def _raises(call, *args):
    try:
        call(*args)
    except PolicyError as exc:
        return str(exc)
    return "no error"


@pytest.mark.parametrize("on_miss", ["error", "min_cost", "first"])
def test_pruning_to_nothing_names_the_kernels_own_pruning(on_miss):
    with pytest.raises(SelectionError, match="own pruning .*left no candidate"):
        select([], table_entry=None, block_sizes=(), on_miss=on_miss, defaults={}, what="kernel k key (8,)")


PRUNED_TO_NOTHING = """
import torch
from kernels import pruned
out = pruned.copy(torch.arange(300.0))
assert torch.equal(out, torch.arange(300.0))
print("small shape ran", flush=True)
pruned.copy(torch.arange(3000.0))
print("large shape ran", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("on_miss", ["error", "min_cost"])
def test_a_real_kernel_pruned_to_nothing_names_its_own_pruning(on_miss):
    proc = run_python(PRUNED_TO_NOTHING, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS=on_miss,
                                                        AUTOTUNE_BLOCK_SIZES="BLOCK=32"), check=False)
    assert "small shape ran" in proc.stdout and "large shape ran" not in proc.stdout, (proc.stdout, proc.stderr)
    assert proc.returncode != 0
    # Triton 3.9 refuses an empty pruning itself, before the guard chooses; older releases hand
    # the guard no candidate, and the guard names the kernel's own pruning.
    by_guard = "kernels.pruned.copy_kernel" in proc.stderr and "own pruning" in proc.stderr
    by_triton = "No valid autotuner configs after pruning" in proc.stderr
    assert by_guard or by_triton, proc.stderr
    assert "no table entry" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_retried_import_after_a_bad_setting_fails_again_never_unguarded():
    code = """
for attempt in (1, 2):
    try:
        import triton
    except Exception as exc:
        print(attempt, "refused:", type(exc).__name__, flush=True)
    else:
        print(attempt, "imported", flush=True)
"""
    proc = run_python(code, env=clean_env(AUTOTUNE_MODE="pinnned"))
    assert proc.stdout.splitlines() == ["1 refused: PolicyError", "2 refused: PolicyError"], (proc.stdout, proc.stderr)
