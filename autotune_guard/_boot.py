"""Start-up: run by ``autotune_guard.pth`` when an ``AUTOTUNE_*`` variable is set, or a
batch-invariance switch (``VLLM_BATCH_INVARIANT``, ``TORCHINDUCTOR_BATCH_INVARIANT``: ``wakes``).

It must cost next to nothing and never raise (an exception in a ``.pth`` line is printed and the
program then runs unguarded; a ``SystemExit`` there kills the interpreter). So it only puts a tiny
watcher on ``sys.meta_path``; wrapt, python-dotenv and the settings are loaded when Triton or
torch starts being imported (``activation.arm``), and a bad setting fails that import, loudly.

Without ``AUTOTUNE_*`` at start-up the ``.pth`` line imports nothing and puts a finder of its own
on ``sys.meta_path`` that only compares names; when Triton or torch starts being imported it calls
:func:`late`: settings the program put in ``os.environ`` by then (a notebook's ``%env``, a
launcher) are honoured, and settings it puts there after Triton was imported are named at exit.
"""

import os
import sys


from . import _watch

# The one module-level state of start-up, kept here and not on the runtime's Guard: this module
# runs from the .pth line at every interpreter start, where importing the runtime (and the core
# it imports) would cost what an inactive or not-yet-needed guard must not. Its stage: "" (nothing
# done), LATE (Triton met without a setting: look again at exit) or ARMED (active).
_stage = ""
LATE, ARMED = "late", "armed"


def main(now: bool = False):
    """Entry point of the ``.pth`` line; idempotent (a venv runs every ``.pth`` twice). ``now``:
    Triton or torch is being imported already (arm at once, the watcher would come too late)."""
    global _stage
    if _stage == ARMED or os.environ.get("AUTOTUNE_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
        return
    if not now and not any(key.startswith("AUTOTUNE_") for key in os.environ) and not wakes(os.environ):
        return _sleep()  # the .pth line's cheap test let in a switch that is off (VLLM_BATCH_INVARIANT=false)
    first, _stage = not _stage, ARMED
    if first:
        _at_exit_last()
    if "_AUTOTUNE_GUARD_RUN" not in os.environ:
        # The run id the processes this one starts inherit (torchrun workers, mp.spawn children,
        # subprocesses): evidence files carry it so the report tells runs apart. Cheap: no import.
        os.environ["_AUTOTUNE_GUARD_RUN"] = f"{os.getpid()}-{id(os):x}-{os.urandom(4).hex()}"
    try:
        if now or "triton" in sys.modules or "torch" in sys.modules:
            _arm()
        else:
            _watch.watch(_arm)
    except Exception as exc:  # never raise from start-up; say so instead
        sys.stderr.write(f"autotune_guard: could not arm the import hook ({exc!r}); Triton runs unguarded\n")


def _sleep() -> None:
    """What the ``.pth`` line does where nothing wakes the guard: a finder that only compares names."""
    if not getattr(sys.meta_path[0], _watch.LATE_FINDER, 0):
        sys.meta_path.insert(0, type(sys.implementation)(
            **{_watch.LATE_FINDER: 1}, find_spec=lambda name, *rest: name in ("triton", "torch") and late(name) or None))


def _at_exit_last() -> None:
    """Register ``_at_exit`` with atexit, once (at the first stage). Not a step of the Guard's exit
    sequence: registered at start-up, before the runtime (and its one atexit handler) exists, it
    runs after that sequence, when the evidence is written, as it must since it may end the
    process; and an inactive process, whose settings it names, has no Guard to register with."""
    import atexit  # built in: no file is read

    atexit.register(_at_exit)


def _at_exit() -> None:
    """The last exit handler: armed, the verify cadence; else settings set too late are named."""
    if _stage == ARMED:
        _cadence_at_exit()
        _refused_at_exit()
    else:
        _name_settings_set_too_late()


def _cadence_at_exit() -> None:
    """A verify cadence that never fired is named, and under ``AUTOTUNE_VERIFY_STRICT=1`` fails
    the process (exit status 1), since no handler can set the status Python exits with otherwise."""
    barriers = sys.modules.get("autotune_guard.adapters.distributed.barriers")
    try:
        failed = barriers is not None and barriers.say_unchecked_cadence()
    except Exception as exc:
        sys.stderr.write(f"autotune_guard: could not check the verify cadence at exit ({exc!r})\n")
        return
    if failed:
        _exit_1()


def _refused_at_exit() -> None:
    """AUTOTUNE_ON_MISS=error_at_exit refused keys (named by the exit summary): the process fails."""
    runtime = sys.modules.get("autotune_guard.runtime")
    try:
        epoch = runtime.current().epoch if runtime is not None else None
        policy = epoch.settled_policy() if epoch is not None else None
        failed = epoch is not None and bool(epoch.refused) and getattr(policy, "on_miss", None) == "error_at_exit"
    except Exception as exc:
        sys.stderr.write(f"autotune_guard: could not check the refused keys at exit ({exc!r})\n")
        return
    if failed:
        _exit_1()


def _exit_1() -> None:
    import logging

    logging.shutdown()  # flushes the handlers; os._exit below would not
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(1)


def _arm():
    from . import activation

    activation.arm()


def late(name: str) -> None:
    """The inactive ``.pth``'s finder met ``triton`` or ``torch``: arm if the program has set an
    ``AUTOTUNE_*`` variable since start-up; at Triton without one, look again at exit. Finds nothing."""
    global _stage
    if _stage or not _watch.importing():  # a lookup (find_spec) is not the import
        return None
    try:
        if any(key.startswith("AUTOTUNE_") for key in os.environ) or wakes(os.environ):
            main(now=True)
        elif name == "triton":
            _stage = LATE
            _at_exit_last()
    except Exception as exc:  # a finder that raises would fail the program's import
        sys.stderr.write(f"autotune_guard: could not arm the import hook ({exc!r}); Triton runs unguarded\n")
    return None


def wakes(environ) -> bool:
    """A batch-invariance switch set (``VLLM_BATCH_INVARIANT`` not 0, ``TORCHINDUCTOR_BATCH_INVARIANT``
    1, as each library reads it): it asks for what a determinism request does, so it wakes the guard
    without an ``AUTOTUNE_*`` setting; the ``.pth`` line makes the same test (``core.switches`` says
    how it combines with the mode)."""
    if "VLLM_BATCH_INVARIANT" not in environ and "TORCHINDUCTOR_BATCH_INVARIANT" not in environ:
        return False  # an inactive start imports nothing more
    from .core import switches  # only where such a switch is set: its library's rule, read once

    return switches.wakes(environ)


def _name_settings_set_too_late() -> None:
    """At exit: ``AUTOTUNE_*`` variables set in the program after Triton was imported did nothing."""
    names = sorted(key for key in os.environ if key.startswith("AUTOTUNE_") and key != "AUTOTUNE_DISABLE")
    if names and _stage != ARMED:
        import logging

        logging.getLogger("autotune_guard").warning(
            "autotune_guard: %s %s set inside the program after Triton was imported, and had no effect: the guard "
            "reads its settings when Triton is imported; set them before that, or "
            "in the environment that starts Python", ", ".join(names), "was" if len(names) == 1 else "were")
