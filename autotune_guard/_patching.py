"""The one patching idiom of every adapter (and of the process's hooks in ``evidence/signals``):
put a replacement on an owner (a class or a module) under the original's name, or change a
process-wide setting through the call that sets it, keep the original in one place, and undo it.

The name matters: a bound method pickles as ``getattr(instance, its function's __name__)``, and
Inductor's compile workers send kernels holding bound methods to the parent by pickle.

An undo never clobbers what another tool put on top (a profiler wrapping ``Autotuner.run`` after
the guard did): the original comes back only while the owner still holds the guard's replacement,
as wrapt's ``unwrap_object`` refuses to remove a wrapper that is not outermost. Putting the
original back there would silently drop the other tool's wrapper.
"""

from __future__ import annotations

import logging
import threading
from types import FunctionType, ModuleType

logger = logging.getLogger("autotune_guard")

_MISSING = object()
_lock = threading.Lock()
# (id of the owner, attribute name) -> Patch: every patch in force, so each original is kept once.
# A dict keeps insertion order, which is the order the patches were made in.
_in_force: dict[tuple[int, str], "Patch"] = {}


class Patch:
    """One attribute replaced on ``owner``; ``undo()`` puts the original back, ``redo()`` the
    replacement again."""

    __slots__ = ("owner", "name", "original", "replacement", "had_own", "kept", "aliased", "undone")

    def __init__(self, owner, name: str, original, replacement, had_own: bool, kept: bool = True):
        self.owner, self.name, self.original, self.replacement, self.had_own = owner, name, original, replacement, had_own
        self.kept = kept  # in the registry of patches in force (a shadow on an instance is not)
        self.aliased = False  # module-level aliases were pointed at the replacement (``rebind_aliases``)
        self.undone = False

    def __repr__(self):
        return f"<Patch {self.where()}{' (undone)' if self.undone else ''}>"

    def where(self) -> str:
        owner = self.owner
        label = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", None) or type(owner).__qualname__
        return f"{label}.{self.name}"

    def undo(self) -> bool:
        """Put the original back; True once this patch is undone (now or before). False, changing
        nothing, when the owner no longer holds the replacement: another tool put its own on top,
        and the guard's replacement stays in force under it (its ``original`` still answers)."""
        with _lock:
            if self.undone:
                return True
            if not self.kept:
                return self._undo_shadow()
            key = (id(self.owner), self.name)
            if _in_force.get(key) is not self:  # a registry entry never made, or another patch's
                return False
            if not self._exchange(self.replacement, self.original if self.had_own else _MISSING):
                _refused(self, "undone")
                return False
            del _in_force[key]
            self.undone = True
        if self.aliased:  # outside the lock: the walk over every module reads nothing of the registry
            _rebind(self.name, self.replacement, self.original)
        return True

    def redo(self) -> bool:
        """Put the replacement back after ``undo()``; True once it is in force. False, changing
        nothing, when another patch of that attribute is in force or the owner holds something
        else than the undo left (another tool changed it since)."""
        with _lock:
            if not self.undone:
                return True
            key = (id(self.owner), self.name)
            if self.kept and key in _in_force:  # its adapter patched that attribute again meanwhile
                return False
            if not self._exchange(self.original if self.had_own else _MISSING, self.replacement):
                _refused(self, "redone")
                return False
            if self.kept:
                _in_force[key] = self
            self.undone = False
        if self.aliased:
            _rebind(self.name, self.original, self.replacement)
        return True

    def forget(self) -> None:
        """The owner was given a value of its own over the replacement (a plain assignment, not a
        wrapper that calls ours): this patch is no longer in force and is dropped from the registry
        without putting anything back, so a new patch can go over what the owner holds now."""
        with _lock:
            key = (id(self.owner), self.name)
            if self.kept and _in_force.get(key) is self:
                del _in_force[key]
            self.undone = True

    def _exchange(self, expected, value) -> bool:
        """Put ``value`` where the owner holds ``expected``; False, changing nothing, where it holds
        something else."""
        if not self._holds(expected):
            return False
        self._put(value)
        return True

    def _holds(self, value) -> bool:
        """Whether the owner itself (not a base class) holds ``value`` (``_MISSING``: nothing)."""
        return vars(self.owner).get(self.name, _MISSING) is value

    def _put(self, value) -> None:
        if not self.kept:  # an instance: its __dict__ directly (a class attribute may be a data descriptor)
            if value is _MISSING:
                del self.owner.__dict__[self.name]
            else:
                self.owner.__dict__[self.name] = value
        elif value is _MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, value)

    def _undo_shadow(self) -> bool:
        if not self._exchange(self.replacement, self.original if self.had_own else _MISSING):  # replaced since
            _refused(self, "undone")
            return False
        self.undone = True
        return True


class Setting(Patch):
    """A process-wide setting that is not an attribute but is changed by one call returning the
    value it replaces (``signal.signal``, ``signal.set_wakeup_fd``): undone and redone like an
    attribute, under the same refusal rule (another tool's value set since stays)."""

    __slots__ = ("swap",)

    def __init__(self, owner, name: str, original, replacement, swap):
        super().__init__(owner, name, original, replacement, True)
        self.swap = swap

    def _exchange(self, expected, value) -> bool:
        try:
            found = self.swap(value)
        except (ValueError, OSError) as exc:  # signal settings change in the main thread only
            logger.debug("%s not changed: %s", self.where(), exc)
            return False
        if found != expected:
            self.swap(found)  # another tool's, set since: it stays
            return False
        return True


def _refused(found: Patch, what: str) -> None:
    logger.debug("%s not %s: it no longer holds what the guard left there (another tool changed it since); "
                 "left in place", found.where(), what)


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


def setting(owner, name: str, swap, replacement) -> Patch:
    """Change the process-wide setting ``name`` (kept under ``owner``, the module whose call
    changes it) through ``swap(value) -> the value replaced``; changing it again returns the patch
    in force. Raises what ``swap`` raises (``ValueError`` off the main thread for signals)."""
    with _lock:
        current = _in_force.get((id(owner), name))
        if current is not None:
            return current
        original = swap(replacement)
        found = _in_force[(id(owner), name)] = Setting(owner, name, original, replacement, swap)
        return found


def shadow(instance, name: str, value) -> Patch:
    """Put ``value`` in ``instance.__dict__`` under ``name``, in front of what its class has (or
    its own earlier value); the returned Patch undoes it. Instances come and go, so the registry
    does not keep shadows: whoever made one keeps its Patch."""
    attrs = instance.__dict__
    own = attrs.get(name, _MISSING)
    attrs[name] = value
    return Patch(instance, name, None if own is _MISSING else own, value, own is not _MISSING, kept=False)


def in_force() -> list[Patch]:
    """Every patch in force (shadows aside), newest first: the order to undo them in, so that a
    patch made on top of another's result is undone before it."""
    with _lock:
        return list(reversed(_in_force.values()))


def undo_all() -> list[Patch]:
    """Undo every patch in force, newest first; returns those it could not undo (another tool's
    replacement sits on top of them: they stay in force)."""
    return [found for found in in_force() if not found.undo()]


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
    count. Only aliases under the same name are found; local variables and renamed imports are not.
    The patch in force that replaced ``old`` by ``new`` points them back when it is undone."""
    with _lock:
        for found in _in_force.values():
            if found.name == name and found.original is old and found.replacement is new:
                found.aliased = True
    return _rebind(name, old, new)


def _rebind(name: str, old, new) -> int:
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
