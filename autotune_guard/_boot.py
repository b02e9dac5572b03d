"""Start-up: run by ``autotune_guard.pth`` when an ``AUTOTUNE_*`` variable is set.

It must cost next to nothing and never raise (an exception in a ``.pth`` line is printed and the
program then runs unguarded; a ``SystemExit`` there kills the interpreter). So it only puts a tiny
watcher on ``sys.meta_path``; wrapt, python-dotenv and the settings are loaded when Triton or
torch starts being imported (``activation.arm``), and a bad setting fails that import, loudly.
"""

import os
import sys

from . import _watch

_armed = False


def main():
    """Entry point of the ``.pth`` line; idempotent (a venv runs every ``.pth`` twice)."""
    global _armed
    if _armed or os.environ.get("AUTOTUNE_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
        return
    _armed = True
    if "_AUTOTUNE_GUARD_RUN" not in os.environ:
        # The run id the processes this one starts inherit (torchrun workers, mp.spawn children,
        # subprocesses): evidence files carry it so the report tells runs apart. Cheap: no import.
        os.environ["_AUTOTUNE_GUARD_RUN"] = f"{os.getpid()}-{id(os):x}-{os.urandom(4).hex()}"
    try:
        if "triton" in sys.modules or "torch" in sys.modules:
            _arm()
        else:
            _watch.watch(_arm)
    except Exception as exc:  # never raise from start-up; say so instead
        sys.stderr.write(f"autotune_guard: could not arm the import hook ({exc!r}); Triton runs unguarded\n")


def _arm():
    from . import activation

    activation.arm()
