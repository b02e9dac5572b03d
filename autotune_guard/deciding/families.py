"""The registry of autotuner families, beside the engine they implement: each family says which
kind of foreign autotuner it recognises (``RECOGNISES``), is checked when it registers (as pluggy's
``_verify_hook`` checks a hook), and is asked only about owners of that kind. The guard's own
families register at import; a third-party package registers one through the entry point group
``autotune_guard.families`` (a ``Family`` instance, or a class made with no argument)."""

from __future__ import annotations

import inspect
import logging

from ..core.errors import FamilyError
from ..runtime import current

logger = logging.getLogger("autotune_guard")

ENTRY_POINTS = "autotune_guard.families"
RECOGNISES = {
    "autotuner-run": "a subclass of Triton's Autotuner that defines its own run (FlagGems' LibTuner)",
    "kernel-interface-run": "a triton.KernelInterface subclass not Triton's with a run of its own "
                            "(GPTQ's custom_autotune)",
    "module": "a library whose tuner is not Triton's, reached through the module the family names "
              "(``module``) and patched by its ``install(module)`` when that module is imported (Helion)",
}
METHODS = {  # what a family of each kind defines, with its parameters
    "autotuner-run": (("shaped", ["owner"]), ("run", ["autotuner", "original", "args", "kwargs"])),
    "kernel-interface-run": (("shaped", ["owner"]), ("run", ["autotuner", "original", "args", "kwargs"])),
    "module": (("install", ["module"]),),
}
HELD = "autotuner families"


class Family:
    """One library's autotuner family. ``recognises``: a key of ``RECOGNISES``; ``shaped(owner)``:
    whether the class ``owner``'s own ``run`` is this family's; ``run(autotuner, original, args,
    kwargs)``: that run under the current policy (``original`` is the library's own run), which
    decides a key's first launch through ``deciding.first_launch``. A ``module`` family names the
    module (``module``) whose import calls its ``install(module)`` instead."""

    name = "?"
    recognises = ""
    module = ""

    def shaped(self, owner) -> bool:
        raise NotImplementedError

    def run(self, autotuner, original, args, kwargs):
        raise NotImplementedError

    def install(self, module):
        raise NotImplementedError


class Registered:
    """The registered families by what they recognise, held by the ``Guard``."""

    def __init__(self):
        self.by_kind: dict[str, list[Family]] = {kind: [] for kind in RECOGNISES}
        self.entry_points_read = False


def verify(family) -> None:
    """Raise ``FamilyError`` naming the family and what is wrong where it is not shaped as one."""
    name = getattr(family, "name", None)
    label = name if isinstance(name, str) and name not in ("", "?") else type(family).__qualname__
    problem = None
    if not isinstance(family, Family):
        problem = f"a {type(family).__qualname__} is not a deciding.families.Family"
    elif label != name:
        problem = f"its name is {name!r}; a family names itself (a non-empty string)"
    elif family.recognises not in RECOGNISES:
        problem = f"it recognises {family.recognises!r}; allowed: {', '.join(sorted(RECOGNISES))}"
    elif family.recognises == "module" and not (isinstance(family.module, str) and family.module):
        problem = f"its module is {family.module!r}; a module family names the module it patches"
    else:
        problem = _methods_problem(family)
    if problem is not None:
        raise FamilyError(f"autotune_guard: autotuner family {label}: {problem}", family=label, problem=problem)


def _methods_problem(family) -> str | None:
    for method, wanted in METHODS[family.recognises]:
        try:
            given = list(inspect.signature(getattr(family, method)).parameters)
        except (TypeError, ValueError):
            return f"its {method} cannot be inspected"
        if len(given) != len(wanted):
            return f"its {method} takes ({', '.join(given)}); a family's takes ({', '.join(wanted)})"
    return None


def register(family: Family) -> None:
    """Check ``family`` (``verify``) and add it to the families of its kind (once per type)."""
    verify(family)
    found = current().held(HELD, Registered).by_kind[family.recognises]
    if all(type(known) is not type(family) for known in found):
        found.append(family)


def installers(module_name: str) -> list:
    """The ``install`` of each registered module family that patches ``module_name``."""
    found = current().held(HELD, Registered).by_kind["module"]
    return [family.install for family in found if family.module == module_name]


def family_of(owner, kind: str) -> Family | None:
    """The registered family of ``kind`` whose autotuner ``owner`` (a class defining ``run``) is."""
    guard = current()
    registered = guard.held(HELD, Registered)
    if not registered.entry_points_read:
        registered.entry_points_read = True
        _read_entry_points(guard)
    for family in registered.by_kind[kind]:
        if family.shaped(owner):
            return family
    return None


def _read_entry_points(guard) -> None:
    """Third-party families; one that cannot load or register is named, and its autotuners stay
    named as not governed."""
    from importlib import metadata

    for point in metadata.entry_points(group=ENTRY_POINTS):
        try:
            found = point.load()
            register(found() if isinstance(found, type) else found)
        except Exception as exc:
            guard.warn_once(f"family {point.name}", f"autotuner family {point.name} = {point.value} (entry "
                            f"point group {ENTRY_POINTS}) not registered: {exc}", scope="process")
