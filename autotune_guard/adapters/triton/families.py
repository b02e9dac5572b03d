"""Autotuner families of kernel libraries that the Triton adapter governs through their own seams
(FlagGems' ``LibTuner``, a GPTQ-style ``custom_autotune``, ...). A family registers itself here;
the Triton adapter asks the registry when it meets a class that defines its own ``run``, and wraps
that ``run`` so the family carries out the policy (through ``autotune_guard.deciding``). Families
never import each other."""

from __future__ import annotations

import functools

from ...runtime import current
from .. import _patching

HELD = "triton library families"


class Family:
    """One library's autotuner family. ``shaped(owner)``: whether the class ``owner``'s own ``run``
    is this family's; ``run(autotuner, original, args, kwargs)``: that run under the current policy
    (``original`` is the library's own run)."""

    name = "?"

    def shaped(self, owner) -> bool:
        raise NotImplementedError

    def run(self, autotuner, original, args, kwargs):
        raise NotImplementedError


def register(family: Family) -> None:
    """Add ``family`` to the families the adapter asks (once)."""
    found = current().held(HELD, list)
    if all(type(known) is not type(family) for known in found):
        found.append(family)


def family_of(owner) -> Family | None:
    """The registered family whose autotuner ``owner`` (a class defining ``run``) is, if any."""
    for family in current().held(HELD, list):
        if family.shaped(owner):
            return family
    return None


def govern(owner, original, family: Family) -> None:
    """Put the family's run in place of ``owner``'s own (through the patching idiom)."""

    @functools.wraps(original)
    def run(self, *args, **kwargs):
        return family.run(self, original, args, kwargs)

    run._autotune_guard = True
    run._autotune_guard_wraps = original
    _patching.patch(owner, "run", run)
