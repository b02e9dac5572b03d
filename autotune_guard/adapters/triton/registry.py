"""What the Triton adapter keeps for the process: its registry (capabilities of the running
Triton, its original methods, the autotuners it hung a lock or a launch on, consensus gates), held
by the Guard (``registry()``) and renewed in a forked child."""

from __future__ import annotations

import threading
import weakref
from typing import NamedTuple

from ...runtime import current

HELD = "triton"  # the registry's name among the Guard's held objects
STATE_ATTR = "_autotune_guard_state"
LOCK_ATTR = "_autotune_guard_lock"
GATES_ATTR = "_autotune_guard_gates"  # key -> Lock: one consensus decision per key per process; dies with it
RUN_PATCH_ATTR = "_autotune_guard_run_patch"  # the Patch of an instance ``run`` that skips the guard
MISSING = object()


class Capabilities(NamedTuple):
    """What the running Triton allows, read once at the patch."""

    version: tuple
    pins_through_pruning: bool  # 3.8+: a pruning result of one config is cached without timing
    writes_out_decided: bool  # 3.8 ... the newest tested: its cached path can be written out
    writes_out_cached: bool  # 3.3 ... the newest tested: a decided key's path written out over the guard's choices
    init_needs_timer: bool  # 3.3: __init__ resolves the default timer (fails without a driver)


class Registry:
    """The adapter's own mutable state, renewed in a forked child (``after_fork``)."""

    def __init__(self):
        self.caps = Capabilities((0, 0), False, False, False, False)
        self.original_run = None
        self.original_init = None
        self.original_prune = None
        self.lock = threading.Lock()
        self.tuners = weakref.WeakSet()  # autotuners holding a lock of ours
        self.direct = weakref.WeakSet()  # autotuners whose instance ``run`` shadows the guarded one
        self.user_listener = None  # Triton 3.8+'s listener that was set before ours
        self.heard = threading.local()  # what Triton's listener last said in this thread
        self.names: dict = {}  # module.function -> (identity, function) of the first kernel of that name
        # Triton's classes, for telling the autotuners of other code apart (see foreign)
        self.autotuner_class = None
        self.config_class = ()
        self.triton_classes: tuple = ()

    def lock_of(self, autotuner):
        lock = autotuner.__dict__.get(LOCK_ATTR)
        if lock is None:
            with self.lock:
                lock = autotuner.__dict__.get(LOCK_ATTR)
                if lock is None:
                    lock = autotuner.__dict__[LOCK_ATTR] = threading.RLock()
                    self.tuners.add(autotuner)
        return lock

    def gate(self, autotuner, key):
        """The lock of one consensus decision: kept on the autotuner, so a program that makes
        autotuner objects by the thousand leaves nothing of theirs here once they are gone."""
        with self.lock:
            gates = autotuner.__dict__.get(GATES_ATTR)
            if gates is None:
                gates = autotuner.__dict__[GATES_ATTR] = {}
                self.tuners.add(autotuner)
            gate = gates.get(key)
            if gate is None:
                gate = gates[key] = threading.Lock()
            return gate

    def drop_direct(self) -> None:
        """Every autotuner's launches go through the guard again (a new epoch)."""
        for autotuner in list(self.direct):
            found = autotuner.__dict__.pop(RUN_PATCH_ATTR, None)
            if found is not None:
                found.undo()
        self.direct.clear()

    def after_fork(self) -> None:
        """A lock held by another thread at fork() stays held forever in the child: renew them all."""
        self.lock = threading.Lock()
        for autotuner in list(self.tuners):
            autotuner.__dict__.pop(GATES_ATTR, None)
            lock = autotuner.__dict__[LOCK_ATTR] = threading.RLock()
            state = autotuner.__dict__.get(STATE_ATTR)
            if hasattr(state, "lock"):  # a TunerState: its launches take the renewed lock
                state.lock = lock


def registry() -> Registry:
    """The process's one registry of the Triton adapter (the same object for the process's life:
    a fork renews it in place)."""
    return current().held(HELD, Registry)
