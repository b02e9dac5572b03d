"""The writer shell the evidence files and the table growth share (``evidence`` and
``evidence.table_growth`` each keep one, held by the ``Guard``): a background thread that runs
``write()`` shortly after it is woken, at most every ``interval_s``, off the launch path (a launch
only sets an event); the lock whole writes take; whether the final write at exit is done; and what
a forked child renews."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from ..runtime import EXIT_TABLE, current

logger = logging.getLogger("autotune_guard")


class WriterShell:
    """``wake()`` asks for a write; the daemon thread runs ``write()`` once for every burst of
    wake-ups, then sleeps ``interval_s``. A failure is logged as ``failure % exc`` and the thread
    goes on. ``lock`` serializes whole writes: without it the thread could rename an older snapshot
    over the final one written at exit, after which ``final_written`` keeps late writes out. A
    forked child has no thread (its first ``wake()`` starts one) and a fresh lock; a subclass
    renews its own state in ``renew()``."""

    def __init__(self, write: Callable[[], None], *, interval_s: float, thread_name: str, failure: str):
        self.write = write
        self.interval_s = interval_s
        self.thread_name = thread_name
        self.failure = failure
        self.lock = threading.Lock()
        self.final_written = False
        self.dirty = threading.Event()
        self.thread: threading.Thread | None = None

    def wake(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
            self.thread.start()
        self.dirty.set()

    def after_fork(self) -> None:
        """In a forked child (``Guard.held``): the parent's thread does not exist here, its event
        may be in any state, and a lock it held at fork() would stay held forever."""
        self.dirty, self.thread = threading.Event(), None
        self.lock = threading.Lock()
        self.final_written = False
        self.renew()

    def renew(self) -> None:
        """What a subclass renews in a forked child."""

    def _loop(self) -> None:
        dirty = self.dirty
        while True:
            dirty.wait()
            dirty.clear()
            try:
                self.write()
            except Exception as exc:
                logger.warning(self.failure, exc)
            time.sleep(self.interval_s)


def held_growth(name: str, make_shell: Callable, changed: Callable, at_exit: Callable, make: bool = True):
    """A table's growth writer ``name``, held by the Guard: made at first need, told of every new
    choice (``changed``) and given its step of the exit sequence (``at_exit``, after the evidence);
    None where none was made yet and ``make`` is false."""
    guard = current()
    if not make:
        return guard.held_already(name)

    def made():
        guard.subscribe(changed)
        guard.on_exit(at_exit, EXIT_TABLE)
        return make_shell()

    return guard.held(name, made)
