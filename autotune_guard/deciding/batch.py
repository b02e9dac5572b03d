"""Consensus winners learned in batches: a rank that is behind the claimer learns every winner
published so far in three Store requests, and then decides those keys with none.

A claimer appends each decision's name to one list per attempt (``announced``) after it set the
winner. A waiter reads that list now and then (:meth:`Learned.learn_after`): the names it has not
seen yet, and their results in one ``multi_get`` of names whose results are there (``check``
first: the Store has no authentication, and a name another process appended with no result would
make ``multi_get`` wait for the Store's timeout); only when the result it asked for was there
already (the claimer is ahead of it). In an SPMD job the ranks launch the same kernels
in the same order, so the ranks behind the first learn the keys ahead of them in one read. Reads
back off (every 1, 2, 4, ... such keys) while they find nothing new, so a job whose ranks keep
pace pays at most a few reads in all. Only winners are learned: a failure or a death notice is
read where it is published, with the heartbeat rules of ``deciding.liveness``.

What this process learned is held by its consensus state (``deciding.consensus``), per Store
object (``stores.ByStore``) and attempt prefix; a forked child keeps it (a winner published in
the attempt stays its winner) with a fresh lock.
"""

from __future__ import annotations

import logging
import threading

from ..core import consensus as rules
from .stores import ByStore

logger = logging.getLogger("autotune_guard")

MOST_PER_READ = 1024  # results fetched in one multi_get
AHEAD_S = 0.02  # a result that came faster than this was there already: the claimer is ahead


def announce(store, prefix: str, name: str) -> None:
    """After the winner of ``name`` was set: add its name to the attempt's list (one request)."""
    try:
        store.append(f"{prefix}/{rules.ANNOUNCED}", name + "\n")
    except Exception as exc:  # the winner is published: only the others' shortcut is lost
        logger.debug("consensus: could not announce %s: %s", name, exc)


class Learned:
    """The winners this process learned, per Store and attempt prefix, and when to read again."""

    def __init__(self):
        self._lock = threading.Lock()
        self._scopes = ByStore()  # store -> prefix -> _Scope

    def winner(self, store, prefix: str, name: str) -> str | None:
        """The published winner of ``name`` this process learned already, as published text."""
        scope = (self._scopes.get(store) or {}).get(prefix)
        return None if scope is None else scope.results.get(name)

    def learn_after(self, store, prefix: str, name: str, published: str, ahead: bool) -> None:
        """A waiter got ``published`` for ``name`` from the Store: note it and, when the claimer was
        ``ahead`` of this rank and a read is due, learn the winners published since the last read.
        Never raises: a failed read learns nothing."""
        with self._lock:
            scope = self._scopes.get(store, dict).setdefault(prefix, _Scope())
            scope.results[name] = published
            if not ahead:  # this rank waited for the tuning: nothing is published ahead of it
                return
            scope.waited += 1
            if scope.waited < scope.next_read:
                return
            scope.waited = 0
        try:
            found = _read(store, prefix, scope)
        except Exception as exc:
            logger.debug("consensus: could not read the announced winners under %s: %s", prefix, exc)
            found = 0
        with self._lock:
            scope.next_read = 1 if found else min(2 * scope.next_read, 1 << 20)

    def after_fork(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it at fork


class _Scope:
    def __init__(self):
        self.results: dict = {}  # decision name -> published text (winners only)
        self.without: set = set()  # announced names with no result when read: never asked again
        self.waited = 0
        self.next_read = 1


def _read(store, prefix: str, scope: _Scope) -> int:
    """How many new winners one read of the announced list brought (2 to 4 requests; one more per
    announced name without a result, each asked once)."""
    listed = f"{prefix}/{rules.ANNOUNCED}"
    if not store.check([listed]):
        return 0
    new = rules.announced_names(rules.text(store.get(listed)), scope.results, scope.without, MOST_PER_READ)
    new = _with_results(store, prefix, new, scope)
    if not new:
        return 0
    values = store.multi_get([f"{prefix}/{n}/result" for n in new])
    found = 0
    for name, value in zip(new, values):
        value = rules.text(value)
        if rules.is_winner(value):
            scope.results[name] = value
            found += 1
    return found


def _with_results(store, prefix: str, names: list, scope: _Scope) -> list:
    """``names`` whose results are in the Store: one ``check`` when all are (a claimer announces
    a name after its result), else one per name; those without are noted and never asked again."""
    if not names or store.check([f"{prefix}/{n}/result" for n in names]):
        return names
    present = [n for n in names if store.check([f"{prefix}/{n}/result"])]
    scope.without.update(set(names) - set(present))
    logger.debug("consensus: %d announced name(s) under %s have no result (not this job's): not read",
                 len(names) - len(present), prefix)
    return present
