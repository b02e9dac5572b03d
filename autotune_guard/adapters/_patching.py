"""The one patching idiom of every adapter: put a replacement on an owner (a class or a module)
under the original's name, keep the original in one place, and undo it.

The name matters: a bound method pickles as ``getattr(instance, its function's __name__)``, and
Inductor's compile workers send kernels holding bound methods to the parent by pickle.
"""

from __future__ import annotations

import threading
from types import FunctionType, ModuleType

_MISSING = object()
_lock = threading.Lock()
# (id of the owner, attribute name) -> Patch: every patch in force, so each original is kept once.
_in_force: dict[tuple[int, str], "Patch"] = {}


class Patch:
    """One attribute replaced on ``owner``; ``undo()`` puts the original back."""

    __slots__ = ("owner", "name", "original", "replacement", "had_own", "kept")

    def __init__(self, owner, name: str, original, replacement, had_own: bool, kept: bool = True):
        self.owner, self.name, self.original, self.replacement, self.had_own = owner, name, original, replacement, had_own
        self.kept = kept  # in the registry of patches in force (a shadow on an instance is not)

    def undo(self) -> None:
        with _lock:
            if not self.kept:
                self._undo_shadow()
                return
            if _in_force.get((id(self.owner), self.name)) is not self:
                return
            del _in_force[(id(self.owner), self.name)]
            if self.had_own:
                setattr(self.owner, self.name, self.original)
            else:
                delattr(self.owner, self.name)

    def _undo_shadow(self) -> None:
        attrs = self.owner.__dict__
        if attrs.get(self.name, _MISSING) is not self.replacement:  # replaced since: not ours to undo
            return
        if self.had_own:
            attrs[self.name] = self.original
        else:
            del attrs[self.name]


def patch(owner, name: str, replacement) -> Patch:
    """Replace ``owner.name`` by ``replacement`` (renamed ``name``); patching it again returns the
    patch in force. The original is what ``owner`` had itself, else what it inherited."""
    with _lock:
        current = _in_force.get((id(owner), name))
        if current is not None:
            return current
        own = vars(owner).get(name, _MISSING)
        original = own if own is not _MISSING else getattr(owner, name)
        if isinstance(replacement, FunctionType):  # (a wrapt wrapper forwards attributes to the original)
            replacement.__name__ = name
        setattr(owner, name, replacement)
        found = _in_force[(id(owner), name)] = Patch(owner, name, original, replacement, own is not _MISSING)
        return found


def shadow(instance, name: str, value) -> Patch:
    """Put ``value`` in ``instance.__dict__`` under ``name``, in front of what its class has (or
    its own earlier value); the returned Patch undoes it. Instances come and go, so the registry
    does not keep shadows: whoever made one keeps its Patch."""
    attrs = instance.__dict__
    own = attrs.get(name, _MISSING)
    attrs[name] = value
    return Patch(instance, name, None if own is _MISSING else own, value, own is not _MISSING, kept=False)


def original(owner, name: str):
    """What ``owner.name`` was before the guard patched it (``owner.name`` itself if it is not patched)."""
    found = _in_force.get((id(owner), name))
    return found.original if found is not None else getattr(owner, name)


def patched(owner, name: str) -> Patch | None:
    return _in_force.get((id(owner), name))


def is_replacement(function) -> bool:
    """Whether ``function`` is one the guard put in place of another."""
    return any(found.replacement is function for found in list(_in_force.values()))


def rebind_aliases(name: str, old, new) -> int:
    """Point every module-level alias ``name`` of ``old`` at ``new`` (a module that ran
    ``from torch.distributed import barrier`` before the patch holds the original); returns the
    count. Only aliases under the same name are found; local variables and renamed imports are not."""
    import sys

    count = 0
    for module in list(sys.modules.values()):
        if not isinstance(module, ModuleType):
            continue
        # object.__getattribute__: a lazily loaded module must not be loaded by looking at it
        namespace = object.__getattribute__(module, "__dict__")
        if namespace.get(name) is old:
            namespace[name] = new
            count += 1
    return count
