"""Every error autotune_guard raises on purpose, under one base class."""


class GuardError(Exception):
    """Base of autotune_guard's own errors: ``except autotune_guard.GuardError`` catches them all."""


class PolicyError(GuardError, ValueError):
    """A setting that cannot be carried out; the message names the variable, its value and what is allowed."""


class SelectionError(GuardError, RuntimeError):
    """A pinned autotuner could not be given a config (``AUTOTUNE_ON_MISS=error``)."""


class ConsensusError(GuardError, RuntimeError):
    """This rank cannot run the job's agreed config (claimer dead or hung, claimer failed, candidate
    lists differ, the Store is gone). It never falls back to a config of its own."""


class StoreError(GuardError, RuntimeError):
    """The job's c10d Store failed (unreachable, closed); a timeout is not an error here."""


class ChoiceMismatchError(GuardError, RuntimeError):
    """Ranks of one process group ran different configs for one kernel and key (raised on every
    rank of the group with ``AUTOTUNE_VERIFY_STRICT=1``)."""


class FileFormatError(GuardError, ValueError):
    """A file that cannot be used; the message starts with its path."""


class UnsafePathError(GuardError, PermissionError):
    """A file or directory in a place others can write that the guard will not use (a symlink, another
    user's, a mode others can reach); the message starts with its path."""

    def __str__(self):
        return f"{self.filename}: {self.strerror}" if self.filename else super().__str__()
