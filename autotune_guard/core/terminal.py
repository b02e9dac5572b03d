"""The one escaping rule for text shown on a terminal: the report's output and the guard's own log
lines alike. A kernel name, key, run id or note comes from files, stores and module names that other
people write; it must never clear the screen or retitle the terminal."""

from __future__ import annotations

import re

# Characters a terminal acts on (C0 but newline and tab, DEL, C1).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with each terminal control character written as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def on_one_line(text: str) -> str:
    """``visible``, newlines and tabs escaped too (``\\n``, ``\\t``): a value read from a file
    stays on its line."""
    return visible(text.replace("\n", "\\n").replace("\t", "\\t"))
