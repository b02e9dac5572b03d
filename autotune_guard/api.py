"""The public Python API: install a policy, read what was chosen. Nothing inside the package imports it."""

from __future__ import annotations

from collections.abc import Mapping

from . import activation, evidence
from . import _patching
from .core.model import digest_of
from .core.settings import AutotunePolicy, policy_from_environment, policy_from_settings
from .runtime import current


def install(policy: AutotunePolicy | Mapping | None = None, *, deterministic: bool = False) -> AutotunePolicy:
    """Apply ``policy`` to the whole process, replacing the previous one.

    ``None`` reads the ``AUTOTUNE_*`` environment (and ``AUTOTUNE_ENV_FILE``); a mapping takes
    ``AUTOTUNE_*`` names or field names. An omitted mode is derived: a record path selects record,
    ``deterministic`` pinned, torch's deterministic flag (looked at the first launch) pinned, else
    auto. Raises when the policy cannot be carried out (a bad value, an unwritable record path, an
    unsupported Triton); the previous policy then stays in place. Without Triton imported yet,
    the policy is applied when it is. After ``uninstall()`` the guard's patches are put back.
    """
    if policy is None:
        new = policy_from_environment(deterministic=deterministic)
    elif isinstance(policy, AutotunePolicy):
        new = policy
    elif isinstance(policy, Mapping):
        new = policy_from_settings(policy, deterministic=deterministic)
    else:
        raise TypeError(f"install() takes an AutotunePolicy, a mapping or None, not {type(policy).__name__}")
    guard = current()
    ended = guard.epoch
    activation.carry_out(guard, new)
    evidence.write_files(ended_epoch=ended)  # the replaced policy's record is whole on disk
    _put_back(guard.held(UNDONE, list))
    return new


# The patches uninstall() undid, oldest first, for the next install() to put back: an adapter
# patches only once per process (behind post-import hooks wrapt keeps and once-flags), so it
# would not patch them again by itself.
UNDONE = "patches undone by uninstall"


def uninstall() -> None:
    """No policy, and every patch of the guard undone: each foreign attribute is its own again
    (``Autotuner.run`` is Triton's; ``sys.exit``, ``sys.excepthook``, SIGTERM's handler and the
    wakeup fd the program's), unless another tool wrapped it after the guard did; that one stays,
    with the guard's replacement under it passing every call through. ``install()`` puts the
    patches back."""
    guard = current()
    ended = guard.epoch
    guard.replace(None)  # first: the adapters drop what they hung on instances for the old policy
    evidence.write_files(ended_epoch=ended)  # what it chose is whole on disk (a record cut short can't merge)
    evidence.configure(None)
    patches = _patching.in_force()
    kept = _patching.undo_all()
    guard.held(UNDONE, list).extend(reversed([found for found in patches if found not in kept]))


def _put_back(undone: list) -> None:
    """Redo the patches ``uninstall()`` undid that no adapter has made again meanwhile."""
    while undone:
        undone.pop(0).redo()


def active_policy() -> AutotunePolicy | None:
    """The policy currently carried out, if any (a derived mode as settled at the first launch)."""
    return current().epoch.settled_policy()


def choice_log() -> dict[str, str]:
    """The per-(kernel, key) choices this process has made under the installed policy:
    ``arch|module.function|key -> signature;how``."""
    return current().epoch.log.snapshot()[0]


def choice_digest() -> str:
    """A hash of every choice this process has made so far (equal logs, equal digests)."""
    return digest_of(choice_log())


def ungoverned() -> dict[str, str]:
    """The kernels whose choices this process made without the guard governing them, and why."""
    return dict(current().ungoverned)


__all__ = ["install", "uninstall", "active_policy", "choice_log", "choice_digest", "ungoverned"]
