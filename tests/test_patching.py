"""The patching idiom (``_patching``): patch, undo that refuses to clobber another tool's
wrapper, undo_all, redo, instance shadows; and ``uninstall()`` undoing every patch of a real run
(Triton's own ``Autotuner.run`` back; the program's ``sys.exit``, ``sys.excepthook``, SIGTERM
handler and wakeup fd back), with a later ``install()`` governing again."""

import logging
import textwrap
import types

import pytest

from autotune_guard import _patching

from support import clean_env, last_json, run_python


class Owner:
    def method(self):
        return "own"

    def extra(self):
        return "own extra"


class Child(Owner):
    pass


def _replacement(self):
    return "guard"


def _outer(self):
    return "other tool"


@pytest.fixture
def owner():
    """A fresh class per test (the registry is keyed by the owner's identity). Patches of the
    process that a test's ``undo_all()`` undoes (Triton's, from an earlier test) are put back after."""
    elsewhere = _patching.in_force()
    made = type("Made", (Owner,), {"method": Owner.method})
    yield made
    for name in ("method", "extra"):
        found = _patching.patched(made, name)
        if found is not None:
            setattr(made, name, found.replacement)  # whatever a test put on top goes first
            assert found.undo()
    for found in reversed(elsewhere):
        found.redo()


def test_patch_renames_and_keeps_the_original_once(owner):
    original = owner.method
    found = _patching.patch(owner, "method", _replacement)
    assert owner().method() == "guard" and owner.method.__name__ == "method"
    assert _patching.original(owner, "method") is original and _patching.patched(owner, "method") is found
    assert _patching.patch(owner, "method", _outer) is found  # patching again: the patch in force
    assert owner().method() == "guard" and _patching.is_replacement(_replacement)


def test_undo_puts_the_original_back_and_is_idempotent(owner):
    original = vars(owner)["method"]
    found = _patching.patch(owner, "method", _replacement)
    assert found.undo() is True
    assert vars(owner)["method"] is original and _patching.patched(owner, "method") is None
    assert not _patching.is_replacement(_replacement)
    assert found.undo() is True  # undone already: nothing more to do
    assert _patching.original(owner, "method") is original


def test_undo_of_an_inherited_attribute_removes_it():
    found = _patching.patch(Child, "method", _replacement)
    assert "method" in vars(Child) and not found.had_own
    assert found.undo() is True
    assert "method" not in vars(Child) and Child().method() == "own"


def test_undo_refuses_to_clobber_an_outer_wrapper(owner, caplog):
    found = _patching.patch(owner, "method", _replacement)
    setattr(owner, "method", _outer)  # another tool wraps on top of the guard's replacement
    with caplog.at_level(logging.DEBUG, logger="autotune_guard"):
        assert found.undo() is False
    assert vars(owner)["method"] is _outer  # left in place
    assert _patching.patched(owner, "method") is found and not found.undone  # still in force under it
    assert _patching.original(owner, "method") is Owner.method
    assert any("not undone" in r.getMessage() and "another tool" in r.getMessage() for r in caplog.records)
    setattr(owner, "method", _replacement)  # the other tool removes its wrapper: the undo goes through
    assert found.undo() is True and vars(owner)["method"] is Owner.method


def test_undo_all_newest_first_returns_what_it_could_not_undo(owner):
    first = _patching.patch(owner, "method", _replacement)
    second = _patching.patch(owner, "extra", lambda self: "extra")
    assert _patching.in_force()[:2] == [second, first]  # newest first: the order undo_all undoes them in
    setattr(owner, "method", _outer)
    kept = _patching.undo_all()
    assert first in kept and second not in kept
    assert "extra" not in vars(owner) and owner().extra() == "own extra" and vars(owner)["method"] is _outer
    assert _patching.patched(owner, "method") is first and second.undone


def test_redo_puts_the_same_replacement_back(owner):
    found = _patching.patch(owner, "method", _replacement)
    assert found.undo() and found.redo() is True
    assert owner().method() == "guard" and _patching.patched(owner, "method") is found
    assert found.redo() is True  # in force already


def test_redo_refuses_where_the_attribute_changed_or_was_patched_again(owner):
    found = _patching.patch(owner, "method", _replacement)
    found.undo()
    setattr(owner, "method", _outer)  # changed while undone
    assert found.redo() is False and vars(owner)["method"] is _outer
    setattr(owner, "method", Owner.method)
    again = _patching.patch(owner, "method", _outer)  # its adapter patched it again meanwhile
    assert found.redo() is False and _patching.patched(owner, "method") is again


def test_shadow_on_an_instance_and_its_undo():
    thing = Owner()
    found = _patching.shadow(thing, "method", lambda: "shadow")
    assert thing.method() == "shadow" and _patching.patched(thing, "method") is None  # not kept
    assert found not in _patching.in_force()
    assert found.undo() is True and thing.method() == "own" and "method" not in vars(thing)
    assert found.undo() is True


def test_shadow_over_an_own_value_and_a_refused_undo():
    thing = Owner()
    thing.cache = {"mine": 1}
    mine = thing.cache
    found = _patching.shadow(thing, "cache", {"guard": 1})
    thing.cache = {"other": 1}  # replaced since: not the guard's to undo
    assert found.undo() is False and thing.cache == {"other": 1}
    thing.cache = found.replacement
    assert found.undo() is True and thing.cache is mine


def test_rebind_aliases_follow_undo_and_redo():
    module = types.ModuleType("fake_c10d")
    user = types.ModuleType("fake_user")
    import sys

    def barrier():
        return "barrier"

    module.barrier = user.barrier = barrier
    sys.modules["fake_user"] = user
    try:
        found = _patching.patch(module, "barrier", lambda: "wrapped")
        assert _patching.rebind_aliases("barrier", barrier, found.replacement) >= 1
        assert user.barrier is found.replacement and found.aliased
        assert found.undo() and module.barrier is barrier and user.barrier is barrier
        assert found.redo() and module.barrier is found.replacement and user.barrier is found.replacement
        assert found.undo()
    finally:
        del sys.modules["fake_user"]


# --- uninstall() with real Triton kernels ------------------------------------------------------

_UNINSTALL = textwrap.dedent("""
    import json, torch, triton
    import torch.distributed as dist
    import triton.runtime.autotuner as at
    from torch.distributed import distributed_c10d as c10d
    import autotune_guard
    from autotune_guard import _patching
    from kernels.demo import TIMER_CALLS, add_kernel

    # (not named "barrier": the guard points every module-level alias of that name at its wrapper)
    triton_run, triton_init, own_barrier = at.Autotuner.run, at.Autotuner.__init__, c10d.barrier
    out = {}

    def launch(n):
        x = torch.arange(n, dtype=torch.float32)
        y = torch.ones(n, dtype=torch.float32)
        z = torch.empty_like(x)
        add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, z, n)
        assert torch.equal(z, x + y)

    autotune_guard.install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "first"})
    out["guarded_run"] = at.Autotuner.run is not triton_run
    out["barrier_wrapped"] = c10d.barrier is not own_barrier and dist.barrier is c10d.barrier
    launch(100)
    out["first"] = sorted(autotune_guard.choice_log().values())
    out["timed_pinned"] = len(TIMER_CALLS)

    autotune_guard.uninstall()
    out["own_run"] = at.Autotuner.run is triton_run and at.Autotuner.__init__ is triton_init
    out["own_barrier"] = c10d.barrier is own_barrier and dist.barrier is own_barrier  # its alias pointed back too
    out["in_force"] = [repr(p) for p in _patching.in_force()]
    out["policy"] = autotune_guard.active_policy()
    launch(300)  # Triton's own: timed by the kernel's timer, nothing in the log
    out["uninstalled_log"] = autotune_guard.choice_log()
    out["timed"] = len(TIMER_CALLS)

    autotune_guard.install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "first"})
    out["guarded_again"] = at.Autotuner.run is not triton_run and _patching.is_replacement(at.Autotuner.run)
    out["barrier_again"] = c10d.barrier is not own_barrier and dist.barrier is c10d.barrier
    launch(500)
    out["second"] = sorted(autotune_guard.choice_log().values())
    out["timed_again"] = len(TIMER_CALLS) - out["timed"]
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_uninstall_undoes_every_patch_and_install_governs_again():
    proc = run_python(_UNINSTALL, env=clean_env())
    out = last_json(proc.stdout)
    assert out["guarded_run"] and out["barrier_wrapped"]
    assert out["first"] and all(v.endswith(";fallback (first)") for v in out["first"])
    assert out["own_run"] and out["own_barrier"], out
    assert out["in_force"] == [] and out["policy"] is None
    assert out["timed_pinned"] == 0 and out["uninstalled_log"] == {} and out["timed"] > 0  # Triton timed it
    assert out["guarded_again"] and out["barrier_again"] and out["timed_again"] == 0
    assert out["second"] and all(v.endswith(";fallback (first)") for v in out["second"]), out


_OUTER = textwrap.dedent("""
    import functools, json, torch, triton
    import triton.runtime.autotuner as at
    import autotune_guard
    from autotune_guard import _patching
    from kernels.demo import TIMER_CALLS, add_kernel

    triton_run, triton_init = at.Autotuner.run, at.Autotuner.__init__
    out, seen = {}, []

    def launch(n):
        x = torch.arange(n, dtype=torch.float32)
        z = torch.empty_like(x)
        add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, x, z, n)
        assert torch.equal(z, x + x)

    autotune_guard.install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "first"})
    guards = at.Autotuner.run

    @functools.wraps(guards)
    def profiler(self, *args, **kwargs):  # another tool wraps Autotuner.run after the guard did
        seen.append(1)
        return guards(self, *args, **kwargs)

    at.Autotuner.run = profiler
    autotune_guard.uninstall()
    out["outer_kept"] = at.Autotuner.run is profiler and at.Autotuner.__init__ is triton_init
    out["in_force"] = [repr(p) for p in _patching.in_force()]
    launch(100)  # through the profiler and the guard's run, which passes it to Triton's own
    out["untouched"] = [len(seen), len(TIMER_CALLS), autotune_guard.choice_log()]
    autotune_guard.install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "first"})
    out["init_again"] = at.Autotuner.__init__ is not triton_init
    launch(300)
    out["governed"] = [len(seen), len(TIMER_CALLS), sorted(autotune_guard.choice_log().values())]
    at.Autotuner.run = guards  # the profiler goes: the next uninstall undoes the guard's run too
    autotune_guard.uninstall()
    out["own_again"] = at.Autotuner.run is triton_run and _patching.in_force() == []
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_uninstall_leaves_another_tools_wrapper_and_the_guards_run_under_it():
    out = last_json(run_python(_OUTER, env=clean_env()).stdout)
    assert out["outer_kept"] and out["in_force"] == ["<Patch Autotuner.run>"], out
    assert out["untouched"][0] == 1 and out["untouched"][1] > 0 and out["untouched"][2] == {}  # Triton timed it
    assert out["init_again"]
    seen, timed, log = out["governed"]
    assert seen == 2 and timed == out["untouched"][1] and log and all(v.endswith(";fallback (first)") for v in log)
    assert out["own_again"]


# --- the process's hooks: sys.exit, sys.excepthook, SIGTERM's handler, the wakeup fd -------------

_HOOKS = textwrap.dedent("""
    import json, os, signal, sys, tempfile, torch, triton
    import autotune_guard
    from autotune_guard import _patching
    from kernels.demo import add_kernel

    def programs_handler(signum, frame):
        pass

    signal.signal(signal.SIGTERM, programs_handler)
    own_exit, own_hook = sys.exit, sys.excepthook
    policy = {"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "first",
              "AUTOTUNE_DIGEST_PATH": os.path.join(tempfile.mkdtemp(), "choices")}
    out = {}

    def wakeup_fd():
        fd = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(fd)
        return fd

    def hooks():
        return {"exit": sys.exit is own_exit, "excepthook": sys.excepthook is own_hook,
                "sigterm": signal.getsignal(signal.SIGTERM) is programs_handler, "wakeup": wakeup_fd() == -1}

    def launch(n):
        x = torch.arange(n, dtype=torch.float32)
        z = torch.empty_like(x)
        add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, x, z, n)

    autotune_guard.install(policy)
    launch(100)  # the first choice: the files are wanted, SIGTERM is watched
    out["installed"] = hooks()
    autotune_guard.uninstall()
    out["uninstalled"] = hooks()
    out["in_force"] = [repr(p) for p in _patching.in_force()]
    autotune_guard.install(policy)
    launch(300)
    out["again"] = hooks()
    autotune_guard.uninstall()
    out["twice"] = hooks()
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_uninstall_puts_back_the_programs_exit_excepthook_sigterm_handler_and_wakeup_fd():
    out = last_json(run_python(_HOOKS, env=clean_env()).stdout)
    none_own = {"exit": False, "excepthook": False, "sigterm": False, "wakeup": False}
    all_own = {"exit": True, "excepthook": True, "sigterm": True, "wakeup": True}
    assert out["installed"] == none_own and out["again"] == none_own, out
    assert out["uninstalled"] == all_own and out["twice"] == all_own, out
    assert out["in_force"] == [], out
