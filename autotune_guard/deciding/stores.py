"""What the consensus engine keeps per Store object: :class:`ByStore`, and the clones a thread
waits on (:class:`Clones`).

A Store is named by its identity, not its value: two clients of one server are two connections,
and a c10d Store need not be hashable. An entry lasts as long as its Store: a weak reference drops
it when the Store goes, so an id never names a later Store that happens to reuse it, and the
mapping itself keeps no Store (nor its connection) alive; a value that refers to its Store (the
node's ``FannedStore``) keeps it as long as the mapping lives. A Store that takes no weak
reference is kept by its entry instead.
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable


class ByStore:
    """A value per Store object, for as long as that Store lives."""

    def __init__(self):
        self._entries: dict = {}  # id(store) -> (reference to the store, value)

    def get(self, store, make: Callable | None = None):
        """The value kept for ``store``; made by ``make()`` and kept when there is none (None
        without ``make``)."""
        entry = self._entries.get(id(store))
        if entry is not None and entry[0]() is store:
            return entry[1]
        if make is None:
            return None
        value = make()
        self._entries[id(store)] = (self._reference(store), value)
        return value

    def pop(self, store) -> None:
        entry = self._entries.get(id(store))
        if entry is not None and entry[0]() is store:
            del self._entries[id(store)]

    def keep_only(self, stores) -> None:
        """Drop the values of every Store not among ``stores``."""
        wanted = {id(store) for store in stores}
        for key in [key for key in list(self._entries) if key not in wanted]:
            self._entries.pop(key, None)  # a Store freed meanwhile took its entry already

    def _reference(self, store) -> Callable:
        key, entries = id(store), self._entries

        def gone(_, key=key, entries=entries):  # runs while the Store is freed, before its id is reused
            entries.pop(key, None)

        try:
            return weakref.ref(store, gone)
        except TypeError:  # no weak reference: the entry keeps it, so its id stays its own
            return lambda: store


def clone_of(store):
    """A new client of ``store``'s server (its own connection), or ``store`` itself where it has
    no ``clone`` (a FileStore, a test's fake)."""
    clone = getattr(store, "clone", None)
    return clone() if clone is not None else store


class Clones:
    """Each thread's clone of each Store it waits on. A TCPStore client serves one request at a
    time: a blocking wait on the program's client would hold up the process group's own requests,
    and one clone shared by two waiting threads would hold up the second."""

    def __init__(self):
        self._local = threading.local()

    def of(self, store):
        """This thread's clone of ``store``, opened at its first use here."""
        return self._mine().get(store, lambda: clone_of(store))

    def put(self, store, clone) -> None:
        """Use ``clone`` for ``store`` on this thread (a benchmark opens its connections ahead)."""
        mine = self._mine()
        mine.pop(store)
        mine.get(store, lambda: clone)

    def _mine(self) -> ByStore:
        mine = self._local.__dict__.get("by_store")
        if mine is None:
            mine = self._local.by_store = ByStore()
        return mine

    def after_fork(self) -> None:
        # The parent's clones are the parent's connections: a child sharing a socket with it would
        # interleave their requests. A child opens its own.
        self._local = threading.local()
