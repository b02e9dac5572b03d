"""How an error that nobody catches is shown, once the guard is active (``sys.excepthook``).

A bad setting fails ``import triton`` from inside Triton's and wrapt's import machinery: Python's
own report is a wall of frames that are not the user's, with the one line that matters at the
bottom (four times over under a 2-rank torchrun). An uncaught error the guard raised at activation
is shown as that one line and what to do next; an on-purpose refusal (``AUTOTUNE_ON_MISS=error``)
as a few lines naming every key refused and the fix; ``AUTOTUNE_TRACEBACK=1`` shows the frames as usual.
A program that catches the exception gets it whole: only the uncaught report changes.

Triton's ``0 active drivers`` (a timing mode on a machine without a GPU) keeps its traceback and
gets the guard's hint after it. Every other exception goes to the hook the program had.
"""

from __future__ import annotations

import os
import sys

from .core.errors import GuardError, SelectionError

TRACEBACK_VARIABLE = "AUTOTUNE_TRACEBACK"
_MARK = "_autotune_guard_at_activation"
TIMING_MODES = ("auto", "record", "consensus")


def mark_activation_error(exc: BaseException) -> None:
    """``exc`` failed the guard's activation: shown short if nobody catches it, when it is the
    guard's own verdict on a setting (a GuardError, or an OSError naming an ``AUTOTUNE_*`` path)."""
    if isinstance(exc, GuardError) or (isinstance(exc, OSError) and str(exc).startswith("AUTOTUNE_")):
        try:
            setattr(exc, _MARK, True)
        except Exception:  # an exception type that refuses attributes keeps Python's report
            return
        install()


class _ShortGuardErrors:
    """The ``sys.excepthook`` wrapper; ``previous`` is the hook the program had."""

    def __init__(self, previous):
        self.previous = previous
        self.mode = None  # the mode in force, for the hint on a timing failure

    def __call__(self, kind, value, tb):
        if getattr(value, _MARK, False) and not _traceback_wanted():
            # Python's own report goes to stderr too; this replaces it (the logger may not be set up yet).
            sys.stderr.write(f"autotune_guard: error: {value}\n"
                             f"  (Triton was being imported; {TRACEBACK_VARIABLE}=1 shows the traceback)\n")
            return
        refusal = _refusal_in(value)
        if refusal is not None and not _traceback_wanted():
            try:
                lines = refusal_lines(refusal)
            except Exception:  # never hide the error behind one of ours
                lines = None
            if lines:
                sys.stderr.write("".join(line + "\n" for line in lines))
                return
        self.previous(kind, value, tb)
        hint = no_driver_hint(value, self.mode)
        if hint:
            sys.stderr.write(f"autotune_guard: {hint}\n")


def _refusal_in(exc: BaseException | None):
    """The guard's own refusal (a SelectionError: AUTOTUNE_ON_MISS=error and the like) that is
    ``exc`` or its cause (a wrapper such as Inductor's may carry it), else None."""
    for _ in range(8):
        if exc is None or isinstance(exc, SelectionError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


MAX_KEYS = 5  # keys named one a line; a refusal's report stays within 10 lines a rank


def refusal_lines(refusal: BaseException) -> list[str]:
    """A refusal as a few lines tagged with the rank: what was refused, every key this process
    refused, why the tables did not serve the last one, the fix, and how to see the traceback."""
    from .core.misses import fix_hint, miss_reasons
    from .runtime import current

    guard = current()
    epoch, tag = guard.epoch, f"autotune_guard[rank {_rank(guard)}]"
    refused, policy = list(epoch.refused), epoch.settled_policy()
    lines = [f"refused: {str(refusal).removeprefix('autotune_guard: ')}"]
    if len(refused) > 1:
        lines.append(f"every key refused in this process ({len(refused)}):")
        lines += [f"  {key.what()}" for key in refused[:MAX_KEYS]]
        lines += [f"  ... and {len(refused) - MAX_KEYS} more"] if len(refused) > MAX_KEYS else []
    if refused and policy is not None:
        last = refused[-1]
        lines.append(f"tables: {'; '.join(miss_reasons(policy.table_path, last.arch, last.kernel, last.key))}")
        lines.append(f"fix: {fix_hint(policy.table_path, last.arch)}")
    lines.append(f"({TRACEBACK_VARIABLE}=1 shows the traceback)")
    return [f"{tag} {line}" for line in lines]


def _rank(guard) -> str:
    try:
        return str(guard.facts.get("rank_world")[0])
    except Exception:  # no rank source: the launcher's variable
        return os.environ.get("RANK", "0")


def _traceback_wanted() -> bool:
    return os.environ.get(TRACEBACK_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def no_driver_hint(exc: BaseException, mode: str | None) -> str | None:
    """What to do when a timing mode met Triton's ``0 active drivers`` (no GPU), else None."""
    if mode not in TIMING_MODES or not isinstance(exc, RuntimeError) or "active drivers" not in str(exc):
        return None
    return (f"mode {mode} times candidate configs, and Triton found no GPU driver ({exc}). Without a GPU: "
            "AUTOTUNE_MODE=pinned chooses without timing; TRITON_INTERPRET=1 runs kernels on the CPU, where a "
            "timing mode needs a timer of the kernel's own (triton.autotune(..., do_bench=...)), since Triton's "
            "default timer needs a GPU")


def install(mode: str | None = None) -> None:
    """Put the wrapper on ``sys.excepthook`` (once; it chains to the hook the program had)."""
    hook = sys.excepthook
    if not isinstance(hook, _ShortGuardErrors):
        hook = sys.excepthook = _ShortGuardErrors(hook)
    if mode is not None:
        hook.mode = mode
