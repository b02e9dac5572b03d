"""Where the report's output goes: JSON as ``json.dump(indent=1)`` writes it, a long list of it
streamed item by item; and ``-o FILE`` written whole or not at all (a temporary file in the
target's directory, renamed over it once the command has finished)."""

from __future__ import annotations

import json
import os
import tempfile

from ..core.errors import InputError
from ..core.jsonfile import finite, remove_quietly
from ..core.terminal import visible  # the one rule, shared with the guard's log lines


class Visible:
    """A text stream whose writes are ``visible``: every text the report writes goes through one
    (stdout, stderr and ``-o`` files alike; JSON escapes these characters itself)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(visible(text))

    def __getattr__(self, name):
        return getattr(self.stream, name)


def dump(document, out) -> None:
    json.dump(finite(document), out, indent=1, sort_keys=False, allow_nan=False)
    out.write("\n")


def _nested(value, depth: int) -> str:
    return json.dumps(finite(value), indent=1, allow_nan=False).replace("\n", "\n" + " " * depth)


def dump_streamed(fields: list, out) -> None:
    """``dump`` of a dict given as (name, value) pairs, where a value may be an iterator of items
    (written one at a time, never held as a list): the same text as ``dump`` of the whole dict."""
    out.write("{")
    for n, (name, value) in enumerate(fields):
        out.write(("," if n else "") + "\n " + json.dumps(name) + ": ")
        if isinstance(value, (dict, list, tuple, str, int, float, bool, type(None))):
            out.write(_nested(value, 1))
            continue
        count = 0
        for count, item in enumerate(value, 1):
            out.write(("," if count > 1 else "[") + "\n  " + _nested(item, 2))
        out.write("\n ]" if count else "[]")
    out.write("\n}\n" if fields else "}\n")


def write_atomically(path: str, produce) -> int:
    """Run ``produce(out)`` into a temporary file beside ``path`` and rename it over ``path`` when
    it returns: a failure (of the command or of the write) removes the temporary and leaves
    ``path`` as it was, never half a file.  Returns what ``produce`` returned."""
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        raise InputError(f"{path}: -o names a directory; give the file to write, like {os.path.join(path, 'report.html')}",
                         path=path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(path) + ".", dir=directory)
    except OSError as exc:
        raise InputError(f"{path}: cannot be written ({exc.strerror or exc})", path=path) from None
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            status = produce(Visible(out))
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise InputError(f"{path}: cannot be written ({exc.strerror or exc})", path=path) from None
    finally:
        if tmp is not None:
            remove_quietly(tmp)
    return status
