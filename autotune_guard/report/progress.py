"""A progress line on stderr for long reads of many files."""

from __future__ import annotations

import sys
import time


class Progress:
    """``read N/M files`` on stderr, rewritten in place, for a read past a few seconds, and
    only when stderr is a terminal (a CI log gets no progress lines)."""

    AFTER_S = 3.0

    def __init__(self, total: int):
        self.total, self.done_count, self.began, self.shown = total, 0, time.monotonic(), False
        try:
            self.terminal = sys.stderr.isatty()
        except (AttributeError, ValueError):
            self.terminal = False

    def step(self) -> None:
        self.done_count += 1
        if self.terminal and (self.shown or time.monotonic() - self.began > self.AFTER_S):
            self.shown = True
            print(f"\rpython -m autotune_guard.report: read {self.done_count}/{self.total} files", end="",
                  file=_raw(sys.stderr), flush=True)  # its own \r, past the escaping of file text

    def done(self) -> None:
        if self.shown:
            print(file=sys.stderr)


def _raw(stream):
    """The stream under ``output.Visible`` (which writes a carriage return as text)."""
    return getattr(stream, "stream", stream)
