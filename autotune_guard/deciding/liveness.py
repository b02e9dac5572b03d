"""Whether a consensus claimer is alive (``deciding.consensus``): a claimer is waited for as long as it
lives, whatever its tuning takes, and one that died is named within a stated bound.

Two rules, chosen per claimer:
* On this machine (same boot and pid namespace, which the claimer's identity carries), its process
  is looked at directly: dead when gone, a zombie, or a newer process under its pid.  A process that
  is compiling, or blocked inside a C call that holds the GIL, is alive.  Found within one poll.
* Elsewhere, its heartbeat: a counter in the Store that a daemon thread of the claimer's process
  bumps every ``BEAT_S``; silent for ``dead_after`` seconds (AUTOTUNE_CONSENSUS_DEAD_AFTER, default
  120) means it died, lost its host or lost the Store; named within ``dead_after`` and an eighth.
  Only a C call that holds the GIL that long could be mistaken for a death.

The identity's format is a rule of ``core.consensus``; reading /proc, the clock and the threads
are this module's. The tickers are held by the process's consensus state (``deciding.consensus``),
which renews them in a forked child.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
import time
import uuid

from ..core import consensus as rules
from .stores import ByStore, clone_of

logger = logging.getLogger("autotune_guard")

BEAT_S = 1.0  # a claimer bumps its beat counter this often while it tunes


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read().strip()
    except OSError:
        return ""


def _process_stat(pid: int) -> tuple[str, str]:
    """The state and the start time of ``pid`` (fields 3 and 22 of /proc/PID/stat; start time in
    clock ticks since boot), ("", "") when unknown. With the pid, the start time names one process
    for the whole boot, pid reuse included."""
    fields = _read(f"/proc/{pid}/stat").rpartition(")")[2].split()
    return (fields[0], fields[19]) if len(fields) > 19 else ("", "")


@functools.lru_cache(maxsize=1)  # one boot and pid namespace per process, a fork's child included
def machine_token() -> str:
    """This boot and pid namespace, "" where the OS does not say (then heartbeats decide)."""
    boot = _read("/proc/sys/kernel/random/boot_id").replace("-", "")[:12]
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    return f"{boot}.{namespace}" if boot and namespace else ""


def claimer_identity(rank: int) -> str:
    """This process's identity for one claim (``core.consensus.identity``)."""
    pid = os.getpid()
    return rules.identity(rank, pid, socket.gethostname(), uuid.uuid4().hex[:8], machine_token(), _process_stat(pid)[1])


def alive_here(identity: str) -> bool | None:
    """Whether the claimer ``identity`` names is alive, when it ran on this machine; None when it
    did not (or the OS cannot tell), and its heartbeat must decide."""
    process = rules.identity_process(identity, machine_token())
    if process is None:
        return None
    pid, started = process
    if pid == os.getpid():
        return True
    state, now = _process_stat(pid)
    if not now:  # gone, or /proc unreadable: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:  # EPERM: a process of another user holds the pid, alive
            pass
        return True if not started else None
    if started and now != started:
        return False  # the pid was reused: the claimer is gone
    return state not in ("Z", "X")


class _Ticker:
    """A daemon thread that, every ``period`` seconds, visits each registered entry with a clone
    of the entry's Store (the thread that registered it may be blocked on the shared client)."""

    period = BEAT_S
    name = "autotune_guard-consensus"

    def __init__(self):
        self.after_fork()

    def after_fork(self) -> None:
        """Also in a forked child, which has none of the parent's threads, waits or claims."""
        self._lock = threading.Lock()
        self._entries: dict = {}  # handle -> entry; an entry's [0] is its Store, held while registered
        self._thread = None

    def _add(self, handle, entry) -> None:
        with self._lock:
            self._entries[handle] = entry
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def _remove(self, handle) -> None:
        with self._lock:
            self._entries.pop(handle, None)

    def _run(self):
        clones = ByStore()  # this thread's own connections, one per Store still visited
        while True:
            time.sleep(self.period)
            with self._lock:
                entries = list(self._entries.items())
            clones.keep_only([entry[0] for _, entry in entries])
            for handle, entry in entries:
                store = entry[0]

                def clone(store=store):  # opened at the first request: a watch on this machine makes none
                    return clones.get(store, lambda: clone_of(store))

                try:
                    self._visit(handle, entry, clone)
                except Exception as exc:  # the Store is gone: the waiters' own requests fail and say so
                    clones.pop(store)
                    logger.debug("consensus: %s: %s failed: %s", self.name, handle, exc)

    def _visit(self, handle, entry, clone) -> None:
        """``clone()``: this thread's clone of the entry's Store."""
        raise NotImplementedError


class Beats(_Ticker):
    """The claimer's side: bumps the beat counter of every decision this process is tuning.  A
    beat is named by its Store and key: the node's and the job's protocols use the same key."""

    name = "autotune_guard-consensus-beat"

    def start(self, store, key: str) -> None:
        store.add(key, 1)  # a first beat before tuning starts
        self._add((id(store), key), (store, key))

    def stop(self, store, key: str) -> None:
        self._remove((id(store), key))

    def _visit(self, handle, entry, clone) -> None:
        clone().add(entry[1], 1)


class Watch(_Ticker):
    """The waiters' side: while threads of this process wait for decisions, looks at each one's
    claimer: on this machine every ``period``, elsewhere its heartbeat every eighth of ``dead_after``
    (thousands of node leaders may wait on one claimer).  When it died, it publishes
    ``notice(holder, silent_s, seen)`` as the decision's result, which wakes every waiter of every
    rank (compare_set: never over a winner)."""

    name = "autotune_guard-consensus-watch"

    @contextlib.contextmanager
    def watching(self, store, key: str, holder: str, dead_after: float, notice):
        """The claimer ``holder`` of ``key`` is watched while this is open."""
        handle = object()
        self._add(handle, (store, key, holder, dead_after, notice, [None, time.monotonic(), 0.0]))
        try:
            yield
        finally:
            self._remove(handle)

    def _visit(self, handle, entry, clone) -> None:
        store, key, holder, dead_after, notice, last = entry
        alive = alive_here(holder)
        if alive is False:
            death = notice(holder, 0.0, "process")
        elif alive is None and time.monotonic() >= last[2]:
            count, now = int(clone().add(key + "/beat", 0)), time.monotonic()
            last[2] = now + dead_after / 8  # a dead claimer is named within dead_after and an eighth
            if count != last[0]:
                last[0], last[1] = count, now
            death = notice(holder, now - last[1], "heartbeat") if now - last[1] > dead_after else None
        else:
            death = None
        if death is not None:
            clone().compare_set(key + "/result", "", death)
            self._remove(handle)
