"""``AUTOTUNE_*`` variables the program changes in ``os.environ`` after the guard read them.

The guard reads its settings when Triton is imported (and at ``install()`` with no policy): a
variable set, changed or removed later does nothing. ``remember`` keeps what each read saw;
``set_too_late_line`` names, once at exit, every variable that differs now and says it had no
effect (``_boot`` names those of a process the guard never activated in).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Mapping

from .store_url import hide_password, split_table_path

logger = logging.getLogger("autotune_guard")

# Read when they are used, not at start-up: a change to them takes effect.
READ_WHEN_USED = ("AUTOTUNE_TRACEBACK", "AUTOTUNE_DISABLE")

_lock = threading.Lock()
_read: dict[str, str] | None = None  # the AUTOTUNE_* variables of os.environ at the last read; None: never read


def remember(environ: Mapping[str, str]) -> None:
    """Keep the ``AUTOTUNE_*`` variables of ``environ`` (os.environ, as a read of the settings saw it)."""
    global _read
    with _lock:
        _read = _ours(environ)


def set_too_late_line(environ: Mapping[str, str] | None = None) -> str | None:
    """One line naming each variable whose value in ``environ`` differs from the one the guard read
    (set, changed, removed), and that it had no effect; None when none differs or nothing was read."""
    with _lock:
        read = _read
    if read is None:
        return None
    now = _ours(os.environ if environ is None else environ)
    changed = sorted(name for name in {*read, *now} if read.get(name) != now.get(name))
    if not changed:
        return None
    named = ", ".join(f"{name}={_shown(now.get(name))} (read as {_shown(read.get(name))})" for name in changed)
    verb = "was" if len(changed) == 1 else "were"
    return (f"{named} {verb} changed inside the program after the guard read its settings, and had no effect: the "
            "guard reads them when Triton is imported; set them before that or in the environment that starts "
            "Python, or call autotune_guard.install() after setting them")


def say_set_too_late() -> None:
    """The guard's exit step: the line of ``set_too_late_line``, at WARNING, where there is one."""
    line = set_too_late_line()
    if line:
        logger.warning("%s", line)


def _ours(environ: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in environ.items()
            if name.startswith("AUTOTUNE_") and name not in READ_WHEN_USED}


def _shown(value: str | None) -> str:
    """A value as said: unset, or with any store URL's password hidden, cut at 80 characters."""
    if value is None:
        return "unset"
    if "://" in value:
        value = os.pathsep.join(hide_password(entry) for entry in split_table_path(value))
    return repr(value if len(value) <= 80 else value[:77] + "...")
