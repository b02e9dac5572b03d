"""Every error autotune_guard raises on purpose, under one base class.

Each also subclasses the builtin a caller would catch without knowing the guard (``ValueError``
for a bad setting, ``PermissionError`` for a path it will not use), as wrapt's and coverage.py's
errors do. Each carries, besides its one-line message, the fields a handler needs to act without
parsing the message: given as keywords, read as attributes, None when the raiser did not know.
"""


class GuardError(Exception):
    """Base of autotune_guard's own errors: ``except autotune_guard.GuardError`` catches them all.

    ``fields`` names a class's keyword fields; ``str(error)`` is the message alone, so a field
    never changes what is printed. The fields survive pickling (a worker process's error)."""

    fields: tuple[str, ...] = ()

    def __init__(self, *args, **given):
        unknown = sorted(set(given) - set(self.fields))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(unknown)}; fields: {', '.join(self.fields)}")
        super().__init__(*args)
        for name in self.fields:
            setattr(self, name, given.get(name))


class PolicyError(GuardError, ValueError):
    """A setting that cannot be carried out; the message names the variable, its value and what is
    allowed. ``variable`` (``AUTOTUNE_MODE``), ``value`` (as given), ``allowed`` (the allowed
    values, or a phrase saying what is allowed)."""

    fields = ("variable", "value", "allowed")


class SelectionError(GuardError, RuntimeError):
    """A pinned autotuner could not be given a config (``AUTOTUNE_ON_MISS=error``). ``kernel``
    (``module.function``), ``key`` (the tuning key's text), ``arch``."""

    fields = ("kernel", "key", "arch")


class ConsensusError(GuardError, RuntimeError):
    """This rank cannot run the job's agreed config (claimer dead or hung, claimer failed, candidate
    lists differ, the Store is gone). It never falls back to a config of its own. ``kernel``,
    ``key``, and ``claimer`` (the rank that claimed the tuning) where known."""

    fields = ("kernel", "key", "claimer")


class StoreError(GuardError, RuntimeError):
    """The job's c10d Store failed (unreachable, closed); a timeout is not an error here.
    ``store_key``: the Store key being read or written, where known."""

    fields = ("store_key",)


class ChoiceMismatchError(GuardError, RuntimeError):
    """Ranks of one process group ran different configs for one kernel and key (raised on every
    rank of the group with ``AUTOTUNE_VERIFY_STRICT=1``). ``ranks`` (the group's), ``conflicts``
    (what differed)."""

    fields = ("ranks", "conflicts")


class VerificationError(GuardError, RuntimeError):
    """A check of the ranks' choices could not complete (a collective of the guard's own failed or
    timed out); the program's own collectives are not affected. ``where`` (the barrier or call),
    ``ranks``."""

    fields = ("where", "ranks")


class UnsupportedError(GuardError, RuntimeError):
    """This environment cannot carry out what was asked (a Triton older than the guard supports,
    Triton's default timer without a GPU driver). ``what``: the missing piece; ``version`` where a
    version is at fault."""

    fields = ("what", "version")


class ActivationError(GuardError, ImportError):
    """The guard is active (an ``AUTOTUNE_*`` variable is set) but cannot start: a dependency of its
    own cannot be imported. ``dependency``: its name."""

    fields = ("dependency",)


class FileFormatError(GuardError, ValueError):
    """A file that cannot be used; the message starts with its path. ``path``."""

    fields = ("path",)


class UnsafePathError(GuardError, PermissionError):
    """A file or directory in a place others can write that the guard will not use (a symlink, another
    user's, a mode others can reach); the message starts with its path, also ``path`` (the
    ``OSError``'s ``filename``)."""

    def __str__(self):
        return f"{self.filename}: {self.strerror}" if self.filename else super().__str__()

    @property
    def path(self):
        return self.filename


class OutputPathError(PolicyError, PermissionError):
    """A path setting (``AUTOTUNE_RECORD_PATH``, ``AUTOTUNE_DIGEST_PATH``, ``AUTOTUNE_TABLE_PATH``)
    naming a place the guard cannot write: a ``PolicyError`` that is also the ``PermissionError``
    the guard raised there before. ``variable``, ``value``, ``path`` (the directory or file at fault)."""

    fields = ("variable", "value", "allowed", "path")


# --- the report's (python -m autotune_guard.report): each is exit status 2, one line ------------


class InputError(GuardError):
    """Input the report cannot use (a file, a pattern, an output path); the message (one line)
    names it, and ``path`` where it is one path. The CLI turns each into exit 2."""

    fields = ("path",)


class CacheError(InputError):
    """A Triton cache directory or file that cannot be turned into a table: one line, naming it."""


class ReaderError(InputError):
    """A worker process of the report ended before it sent a file (killed, out of memory): the file
    is named (``path``)."""


class FamilyError(GuardError, TypeError):
    """An autotuner family that cannot be registered (``deciding.families.register``): not shaped
    as a family. ``family``: its name or type; ``problem``: what is wrong."""

    fields = ("family", "problem")
