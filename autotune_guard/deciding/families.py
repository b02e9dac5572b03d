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
    disabled = False  # a third-party family one of whose steps failed (``disable``)

    def shaped(self, owner) -> bool:
        raise NotImplementedError

    def run(self, autotuner, original, args, kwargs):
        raise NotImplementedError

    def install(self, module):
        raise NotImplementedError


class Registered:
    """The registered families by what they recognise, held by the ``Guard``; ``third_party``: the
    types that came through the entry point group (a step of theirs that fails disables them)."""

    def __init__(self):
        self.by_kind: dict[str, list[Family]] = {kind: [] for kind in RECOGNISES}
        self.entry_points_read = False
        self.third_party: set = set()


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
    registered = current().held(HELD, Registered)
    found = registered.by_kind[family.recognises]
    if any(type(known) is type(family) for known in found):
        return
    # the guard's own families are asked before any third-party one, whenever each registered
    ours = type(family) not in registered.third_party
    found.insert(next((i for i, known in enumerate(found) if ours and type(known) in registered.third_party),
                      len(found)), family)


def installers(module_name: str) -> list:
    """Each registered module family that patches ``module_name``."""
    found = current().held(HELD, Registered).by_kind["module"]
    return [family for family in found if family.module == module_name]


def modules() -> list[str]:
    """The modules that registered module families patch (the entry point group read first)."""
    read_entry_points()
    return sorted({family.module for family in current().held(HELD, Registered).by_kind["module"]})


def third_party(family: Family) -> bool:
    return type(family) in current().held(HELD, Registered).third_party


def disable(family: Family, why: str) -> None:
    """Take ``family`` out of the registry, said once: the program and the other families go on,
    and its autotuners run as their library wrote them."""
    family.disabled = True
    found = current().held(HELD, Registered).by_kind.get(family.recognises, [])
    if family in found:
        found.remove(family)
    current().warn_once(f"family {family.name} disabled", (
        f"autotuner family {family.name} ({type(family).__module__}) is disabled: {why}; the autotuners it "
        "governed run as their library wrote them, not governed by autotune_guard"), scope="process")


def family_of(owner, kind: str) -> Family | None:
    """The registered family of ``kind`` whose autotuner ``owner`` (a class defining ``run``) is;
    a family whose ``shaped`` raises is disabled (named once) and the next one asked."""
    read_entry_points()
    for family in list(current().held(HELD, Registered).by_kind[kind]):
        try:
            if family.shaped(owner):
                return family
        except Exception as exc:
            disable(family, f"its shaped({getattr(owner, '__qualname__', owner)}) raised {exc!r}")
    return None


def read_entry_points() -> None:
    """Third-party families, once per process; one that cannot load or register (an exception, or
    ``sys.exit`` in its module) is named, and its autotuners stay named as not governed."""
    guard = current()
    registered = guard.held(HELD, Registered)
    if registered.entry_points_read:
        return
    registered.entry_points_read = True
    from importlib import metadata

    for point in metadata.entry_points(group=ENTRY_POINTS):
        try:
            found = point.load()
            family = found() if isinstance(found, type) else found
            verify(family)
            registered.third_party.add(type(family))
            register(family)
        except (Exception, SystemExit) as exc:  # a plugin's sys.exit must not end the user's program
            guard.warn_once(f"family {point.name}", f"autotuner family {point.name} = {point.value} (entry "
                            f"point group {ENTRY_POINTS}) not registered: {exc!r}", scope="process")
