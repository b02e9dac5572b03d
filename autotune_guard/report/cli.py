"""The command line: its options, the dispatch to one module per subcommand, the exit status."""

from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from ..core.errors import GuardError
from . import audit, cache_import, diff, merge, prune, readers, retune, show, store
from .output import Visible, write_atomically

COMMANDS = ("show", "merge", "diff", "import", "retune", "prune", "audit", "store-export", "store-import", "store-upgrade")


def _prog() -> str:
    """How this command was called: the console script by its name, else the module."""
    called = os.path.basename(sys.argv[0] if sys.argv else "")
    return called if called.startswith("autotune-guard-report") else "python -m autotune_guard.report"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=_prog(),
        description="Read autotune_guard record and choices files; merge records into a table; compare runs. "
                    "FILES are files, glob patterns, or the prefix given to AUTOTUNE_RECORD_PATH/AUTOTUNE_DIGEST_PATH "
                    "(runs/rec reads runs/rec.rank*.json). A table is a FILE too: a table file (<dir>/<arch>.json) "
                    "or a table folder (AUTOTUNE_TABLE_PATH's directory: every table in it), for show and diff "
                    "(merge reads record files, prune and retune one table file). Exit status: 0 done, 1 disagreement with --check (one line on stderr says so), "
                    "2 unusable input.")
    top.add_argument("--version", action="version", version=f"autotune_guard {__version__}")
    commands = top.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--check", action="store_true", help="exit 1 when ranks or runs disagree (a CI gate)")
    common.add_argument("--all-runs", action="store_true",
                        help="read the files of every run the arguments name; by default files of runs other than "
                             "the latest (by the run id each file carries) are named on stderr and left out")
    for command in (show, merge, diff, cache_import, retune, prune, audit):
        command.add_parser(commands, common)
    store.add_parsers(commands, common)  # table stores (redis://): export, import
    for name in ("show", "merge", "diff"):  # the commands that read evidence files
        commands.choices[name].add_argument(
            "--jobs", type=_jobs, metavar="N",
            help=f"read the files on N processes (default: the cores this process may use, at most {readers.MAX_JOBS}, "
                 f"once the files are larger than {readers.PARALLEL_FROM_BYTES // 2**20} MiB in all; 1 reads them in "
                 "this one)")
    return top


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes (a whole number, 1 or more)")
    return value


def main(argv=None) -> int:
    """The report's exit status; its text goes to stdout and stderr with terminal control
    characters escaped (``output.Visible``); Ctrl-C ends it with one line and status 130."""
    stderr = sys.stderr
    sys.stderr = Visible(stderr)
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, not at exit: Ctrl-C while a full pipe holds the output is still one line
        return status
    except KeyboardInterrupt:
        print(f"{_prog()}: interrupted", file=stderr)
        return 130
    finally:
        sys.stderr = stderr


def _main(argv) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version"):
        argv.insert(0, "show")  # `report FILES...`
    args = parser().parse_args(argv)
    if not getattr(args, "run", None):
        parser().print_usage(sys.stderr)
        print(f"{_prog()}: error: give a command ({', '.join(COMMANDS)}) or files", file=sys.stderr)
        return 2
    try:
        if store.needs_store(args):  # show redis://..., merge -o redis://...
            return store.with_store_arguments(args, args.run, Visible(sys.stdout))
        if getattr(args, "write_to", None):
            return _checked(args, write_atomically(args.write_to, lambda out: args.run(args, out)))
        status = args.run(args, Visible(sys.stdout))
        sys.stdout.flush()  # here, not at exit, so that a reader who left is seen below
        return _checked(args, status)
    except GuardError as exc:  # InputError, and any unusable file the core names
        message = " ".join(str(exc).split())  # one line, whatever a file's keys hold
        if len(message) > 1000:
            message = message[:1000] + " ..."
        print(f"{_prog()}: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `... | head`: the reader left. The check's verdict stands (computed before any output),
        # so `set -o pipefail` still sees ranks that disagree.
        _silence_stdout()
        return _checked(args, getattr(args, "check_status", 0))


def _checked(args, status: int) -> int:
    """A --check that fails ends with one line on stderr saying so (stdout may be JSON or a page)."""
    if getattr(args, "check", False) and status == 1:
        why = getattr(args, "check_why", "see the report above")
        print(f"{_prog()} {args.command} --check: FAILED, exit status 1: {why}", file=sys.stderr)
    return status


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the flush at exit does not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass

