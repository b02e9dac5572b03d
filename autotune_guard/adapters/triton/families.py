"""How the Triton adapter hands a library autotuner class to its family (``deciding.families``,
the registry beside the engine): the kind of owner it is, and the family's run put in place of
the library's own (``govern``). Families never import each other."""

from __future__ import annotations

import functools

from ...core.errors import GuardError
from ...deciding import families
from ...runtime import current
from ... import _patching


def family_of(owner) -> families.Family | None:
    """The registered family whose autotuner ``owner`` (a class defining ``run``) is, if any:
    asked among those that recognise a Triton ``Autotuner`` subclass or a ``KernelInterface`` one."""
    autotuner = any(c.__name__ == "Autotuner" and c.__module__ == "triton.runtime.autotuner" for c in owner.__mro__)
    return families.family_of(owner, "autotuner-run" if autotuner else "kernel-interface-run")


def govern(owner, original, family: families.Family) -> None:
    """Put the family's run in place of ``owner``'s own (through the patching idiom). A third-party
    family whose run fails with anything but the guard's own errors is disabled, named once, and the
    launch goes to the library's run (which raises again where the fault was the launch's own)."""
    foreign = families.third_party(family)

    @functools.wraps(original)
    def run(self, *args, **kwargs):
        if foreign and family.disabled:
            return original(self, *args, **kwargs)
        try:
            return family.run(self, original, args, kwargs)
        except GuardError:
            raise
        except Exception as exc:
            if not foreign:
                raise
            families.disable(family, f"its run raised {exc!r} at a launch of {type(self).__qualname__}")
            current().note_ungoverned(type(self).__qualname__, f"family {family.name} disabled")
            return original(self, *args, **kwargs)

    run._autotune_guard = True
    run._autotune_guard_wraps = original
    _patching.patch(owner, "run", run)
