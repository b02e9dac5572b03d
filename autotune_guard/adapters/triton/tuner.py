"""What the Triton adapter keeps: its registry (capabilities of the running Triton, the autotuners
it hung a lock or a launch on, consensus gates) and each autotuner's state under the current epoch.

Per autotuner: a lock that outlives epochs (every launch path that touches Triton's shared fields
takes it) and a ``TunerState`` rebuilt whenever a new policy is installed, holding the launch
strategy chosen once for that autotuner and epoch.
"""

from __future__ import annotations

import threading
import weakref
from typing import NamedTuple

from ...core.model import TuningKey, base_name, kernel_identity, qualified_name, shared_name
from ...runtime import current

STATE_ATTR = "_autotune_guard_state"
LOCK_ATTR = "_autotune_guard_lock"
NAME_ATTR = "_autotune_guard_name"
GATES_ATTR = "_autotune_guard_gates"  # key -> Lock: one consensus decision per key per process; dies with it
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
            autotuner.__dict__.pop("run", None)
        self.direct.clear()

    def after_fork(self) -> None:
        """A lock held by another thread at fork() stays held forever in the child: renew them all."""
        self.lock = threading.Lock()
        for autotuner in list(self.tuners):
            autotuner.__dict__.pop(GATES_ATTR, None)
            lock = autotuner.__dict__[LOCK_ATTR] = threading.RLock()
            state = autotuner.__dict__.get(STATE_ATTR)
            if isinstance(state, TunerState):
                state.lock = lock


REGISTRY = Registry()


class TunerState:
    """One autotuner under one epoch: its name, mode, key formula, what was chosen, its strategy."""

    __slots__ = ("epoch", "generation", "qualified", "mode", "key", "selected", "seen", "library", "accounted",
                 "lock", "library_check", "strategy", "run")

    def __init__(self, autotuner, epoch, lock, previous):
        policy = epoch.policy
        self.epoch, self.generation = epoch, epoch.generation
        self.qualified = kernel_name(autotuner)
        self.mode = policy.mode if policy.in_scope(base_name(self.qualified)) else "off"
        self.key = TuningKey(autotuner.arg_names, autotuner.keys)
        self.selected: dict = {}  # tuning key -> live Config chosen by the guard
        self.seen: set = set()  # tuning keys whose ``cache`` entry is accounted for (observed or pinned)
        self.library: set = set()  # tuning keys whose config the autotuner's own class put in ``cache``
        # Entries an earlier epoch accounted for (pinned or observed): not the library's.
        self.accounted = set(previous.seen) if isinstance(previous, TunerState) else set()
        self.lock = lock
        # A subclass that overrides run (fla's CachedAutotuner) may fill ``cache`` itself first.
        self.library_check = getattr(type(autotuner).run, "_autotune_guard_wraps", None) is not None
        self.strategy = self.run = None  # set by launch.choose

    def is_current(self) -> bool:
        return self.generation == current().epoch.generation


def kernel_name(autotuner) -> str:
    """``module.function``, fixed at the autotuner's first launch.  A different kernel (other
    source or candidates, as a kernel factory makes) under a name already taken is named
    ``module.function@<hash>`` instead, said once: its choices are not mixed with the first's."""
    name = autotuner.__dict__.get(NAME_ATTR)
    if name is None:
        name = autotuner.__dict__[NAME_ATTR] = _unique_name(autotuner)
    return name


def _unique_name(autotuner) -> str:
    fn = getattr(autotuner, "base_fn", None) or autotuner.fn
    base = qualified_name(fn)
    identity = kernel_identity(_source_of(autotuner.fn), [str(config) for config in autotuner.configs])
    with REGISTRY.lock:
        first_identity, first_fn = REGISTRY.names.setdefault(base, (identity, fn))
    # Autotuners over one @triton.jit function are one kernel (they share its entries, as documented).
    if first_identity == identity or first_fn is fn:
        return base
    name = shared_name(base, identity)
    current().warn_once(f"shared name {name}", (
        f"kernel {base}: another autotuned kernel of this name, with other source or candidates, launched first in "
        f"this process (a kernel factory?); this one is logged, recorded and verified as {name}, and a table entry "
        f"for {base} applies to it where the table has none for {name}. Names follow the order of first launch"),
        scope="process")
    return name


def _source_of(fn) -> str:
    """The kernel's source text (the JITFunction under any Heuristics wrappers), '' if unknown."""
    for _ in range(8):
        source = getattr(fn, "src", None)
        if isinstance(source, str):
            return source
        fn = getattr(fn, "fn", None)
        if fn is None:
            break
    return ""


def strategy_of(autotuner) -> str | None:
    """The name of the launch strategy the autotuner runs under the current policy (None before its
    first launch under it): the one introspection call tests may use."""
    state = autotuner.__dict__.get(STATE_ATTR)
    if not isinstance(state, TunerState) or not state.is_current():
        return None
    direct = autotuner.__dict__.get("run")
    return state.strategy.name if direct is None else state.strategy.direct_name(autotuner, direct)
