"""What the report commands read: record, choices and table files (checked by ``core.schema``),
found by prefix or pattern, of the latest run, labelled; each file's entries reduced by a fold as
it is read (``rows.py``, ``tally.py``; on worker processes: ``readers.py``).  Plain data."""

from __future__ import annotations

import glob
import os
import re
import stat
import sys
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass

from .. import __version__
from ..core.errors import InputError  # (defined with every other error; importable from here as before)
from ..core.jsonfile import JOURNAL_SUFFIX
from ..core.safe_files import user_name
from ..core.model import ChoiceKey
from ..core.schema import JOURNAL_LEFT_OUT
from . import readers
from .progress import Progress

# <prefix>.rank<N>.json, and <prefix>.rank<N>.<host>-<pid>.json: one file per process
_RANK_FILE = re.compile(r"\.rank(\d+)(?:\.[A-Za-z0-9_-]+)?\.json$")
MADE_BY = f"autotune_guard {__version__} report"  # what a written table's ``source.by`` says, plus the command


# --- reading ------------------------------------------------------------------------------------

@dataclass
class Source:
    """One input file."""

    path: str
    kind: str  # record | choices | table
    document: dict
    label: str = ""
    journal: str | None = None  # the journal read with it (a process that did not finish its file)
    entries: int | None = None  # set when the entries went to a fold (``read_sources``)
    index: int = -1  # its place among the files a fold was given (``rows.Rows``)

    @property
    def rank(self):
        return self.document.get("rank")

    @property
    def complete(self) -> bool:
        """Written at a normal exit: any other ending (a signal, an exception) is partial."""
        return self.document.get("complete") is True and not self.document.get("ended")

    @property
    def ended(self) -> str:
        """How the process ended, as the file says: ``normal exit``, ``SIGTERM``, ``exception``,
        ``still running or killed`` (no final write)..."""
        if self.document.get("ended"):
            return str(self.document["ended"])
        return "normal exit" if self.document.get("complete") is True else "still running or killed"

    @property
    def attempt(self) -> int:
        return self.document.get("attempt") or 0

    @property
    def arch(self):
        return self.document.get("arch")


def expand(arg: str) -> list[str]:
    """The files one command-line argument names: itself, ``ARG.rank*.json`` (read literally:
    a prefix may hold ``[``, ``*`` or ``?``), else a glob's matches. A directory (a table
    directory, as AUTOTUNE_TABLE_PATH names it) gives the ``.json`` files in it."""
    if os.path.isdir(arg):
        found = sorted(p for p in glob.glob(os.path.join(glob.escape(arg), "*.json")) if os.path.isfile(p))
        if not found:
            raise InputError(f"{arg}: is a directory holding no .json file (a table directory holds <arch>.json; "
                             f"a run's files are named by their prefix, like {os.path.join(arg, 'rec')})", path=arg)
        return _by_rank(found)
    if os.path.exists(arg):
        return [arg]
    found = [p for p in glob.glob(glob.escape(arg) + ".rank*.json") if _RANK_FILE.search(p[len(arg):])]
    if found:
        return _by_rank(found)
    if glob.has_magic(arg):
        found = sorted(p for p in glob.glob(arg) if not os.path.isdir(p))
        if found:
            return _by_rank(found)
        raise InputError(f"{arg}: no file matches, and no rank files {arg}.rank<N>[.<host>-<pid>].json", path=arg)
    raise InputError(f"{arg}: no such file, and no rank files {arg}.rank<N>[.<host>-<pid>].json", path=arg)


def _by_rank(paths):
    def order(path):
        match = _RANK_FILE.search(path)
        return (_RANK_FILE.sub("", path), int(match.group(1)) if match else -1, path)

    return sorted(paths, key=order)


def _a_written_file(path: str) -> bool:
    """Whether a file a prefix or pattern found is one a run could have written: a regular file,
    not a symlink (which could lead anywhere)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def read_sources(args, accept, command, all_runs=False, fold=None, jobs=None, others=True) -> list[Source]:
    """Read every file the arguments name; refuse formats ``command`` cannot use, naming the file.
    Files of runs other than the latest are named on stderr and left out (unless ``all_runs``).
    ``fold``: given, each file's entries are reduced as the file is read (``fold.digest``, on
    ``jobs`` worker processes: ``readers.jobs_for``) and go to ``fold.absorb``; the source keeps
    its header only (``entries`` says how many it held): memory stays bounded by one file a reader.
    ``others`` False: a file of another user that a prefix, pattern or directory found is named and
    left out (``merge``: anyone who can write a shared prefix could otherwise decide a table)."""
    paths = _paths(args, others, command)
    digest = fold.digest if fold is not None else None
    sources = []
    progress = Progress(len(paths))
    for path in paths:  # named before any is read, as the messages say
        _refuse_path(path)
    _name_owners(paths)
    with readers.no_collector(), \
            closing(readers.read_files(paths, accept, digest, readers.jobs_for(jobs, paths, digest))) as results:
        for path, (document, journal, entries, digested, error) in zip(paths, results):
            progress.step()
            if error is not None:
                if _of_another_user(path):  # planted in a shared place: it cannot stop the report
                    print(f"python -m autotune_guard.report: note: left out {path}, a file of another user: {error}",
                          file=sys.stderr)
                    continue
                raise InputError(error, path=path)  # the first unusable file in order: the workers stop
            kind = readers.KIND_OF[document["format"]]
            if kind not in accept:
                raise InputError(f"{path}: is a {kind} file; {command} reads "
                                 f"{' and '.join(k + ' files' for k in accept)}"
                                 + (" (written under AUTOTUNE_RECORD_PATH)" if accept == ("record",) else ""), path=path)
            source = Source(path, kind, document, journal=journal, entries=entries)
            if document.get(JOURNAL_LEFT_OUT):
                print(f"python -m autotune_guard.report: note: {document[JOURNAL_LEFT_OUT]}", file=sys.stderr)
            if fold is not None:
                fold.absorb(source, digested)
            sources.append(source)
    progress.done()
    if not all_runs:
        sources, left_out = latest_run(sources)
        for note in left_out:
            print(f"python -m autotune_guard.report: note: {note}", file=sys.stderr)
    _label(sources)
    return sources


def _paths(args, others=True, command="") -> list[str]:
    """The files the arguments name, each once; a rank file's journal is read with its file, and
    what a prefix found that no run writes (a symlink, a FIFO), or with ``others`` False a file of
    another user, is named on stderr and left out."""
    paths, seen, skipped = [], set(), []
    for arg in args:
        for path in expand(arg):
            if path.endswith(".json" + JOURNAL_SUFFIX) and path != arg:
                continue  # a file's journal: read with its file
            if path != arg and not _a_written_file(path):
                skipped.append(f"left out {path}: not a regular file (a symlink, FIFO or directory someone put at a "
                               "rank file's name); no run writes one")
            elif path != arg and not others and (owner := _owner(path)) not in (None, os.geteuid()):
                skipped.append(f"left out {path}: a file of {user_name(owner)}, not of this user, found "
                               f"by {arg} ({command} --others reads it; naming the file itself does too)")
            elif path not in seen:
                seen.add(path)
                paths.append(path)
    for note in skipped:
        print(f"python -m autotune_guard.report: note: {note}", file=sys.stderr)
    return paths


def _owner(path: str) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def _of_another_user(path: str) -> bool:
    return _owner(path) not in (None, os.geteuid())


def _name_owners(paths: list[str]) -> None:
    """Name, once per user, the files read that another user owns: in a shared directory anyone
    can put a run there (the latest run wins unless ``--all-runs``)."""
    others: dict = {}
    for path in paths:
        try:
            uid = os.stat(path).st_uid
        except OSError:
            continue
        if uid != os.geteuid():
            others.setdefault(uid, []).append(path)
    for uid, theirs in sorted(others.items()):
        shown = ", ".join(theirs[:3]) + (f" and {len(theirs) - 3} more" if len(theirs) > 3 else "")
        print(f"python -m autotune_guard.report: note: {len(theirs)} file{'s' * (len(theirs) != 1)} read "
              f"{'are' if len(theirs) != 1 else 'is'} of {user_name(uid)}, not of this user: {shown}", file=sys.stderr)


def _refuse_path(path: str) -> None:
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory; name its files ({os.path.join(path, '*.json')}) "
                         f"or the prefix the run used ({os.path.join(path, 'rec')})", path=path)
    if path.endswith(".json" + JOURNAL_SUFFIX):
        raise InputError(f"{path}: is the journal of {path[:-len(JOURNAL_SUFFIX)]}, read with it; name that file "
                         "(or the prefix)", path=path)


def _changed_on_disk(source: Source) -> float:
    """When the file was last written, as the filesystem says (never the ``updated`` its
    contents claim, which anyone can write); a time in the future (a clock running ahead, a
    time set by hand) counts as none."""
    try:
        written = max(os.stat(p).st_mtime for p in (source.path, source.journal) if p)
    except OSError:
        return 0.0
    return written if written <= time.time() + 60 else 0.0


def latest_run(sources) -> tuple[list[Source], list[str]]:
    """The files of the latest run among ``sources``, of its latest restart attempt, and a note
    naming the files left out: an earlier run into the same prefix leaves files that must not be
    mixed in (a rank that no longer exists, a stale choice), and so does a failed attempt.

    Runs are told apart by the run id the files carry, attempts by the attempt they carry.  No
    run says it came after another, so the latest run is the one whose files were last written
    on disk (the filesystem's time, never a file's contents); runs whose files were written over
    the same span of time are named as such, and so are files whose times lie in the future."""
    tables = [s for s in sources if s.kind == "table"]  # a table belongs to no run
    sources = [s for s in sources if s.kind != "table"]
    runs: dict = {}
    for s in sources:
        runs.setdefault(s.document.get("run_id"), []).append(s)
    notes = []
    current = next(iter(runs), None)
    if len(runs) > 1:
        current, notes = _latest_of(runs)
    kept = runs.get(current, [])
    last = max((s.attempt for s in kept), default=0)
    earlier = [s for s in kept if s.attempt != last]
    if earlier:
        notes.append(f"left out {len(earlier)} file{'s' * (len(earlier) != 1)} of earlier attempts of run "
                     f"{current or '(no run id)'} (restarted; attempt {last} is read): "
                     + ", ".join(f"{s.path} (attempt {s.attempt}, {s.ended})" for s in earlier))
    return [s for s in kept if s.attempt == last] + tables, notes


def _latest_of(runs: dict) -> tuple:
    """The run written to last (see ``latest_run``) and notes on the runs left out."""
    times = {run: [_changed_on_disk(s) for s in group] for run, group in runs.items()}
    current = max(runs, key=lambda run: (max(times[run]), str(run)))
    notes = [f"{s.path}: its time on disk lies in the future (a clock running ahead, or set by hand); it does not "
             "count in telling which run is the latest" for group in runs.values() for s in group
             if not _changed_on_disk(s) and os.path.exists(s.path)]
    began = min(t for t in times[current] if t) if any(times[current]) else 0.0
    overlapping = [run for run in runs if run != current and max(times[run]) > began]
    if overlapping:
        notes.append(f"runs {', '.join(str(r or '(no run id)') for r in overlapping)} and {current or '(no run id)'} "
                     f"wrote into the same prefix at the same time; reading {current or '(no run id)'}, the one "
                     "written to last: name the files to read, or pass --all-runs")
    for run, group in runs.items():
        if run == current:
            continue
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(max(times[run]))) if max(times[run]) else "unknown"
        notes += [f"left out {s.path}: it is of run {run or '(no run id)'} (last written {when}), not of the latest "
                  f"run {current or '(no run id)'}; --all-runs reads every run" for s in group]
    return current, notes


def _label(sources) -> None:
    """``rank N`` where that names one file; ``rank N pid P`` where a rank has several processes'
    files; else the file's name."""
    files_of_rank = Counter(s.rank for s in sources)
    process_ids = Counter((s.rank, s.document.get("pid"), s.kind) for s in sources)
    unique_names = len({os.path.basename(s.path) for s in sources}) == len(sources)
    for s in sources:
        if s.kind == "table":
            s.label = f"table {os.path.basename(s.path)}"
        elif files_of_rank[s.rank] == 1:
            s.label = f"rank {s.rank}"
        elif s.document.get("pid") is not None and process_ids[(s.rank, s.document["pid"], s.kind)] == 1:
            s.label = f"rank {s.rank} pid {s.document['pid']}"
        else:
            s.label = os.path.basename(s.path) if unique_names else s.path


def natural_key(key: ChoiceKey) -> tuple:
    """The order keys are listed in: arch, kernel, key, each by ``natural``."""
    return tuple(natural(part) for part in key)


def natural(text: str):
    """Sort ``2,float`` before ``10,float``."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part]


# --- markdown (a CI job summary, a pull-request comment) -----------------------------------------

def md(text) -> str:
    """Text for a markdown table cell, as code (on one line: a newline would end the table's row)."""
    return "`" + str(text).replace("`", "'").replace("|", "\\|").replace("\n", " ").replace("\r", " ") + "`"


def label_list(labels: list[str], limit: int = 8) -> str:
    return ", ".join(labels[:limit]) + (f" and {len(labels) - limit} more" if len(labels) > limit else "")


def source_json(s: Source) -> dict:
    doc = s.document
    return {"file": s.path, "kind": s.kind, "label": s.label, "rank": s.rank, "world_size": doc.get("world_size"),
            "arch": doc.get("arch"), "complete": s.complete, "versions": doc.get("versions"), "digest": doc.get("digest"),
            "journal": s.journal}
