"""Each autotuner's state under the current epoch, and its name (the registry is ``registry``).

Per autotuner: a lock that outlives epochs (every launch path that touches Triton's shared fields
takes it) and a ``TunerState`` rebuilt whenever a new policy is installed, holding the launch
strategy chosen once for that autotuner and epoch.
"""

from __future__ import annotations

from ...core.model import base_name, kernel_identity, qualified_name, shared_name
from ...runtime import current
from .registry import MISSING, STATE_ATTR, registry  # noqa: F401  (MISSING, STATE_ATTR: re-exported)
from .seam import configs_of, jit_function, kernel_function, tuning_key

NAME_ATTR = "_autotune_guard_name"


def __getattr__(name):
    if name == "REGISTRY":  # the registry as it was named when it was a module global
        return registry()
    raise AttributeError(name)


class TunerState:
    """One autotuner under one epoch: its name, mode, key formula, what was chosen, its strategy."""

    __slots__ = ("epoch", "generation", "qualified", "mode", "key", "selected", "seen", "library", "accounted",
                 "lock", "library_check", "strategy", "run")

    def __init__(self, autotuner, epoch, lock, previous):
        policy = epoch.policy
        self.epoch, self.generation = epoch, epoch.generation
        self.qualified = kernel_name(autotuner)
        self.mode = policy.mode if policy.in_scope(base_name(self.qualified)) else "off"
        self.key = tuning_key(autotuner)
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
    fn = kernel_function(autotuner)
    base = qualified_name(fn)
    identity = kernel_identity(_source_of(jit_function(autotuner)), [str(config) for config in configs_of(autotuner)])
    reg = registry()
    with reg.lock:
        first_identity, first_fn = reg.names.setdefault(base, (identity, fn))
    # Autotuners over one @triton.jit function are one kernel (they share its entries, as documented).
    if first_identity == identity or first_fn is fn:
        return base
    name = shared_name(base, identity)
    current().warn_once(f"shared name {name}", (
        f"kernel {base}: another autotuned kernel of this name, with other source or candidates, launched first in "
        f"this process (a kernel factory?); this one is logged, recorded and verified as {name}, and a table entry "
        f"for {base} applies to it where the table has none for {name}. Names follow the order of first launch"),
        scope="process", name="shared-name")
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
