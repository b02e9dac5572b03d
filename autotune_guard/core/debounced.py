"""A background writer that runs ``write()`` shortly after it is woken, at most every
``interval_s``: the evidence files and the table directory are kept current this way, off the
launch path (a launch only sets an event)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

logger = logging.getLogger("autotune_guard")


class DebouncedWriter:
    """``wake()`` asks for a write; the daemon thread runs ``write()`` once for every burst of
    wake-ups, then sleeps ``interval_s``.  A failure is logged as ``failure % exc`` and the
    thread goes on.  A forked child has no thread: its first ``wake()`` starts one."""

    def __init__(self, write: Callable[[], None], *, interval_s: float, thread_name: str, failure: str):
        self.write = write
        self.interval_s = interval_s
        self.thread_name = thread_name
        self.failure = failure
        self.dirty = threading.Event()
        self.thread: threading.Thread | None = None

    def wake(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
            self.thread.start()
        self.dirty.set()

    def after_fork_in_child(self) -> None:
        """The parent's thread does not exist in a child; its event may be in any state."""
        self.dirty, self.thread = threading.Event(), None

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
