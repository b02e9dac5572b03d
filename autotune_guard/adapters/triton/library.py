"""Autotuner subclasses of kernel libraries that override ``run``: a registered family (``families``:
FlagGems' LibTuner, ...) governs its own through its seams; any other (fla's CachedAutotuner) is
probed: a first launch under a policy shows whether the subclass reaches Triton's (guarded) run at
all; one that never does is named as not governed. A config the subclass put in
``cache`` itself before calling Triton's run is the library's choice, logged as ``library``."""

from __future__ import annotations

import functools

from ...core.errors import SelectionError
from ...core.model import base_name, compact, descriptor, signature
from ...deciding import Tuned, noted
from ...runtime import current
from ... import _patching
from . import families
from .eager import TritonChoice
from .seam import cache_of
from .tuner import MISSING, STATE_ATTR, kernel_name

PROBED_ATTR = "_autotune_guard_probed"


def subclasses(cls) -> list:
    found, todo = [], list(cls.__subclasses__())
    while todo:
        sub = todo.pop()
        found.append(sub)
        todo.extend(sub.__subclasses__())
    return found


def wrap_overriding_run(cls) -> None:
    """Wrap the ``run`` a subclass defines (once), to probe its first launch under each policy."""
    owner = next(c for c in cls.__mro__ if "run" in c.__dict__)
    original = owner.__dict__["run"]
    if getattr(original, "_autotune_guard", False) or not callable(original):
        return
    family = families.family_of(owner)
    if family is not None:
        families.govern(owner, original, family)
        return

    @functools.wraps(original)
    def run(self, *args, **kwargs):
        guard = current()
        epoch = guard.epoch
        if epoch.installed is None or self.__dict__.get(PROBED_ATTR) == epoch.generation:
            return original(self, *args, **kwargs)
        return _probe_first_launch(guard, self, original, owner, args, kwargs)

    run._autotune_guard = True
    run._autotune_guard_wraps = original
    _patching.patch(owner, "run", run)


class _Probe:
    """Stands in for the autotuner's state during the probed launch: the guarded run replaces it
    (a stale generation) if the subclass reaches it."""

    generation = -1


def _probe_first_launch(guard, autotuner, original, owner, args, kwargs):
    attrs = autotuner.__dict__
    previous = attrs.get(STATE_ATTR, MISSING)
    probe = attrs[STATE_ATTR] = _Probe()
    try:
        result = original(autotuner, *args, **kwargs)
    finally:
        reached = attrs.get(STATE_ATTR) is not probe
        if not reached:
            if previous is MISSING:
                attrs.pop(STATE_ATTR, None)
            else:
                attrs[STATE_ATTR] = previous
    epoch = guard.epoch  # read again: the launch may have installed another policy
    attrs[PROBED_ATTR] = epoch.generation
    if not reached:
        _never_reaches_triton(guard, autotuner, owner, epoch.settled_policy())
    return result


def _never_reaches_triton(guard, autotuner, owner, policy) -> None:
    name = kernel_name(autotuner)
    cls = f"{owner.__module__}.{owner.__qualname__}"
    message = (f"kernel {name}: its autotuner class {cls} overrides run() and never calls Triton's Autotuner.run, "
               f"so autotune_guard ({policy.mode} mode) neither sees nor governs its config choices; they are not "
               "in the choice log")
    if policy.mode == "pinned" and policy.on_miss == "error" and policy.in_scope(base_name(name)):
        raise SelectionError(f"autotune_guard: {message} (AUTOTUNE_ON_MISS=error)")
    guard.note_ungoverned(name, f"{cls}.run never calls Triton's Autotuner.run")
    guard.warn_once(message, message)


def check_entry(autotuner, state, args, kwargs) -> None:
    """The subclass put a config into ``cache`` for this launch's key before calling Triton's run."""
    key = state.key.of(args, kwargs)
    if key in cache_of(autotuner) and key not in state.seen and key not in state.accounted:
        library_chose(autotuner, state, key)


def leaves_to_library(autotuner, state, key) -> bool:
    """Whether ``key``'s config is the library's own (swap strategies: then Triton's run as it is)."""
    if key in state.library:
        return True
    return (state.library_check and key in cache_of(autotuner) and key not in state.accounted
            and library_chose(autotuner, state, key))


def library_chose(autotuner, state, key) -> bool:
    """Log the library's choice as ``library`` (pinned: named once, or refused with on_miss=error)."""
    config = cache_of(autotuner)[key]
    choice = TritonChoice(autotuner, state, key)
    desc = descriptor(config)
    if state.mode == "pinned":
        _name_pinned_library_choice(autotuner, state, choice.key, desc, choice.every(), state.epoch.policy)
    if noted(state.epoch, choice, Tuned(desc, config), "library"):
        state.seen.add(key)
        state.library.add(key)
    return True


def _name_pinned_library_choice(autotuner, state, choice_key, desc, candidates, policy) -> None:
    among = "" if compact(desc) in [compact(c) for c in candidates] else \
        f", which is not one of its {len(candidates)} candidates"
    cls = type(autotuner)
    message = (f"{choice_key.what()}: its autotuner ({cls.__module__}.{cls.__qualname__}) chose {signature(desc)} "
               f"itself{among} (it put the config into Triton's cache before the launch); pinned mode leaves that "
               "choice to the library and logs it as 'library'. To pin this kernel, turn off the library's own "
               "config choice (for fla: leave FLA_CACHE_MODE unset)")
    if policy.on_miss == "error":
        raise SelectionError(f"autotune_guard: {message}; refused with AUTOTUNE_ON_MISS=error")
    current().warn_once(state.qualified, message)
