"""The process's lifecycle on the Guard (``core.lifecycle``): one exit sequence in a stated order,
one registry of post-import hooks, held objects renewed after fork, one ``sys.excepthook`` wrapper.
In-process and fast: each test makes a ``Lifecycle`` of its own (the process's Guard is untouched)."""

import pytest
import os
import subprocess
import sys
import textwrap

from autotune_guard.core.lifecycle import Lifecycle
from autotune_guard.runtime import EXIT_EVIDENCE, EXIT_SUMMARY, EXIT_TABLE


def test_the_exit_sequence_runs_in_its_order_once_whatever_the_order_of_registration():
    life, ran = Lifecycle(), []
    step = lambda name: (lambda: ran.append(name))  # noqa: E731
    table, evidence, summary, late = step("table"), step("evidence"), step("summary"), step("summary-2")
    for fn, order in ((table, EXIT_TABLE), (evidence, EXIT_EVIDENCE), (summary, EXIT_SUMMARY), (late, EXIT_SUMMARY),
                      (table, EXIT_TABLE)):
        life.on_exit(fn, order)
    life.run_exit()
    life.run_exit()  # a spawn child may get here twice (multiprocessing's finalizer, then atexit)
    assert ran == ["summary", "summary-2", "evidence", "table"]


def test_a_failing_exit_step_is_logged_and_the_next_runs(caplog):
    life, ran = Lifecycle(), []
    life.on_exit(lambda: 1 / 0, EXIT_SUMMARY)
    life.on_exit(lambda: ran.append("evidence"), EXIT_EVIDENCE)
    life.run_exit()
    assert ran == ["evidence"] and "exit step" in caplog.text


def test_a_post_import_hook_waiting_for_its_module_is_registered_once():
    life, registered, called = Lifecycle(), [], []

    def registrar(module, hook):  # wrapt's semantics: at once for a loaded module, else kept
        registered.append(module)
        if module in sys.modules:
            hook(sys.modules[module])

    hook = lambda module: called.append(module.__name__)  # noqa: E731
    life.when_imported("not_imported_anywhere", hook)  # before the registrar: it waits
    assert registered == []
    life.import_registrar(registrar)
    for _ in range(3):  # three installs
        life.when_imported("not_imported_anywhere", hook)
        life.when_imported("os", hook)
    assert registered.count("not_imported_anywhere") == 1
    assert called == ["os"] * 3  # a loaded module's hook runs at each call, as wrapt runs it at once
    life.when_imported("json", hook, once=True)
    life.when_imported("json", hook, once=True)
    assert registered.count("json") == 1


def test_held_objects_are_renewed_in_a_forked_child():
    life = Lifecycle()

    class Kept:
        renewed = 0

        def after_fork(self):
            self.renewed += 1

    kept = life.held("kept", Kept)
    assert life.held("kept", lambda: None) is kept and life.held_already("other") is None
    life.renew_lifecycle()
    assert kept.renewed == 1


@pytest.mark.slow
def test_the_guard_wraps_sys_excepthook_once_for_the_ending_and_the_short_report():
    code = textwrap.dedent("""
        import sys
        from autotune_guard import activation
        from autotune_guard.evidence import signals
        activation.install_excepthook("pinned")
        signals.wrap_excepthook()
        activation.install_excepthook("auto")
        hook = sys.excepthook
        print(type(hook).__name__, type(hook.previous).__name__, hook.report.mode)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["ExceptHook", "builtin_function_or_method", "auto"]
