"""How a process ended, for its evidence files: SIGTERM (saved even while the main thread is
blocked in native code), Ctrl-C, an uncaught exception.

A Python signal handler runs only when the main thread returns to Python, which a rank blocked
in a c10d Store wait or in a collective waiting for a dead peer never does.  So the C-level
handler's wakeup byte (``signal.set_wakeup_fd``) is read by a daemon thread that saves the files
at once; where the program left SIGTERM's default effect, that thread then gives the main
thread's handler a second to run and otherwise makes the process die of SIGTERM itself.  A
handler of the program's own, or an ignored SIGTERM, keeps its effect (it runs when the main
thread returns to Python, as without the guard).  A wakeup fd set already (asyncio's) is left in
place: SIGTERM is then saved when the main thread runs Python, as the handler alone does.

This module knows nothing of the files: ``watch(save)`` gives it the function that writes them.
What it keeps is one object the ``Guard`` holds (``_ending()``). It owns the process's one wrapper of
``sys.excepthook`` (``ExceptHook``), which the activation also reports the guard's own errors through.
``sys.exit``, ``sys.excepthook``, the SIGTERM handler and the wakeup fd are changed through the
package's one patching idiom, so ``uninstall()`` puts the program's back.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Callable

from .. import _patching
from ..runtime import current

logger = logging.getLogger("autotune_guard")

HANDLER_GRACE_S = 1.0  # how long the watcher leaves the main thread's handler to run first
# The names the patching idiom keeps the two signal settings under (owner: the signal module).
SIGTERM_HANDLER = "SIGTERM handler"
WAKEUP_FD = "wakeup fd"


class Ending:
    """How the process ended so far, and the machinery that sees it, held by the ``Guard``."""

    def __init__(self):
        self.save: Callable[[str], None] | None = None
        # "SIGTERM" once that signal's save ran, "SIGINT" or "exception" once the main thread ended
        # so: every later write says so too (a program that ignores SIGTERM and runs on stays marked).
        self.ended: str | None = None
        self.exit_asked: str | None = None  # what the main thread's last failing sys.exit asked for, until the exit
        self.handler_ran = threading.Event()
        self.pipe: tuple[int, int] | None = None  # (read end, write end) of the wakeup fd
        self.watcher_pid: int | None = None  # the process whose thread reads the pipe
        self.hook_installed = False  # the excepthook was wrapped (a later replacement is then noticed at exit)

    def after_fork(self) -> None:
        """The wakeup fd is inherited: give the child a pipe of its own at the same descriptor
        numbers (the parent's watcher must never read the child's signals); its watcher starts at
        the child's first choice."""
        self.handler_ran.clear()
        self.ended = self.exit_asked = None
        if self.pipe is None or self.watcher_pid == os.getpid():
            return
        read_end, write_end = os.pipe()
        os.dup2(read_end, self.pipe[0])
        os.dup2(write_end, self.pipe[1])
        os.close(read_end)
        os.close(write_end)
        os.set_blocking(self.pipe[1], False)
        if self.watcher_pid != -1:
            self.watcher_pid = None


def _ending() -> Ending:
    return current().held("evidence.signals", Ending)


def ended() -> str | None:
    """How this process ended, so far: None for not (or a normal exit)."""
    return _ending().ended


def reset() -> None:
    state = _ending()
    state.ended = state.exit_asked = None


def watch(save: Callable[[str], None]) -> None:
    """Save through ``save(ended)`` on SIGTERM (and SIGINT seen while blocked), and note an
    uncaught exception.  Only the main thread may set handlers; elsewhere this does nothing."""
    _ending().save = save
    if threading.current_thread() is not threading.main_thread():
        return
    _chain_sigterm()
    _start_watcher()
    wrap_excepthook()
    _wrap_exit()


def watching() -> bool:
    """Whether SIGTERM is ours and read by this process's watcher (else ``watch`` again)."""
    return signal.getsignal(signal.SIGTERM) is _on_sigterm and _ending().watcher_pid in (os.getpid(), -1)


def _ours_over(owner, name: str, holding, make) -> _patching.Patch:
    """The guard's patch of ``owner``'s ``name``, made again over whatever the program put there
    since (``holding``: what is there now); ``make(previous)`` builds the replacement."""
    found = _patching.patched(owner, name)
    if found is not None and holding is not found.replacement:
        found.forget()  # the program set its own since: ours chains to it, and undo puts it back
        found = None
    return found if found is not None else _patching.patch(owner, name, make(holding))


def _swap_sigterm(handler):
    # None: a handler not set from Python, which cannot be set back from it; the default then
    return signal.signal(signal.SIGTERM, signal.SIG_DFL if handler is None else handler)


def _chain_sigterm() -> None:
    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            return
        found = _patching.patched(signal, SIGTERM_HANDLER)
        if found is not None:
            found.forget()  # the program set a handler of its own since: ours goes over it, chaining to it
        _patching.setting(signal, SIGTERM_HANDLER, _swap_sigterm, _on_sigterm)
    except (ValueError, OSError) as exc:
        logger.debug("cannot save the files on SIGTERM: %s", exc)


def _previous_sigterm():
    """The handler the guard's replaced (SIG_DFL where the guard's is not in force)."""
    found = _patching.patched(signal, SIGTERM_HANDLER)
    return signal.SIG_DFL if found is None else found.original


def _start_watcher() -> None:
    state = _ending()
    running = state.watcher_pid == os.getpid()
    if state.watcher_pid == -1 or (running and _patching.patched(signal, WAKEUP_FD) is not None):
        return  # given up (another wakeup fd is in place), or running with its fd in place
    if state.pipe is None:
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)  # the C handler must never block
        state.pipe = (read_end, write_end)
    try:
        found = _patching.setting(signal, WAKEUP_FD, _swap_wakeup, state.pipe[1])
    except (ValueError, OSError) as exc:
        logger.debug("no wakeup fd (%s): SIGTERM is saved when the main thread runs Python", exc)
        return
    previous = found.original
    if previous not in (-1, state.pipe[1]):
        found.undo()  # the program's (asyncio's): it stays
        state.watcher_pid = -1
        logger.debug("a wakeup fd is set already (fd %d, asyncio's?): SIGTERM is saved when the main thread "
                     "runs Python", previous)
        return
    if running:
        return  # its thread reads the pipe still: only the fd that uninstall() undid is put back
    state.watcher_pid = os.getpid()
    threading.Thread(target=_read_wakeups, args=(state.pipe[0],), name="autotune_guard-signals", daemon=True).start()


def _swap_wakeup(fd: int) -> int:
    return signal.set_wakeup_fd(fd, warn_on_full_buffer=False)


def _read_wakeups(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if signal.SIGTERM in data:
            _sigterm_seen()
        elif signal.SIGINT in data and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            _save_quietly("SIGINT")  # (KeyboardInterrupt, when the main thread gets to it, marks the end)


def _save_quietly(ended: str) -> None:
    try:
        save = _ending().save
        if save is not None:
            save(ended)
    except Exception as exc:
        logger.error("could not write the choices/record files on %s: %s", ended, exc)


def _sigterm_seen() -> None:
    """In the watcher thread, as SIGTERM arrives: save, then let SIGTERM have its effect."""
    if signal.getsignal(signal.SIGTERM) is not _on_sigterm:
        return  # the program took SIGTERM over after the last choice: its handler decides
    state = _ending()
    state.ended = "SIGTERM"
    _save_quietly("SIGTERM")
    if _previous_sigterm() in (signal.SIG_DFL, None) and not state.handler_ran.wait(HANDLER_GRACE_S):
        _die_of_sigterm()


def _on_sigterm(signum, frame):
    """The main thread's handler: save (the interrupted thread may hold a lock the write needs:
    the save waits a little, never forever), then the program's handler or the default effect."""
    state = _ending()
    state.ended = "SIGTERM"
    state.handler_ran.set()
    _save_quietly("SIGTERM")
    previous = _previous_sigterm()
    if callable(previous):
        return previous(signum, frame)
    if previous == signal.SIG_IGN:
        return None
    _die_of_sigterm()


def _die_of_sigterm() -> None:
    """SIGTERM's default effect, from any thread (``signal.signal`` works in the main one only)."""
    try:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        else:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.signal.restype = ctypes.c_void_p
            libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
            libc.signal(signal.SIGTERM, None)  # SIG_DFL
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
        os.kill(os.getpid(), signal.SIGTERM)
    except Exception as exc:  # no libc to call: the exit status torchrun would read for SIGTERM
        logger.debug("cannot restore SIGTERM's default effect: %s", exc)
    os._exit(128 + signal.SIGTERM)


class ExceptHook:
    """The process's one wrapper of ``sys.excepthook``: it notes that the main thread ended on an
    uncaught exception (KeyboardInterrupt: Ctrl-C), then reports it through ``report(previous,
    kind, value, tb)`` where the activation set one (the guard's own errors said short), else
    through the hook that was in place. An exception in another thread (``threading.excepthook``)
    is not an ending."""

    _autotune_guard = True

    def __init__(self, previous):
        self.previous = previous
        self.report: Callable | None = None

    def __call__(self, kind, value, traceback):
        note_uncaught(kind)
        report = self.report
        if report is None:
            return self.previous(kind, value, traceback)
        return report(self.previous, kind, value, traceback)


def wrap_excepthook() -> ExceptHook:
    """The wrapper on ``sys.excepthook``, put there if the hook in place is not it (once, or again
    where the program replaced it since; it chains to the hook that was there)."""
    hook = sys.excepthook
    if not isinstance(hook, ExceptHook):
        hook = _ours_over(sys, "excepthook", hook, ExceptHook).replacement
    _ending().hook_installed = True
    return hook


def _wrap_exit() -> None:
    """``sys.exit`` notes a failing status (a non-zero number, or a message: status 1) before it
    raises ``SystemExit``, which no excepthook sees: the files then say ``ended: "exit 3"`` and
    are not complete. Only the main thread's call ends the process."""
    if not getattr(sys.exit, "_autotune_guard", False):
        _ours_over(sys, "exit", sys.exit, _exit_of)


def _exit_of(original):
    def exit(status=None):
        if threading.current_thread() is threading.main_thread():
            note_exit(status)
        original(status)

    exit._autotune_guard = True
    exit.__wrapped__ = original
    exit.__doc__ = original.__doc__
    return exit


def note_exit(status) -> None:
    """The main thread asks to exit with ``status`` (``sys.exit``'s argument).  Held until the
    exit: a program may catch the ``SystemExit`` (argparse's, say) and carry on."""
    state = _ending()
    if status is None or status == 0 or sys.flags.interactive or hasattr(sys, "ps1"):
        state.exit_asked = None
    elif isinstance(status, int) and not isinstance(status, bool):
        state.exit_asked = f"exit {status}"
    else:  # a message: Python prints it and exits with status 1
        text = " ".join(str(status).split())
        state.exit_asked = f"exit 1: {text[:200]}" if text else "exit 1"


def carried_on() -> None:
    """The main thread went on after a ``sys.exit`` it caught (it made a new choice): not an ending."""
    state = _ending()
    if state.exit_asked is not None and threading.current_thread() is threading.main_thread():
        state.exit_asked = None


def note_uncaught(kind) -> None:
    if sys.flags.interactive or hasattr(sys, "ps1"):
        return  # an interactive session carries on after an error
    state = _ending()
    if state.ended is None:
        state.ended = "SIGINT" if issubclass(kind, KeyboardInterrupt) else "exception"


def note_at_exit() -> None:
    """At exit: a failing ``sys.exit`` asked for last says how it ended; and where the program
    replaced the hook after install, what the interpreter kept of an uncaught exception
    (``sys.last_value``) does."""
    state = _ending()
    if state.ended is None and state.exit_asked is not None:
        state.ended = state.exit_asked
    if state.ended is None and state.hook_installed and not isinstance(sys.excepthook, ExceptHook):
        last = getattr(sys, "last_value", None)
        if isinstance(last, BaseException) and not isinstance(last, SystemExit):
            note_uncaught(type(last))
