"""``report retune TABLE --kernel NAME [--key KEY]...``: the next consensus run times the named
entries again (``tables.RETUNE``); its winner replaces each entry, and the entry it replaces is kept
beside it with who added it (``core.table_writes``). Pinned runs go on pinning the entry meanwhile.
``--undo`` takes the request back. A table directory names its tables; the change is made under the
lock consensus growth takes (``core.table_edit``)."""

from __future__ import annotations

import getpass
import os
import socket
import time

from ..core.errors import InputError
from ..core.table_edit import edit_table
from ..core.tables import RETUNE


def add_parser(commands, common) -> None:
    retune = commands.add_parser(
        "retune", parents=[common], help="make the next consensus run time table entries again",
        description="Mark table entries to be timed again by the next consensus run (AUTOTUNE_MODE=consensus with this "
                    "table in AUTOTUNE_TABLE_PATH): its winner replaces each entry, the old one kept beside it. "
                    "Pinned runs keep pinning the entry until then.")
    retune.add_argument("table", metavar="TABLE", help="a table file (<arch>.json) or a table directory")
    retune.add_argument("--kernel", required=True, metavar="NAME",
                        help="the kernel, as the table names it (report show TABLE lists them)")
    retune.add_argument("--key", action="append", default=[], metavar="KEY",
                        help="a tuning key of it, as the table spells it (repeat for several; default: every key)")
    retune.add_argument("--undo", action="store_true", help="take the request back")
    retune.add_argument("--dry-run", action="store_true", help="say what would be marked, change nothing")
    retune.set_defaults(run=run)


def run(args, out) -> int:
    paths = _tables(args.table)
    marked = 0
    for path in paths:
        marked += _retune(path, args, out)
    if not marked:
        raise InputError(f"{args.table}: no table there holds kernel {args.kernel}"
                         + (f" with key(s) {', '.join(args.key)}" if args.key else ""))
    return 0


def _tables(given: str) -> list[str]:
    if os.path.isdir(given):
        found = sorted(os.path.join(given, name) for name in os.listdir(given)
                       if name.endswith(".json") and not name.startswith("."))
        if not found:
            raise InputError(f"{given}: a directory without tables (<arch>.json)")
        return found
    if not os.path.exists(given):
        raise InputError(f"{given}: no such file or directory")
    return [given]


def _retune(path: str, args, out) -> int:
    """Mark (or unmark) the named entries of one table file; how many."""
    chosen: list = []

    def change(document):
        entries = (document or {}).get("kernels", {}).get(args.kernel)
        if not entries:
            return None
        keys = args.key or [key for key in entries]
        missing = [key for key in keys if key not in entries]
        if missing:
            raise InputError(f"{path}: kernel {args.kernel} has no entry for key(s) {', '.join(missing)} "
                             f"(it has: {', '.join(sorted(entries))})")
        asked = {kernel: dict(keys) for kernel, keys in (document.get(RETUNE) or {}).items() if isinstance(keys, dict)}
        mine = asked.setdefault(args.kernel, {})
        who = {"by": f"{getpass.getuser()}@{socket.gethostname()}", "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        for key in keys:
            if args.undo:
                mine.pop(key, None)
            else:
                mine[key] = who
        chosen.extend(keys)
        asked = {kernel: keys for kernel, keys in asked.items() if keys}
        if args.dry_run:
            return None
        return {**{k: v for k, v in document.items() if k != RETUNE}, **({RETUNE: asked} if asked else {})}

    edit_table(path, change)
    verb = ("would " if args.dry_run else "") + ("unmark" if args.undo else "mark")
    for key in chosen:
        out.write(f"{path}: {verb} kernel {args.kernel} key ({key})"
                  + ("" if args.undo else ": the next consensus run times it again") + "\n")
    return len(chosen)
