"""The process's lifecycle, one mechanism each, for the runtime's ``Guard`` (its base class):

- ``held(name, factory)``: the process's one object per name (an adapter's registry, a writer's
  state), made at first need;
- ``after_fork()``: the one renewal in a forked child (the runtime registers it with
  ``os.register_at_fork``): every held object's ``after_fork()``;
- ``on_exit(fn, order)``: the one exit sequence, run in ``order`` (the runtime's ``EXIT_*``) by one
  atexit handler, and by one multiprocessing finalizer in its forked children;
- ``when_imported(module, fn)``: the one registry of post-import hooks, handed to the registrar
  the activation provides (wrapt's, which the core does not import); a pair waiting for its
  module is registered once.

Standard library only, as the rest of the core; nothing here runs at import.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

logger = logging.getLogger("autotune_guard")


class Lifecycle:
    """See the module docstring. Its own reentrant lock: a held object's factory may register an
    exit step while ``held`` holds it."""

    def __init__(self):
        self._life_lock = threading.RLock()
        self._held: dict[str, object] = {}  # name -> an adapter's registry or a writer's state (``held``)
        self._exits: list[tuple[int, int, Callable]] = []  # (order, arrival, fn): the exit sequence
        self._exited = False  # the sequence ran in this process (a spawn child may reach it twice)
        self._imports: dict[tuple[str, Callable], str] = {}  # (module, fn) -> _WAITING, _HANDED or _FIRED
        self._registrar: Callable | None = None  # registrar(module, fn): wrapt's post-import hook

    # --- held objects ------------------------------------------------------------------------------

    def held(self, name: str, factory: Callable):
        """The process's one object ``name`` (an adapter's registry, a writer's state), made by
        ``factory()`` at first need. After a fork its ``after_fork()`` runs, when it has one."""
        found = self._held.get(name)
        if found is None:
            with self._life_lock:
                found = self._held.get(name)
                if found is None:
                    found = self._held[name] = factory()
        return found

    def held_already(self, name: str):
        """The object ``name`` if it was made, else None (makes nothing)."""
        return self._held.get(name)

    # --- forks -------------------------------------------------------------------------------------

    def renew_lifecycle(self) -> None:
        """In a forked child: a fresh lock (another thread may have held it at fork), the child's
        own exit to run, then each held object's ``after_fork()``."""
        self._life_lock = threading.RLock()
        self._exited = False
        for held in list(self._held.values()):
            renew = getattr(held, "after_fork", None)
            if callable(renew):
                renew()

    # --- the exit sequence -------------------------------------------------------------------------

    def on_exit(self, fn: Callable, order: int) -> None:
        """``fn()`` once at the process's exit, after every step of a lower ``order`` (steps of
        one order run in the order given). Registered once per function."""
        with self._life_lock:
            if any(known == fn for _, _, known in self._exits):
                return
            first = not self._exits
            self._exits.append((order, len(self._exits), fn))
            self._exits.sort(key=lambda step: step[:2])
        if first:
            import atexit

            atexit.register(self.run_exit)
            _run_exit_in_forked_children(self)

    def run_exit(self) -> None:
        """The exit sequence, once per process; a step that fails is logged and the next runs."""
        if self._exited:
            return
        self._exited = True
        for _, _, fn in list(self._exits):
            try:
                fn()
            except Exception as exc:
                logger.error("exit step %s failed: %s", getattr(fn, "__qualname__", fn), exc)

    # --- post-import hooks -------------------------------------------------------------------------

    def when_imported(self, module: str, fn: Callable, once: bool = False) -> None:
        """``fn(module object)`` when ``module`` is imported, or at once where it is already, through
        the registrar. A pair waiting for its module's import is never registered twice (the
        registrar would call it twice), whatever the number of installs; one that ran (or raised,
        and the import with it) is registered again, so it runs at once or at the retried import,
        unless ``once``: then it is registered at the first call only."""
        with self._life_lock:
            where = self._imports.get((module, fn))
            if where in (_WAITING, _HANDED) or (once and where is not None):
                return
            self._imports[(module, fn)] = _WAITING
        self._hand_over()

    def import_registrar(self, registrar: Callable) -> None:
        """``registrar(module, hook)`` registers a post-import hook; what waited for one is handed over."""
        self._registrar = registrar
        self._hand_over()

    def _hand_over(self) -> None:
        registrar = self._registrar
        if registrar is None:
            return
        with self._life_lock:
            waiting = [pair for pair, where in self._imports.items() if where == _WAITING]
            for pair in waiting:
                self._imports[pair] = _HANDED
        for pair in waiting:  # outside the lock: the hook of a module loaded already runs now
            registrar(pair[0], self._firing(pair))

    def _firing(self, pair: tuple[str, Callable]) -> Callable:
        def fire(module):
            with self._life_lock:
                self._imports[pair] = _FIRED  # before it runs: one that raises may be registered again
            return pair[1](module)

        fire.__name__ = fire.__qualname__ = getattr(pair[1], "__name__", "hook")
        return fire


# Where a post-import hook is: waiting for the registrar, handed to it (waiting for the import), run.
_WAITING, _HANDED, _FIRED = "waiting", "handed", "fired"


def _run_exit_in_forked_children(life: Lifecycle) -> None:
    """multiprocessing's fork and forkserver children end with ``os._exit``: no atexit handler runs
    there, but multiprocessing's finalizers do; this puts one that runs the sequence in each."""
    try:
        from multiprocessing import util

        util.register_after_fork(life, _finalizer_in_child)
    except Exception as exc:  # multiprocessing is optional to the guard
        logger.debug("cannot watch multiprocessing children: %s", exc)


def _finalizer_in_child(life: Lifecycle) -> None:
    from multiprocessing import util

    util.Finalize(None, life.run_exit, exitpriority=-100)
