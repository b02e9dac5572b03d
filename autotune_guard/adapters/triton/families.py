"""How the Triton adapter hands a library autotuner class to its family (``deciding.families``,
the registry beside the engine): the kind of owner it is, and the family's run put in place of
the library's own (``govern``). Families never import each other."""

from __future__ import annotations

import functools

from ...deciding import families
from .. import _patching


def family_of(owner) -> families.Family | None:
    """The registered family whose autotuner ``owner`` (a class defining ``run``) is, if any:
    asked among those that recognise a Triton ``Autotuner`` subclass or a ``KernelInterface`` one."""
    autotuner = any(c.__name__ == "Autotuner" and c.__module__ == "triton.runtime.autotuner" for c in owner.__mro__)
    return families.family_of(owner, "autotuner-run" if autotuner else "kernel-interface-run")


def govern(owner, original, family: families.Family) -> None:
    """Put the family's run in place of ``owner``'s own (through the patching idiom)."""

    @functools.wraps(original)
    def run(self, *args, **kwargs):
        return family.run(self, original, args, kwargs)

    run._autotune_guard = True
    run._autotune_guard_wraps = original
    _patching.patch(owner, "run", run)
