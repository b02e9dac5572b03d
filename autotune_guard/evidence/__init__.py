"""This process's evidence files, kept current and saved at the end.

Files are kept current by a background thread shortly after each new choice (the writer
subscribes to the runtime's ``Guard``): rewritten whole and atomically while small, then the new
entries appended to the file's journal (``evidence.journal``: bytes written stay a small multiple
of the final size), so a process killed with SIGKILL leaves on disk what it had chosen, on
SIGTERM (the previous handler then runs, or the signal's default effect; see
``evidence.signals``), and once more at exit.  A file says how its process ended (``ended``) and
is ``complete`` only after a normal exit.

Every process writes its own files, ``<prefix>.rank<N>.<host>-<pid>.json``, and only once it has
made a choice: an ``import triton`` child or an Inductor compile worker writes nothing, and a
child that does choose (fork, spawn, forkserver, subprocess) keeps its own file instead of
overwriting its rank's.  Each file carries the run id (``run_id()``) so the report can tell the
files of this run from those an earlier run left under the same prefix, and the restart attempt
(torchrun's ``TORCHELASTIC_RESTART_COUNT``) so that it can tell a restarted run's attempts apart.  The rank is fixed at the
process's first choice (the ``rank_world`` fact).  Where the files go is the installed policy's;
what this module keeps is the machinery only (the writer shell, the files' states), on one object
the ``Guard`` holds (``_files_writer()``); its exit steps are the Guard's ``EXIT_SUMMARY`` and
``EXIT_EVIDENCE``.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import time
import uuid

from . import journal as evidence_journal, paths as evidence_paths, signals as evidence_signals
from . import summary as evidence_summary
from .writer import WriterShell
from ..core import switches
from ..core.model import ChoiceKey, digest_of
from ..core.schema import CHOICES_FORMAT, RECORD_FORMAT
from ..runtime import EXIT_EVIDENCE, EXIT_SUMMARY, current

logger = logging.getLogger("autotune_guard")

check_writable = evidence_paths.check_writable  # called by activation before any kernel runs
rank_file = evidence_paths.rank_file
process_tag = evidence_paths.process_tag

# The run id children inherit: set by the first guarded process of a run (see run_id()).
RUN_VARIABLE = "_AUTOTUNE_GUARD_RUN"


def fix_rank() -> tuple[int, int]:
    """This process's (rank, world size), fixed at its first choice: a program that destroys its
    process group before exit, or changes RANK, still files its evidence under the rank it chose as."""
    return current().facts.get("rank_world") or (0, 1)


def entry_author(guard) -> dict:
    """Who adds a table entry (a table file's or a table store's): the run (the id the evidence
    files carry), rank, host, time, Triton."""
    facts = guard.facts
    rank = (facts.peek("rank_world") or facts.ask("rank_now", (0, 1)))[0]
    return {"run_id": run_id(), "rank": rank, "host": socket.gethostname(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "triton": facts.get("triton_version")}


def run_id() -> str:
    """What the processes of one run share: ``AUTOTUNE_RUN_ID`` when set, else torchrun's run id
    (``--standalone`` or ``--rdzv-id``), else Slurm's job step, else the id the first guarded
    process of the run put in the environment at start-up for the processes it starts
    (the ``torchrun`` launcher's workers, ``mp.spawn`` children and plain subprocesses inherit it)."""
    policy = current().epoch.installed
    if policy is not None and policy.run_id:
        return policy.run_id
    elastic = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if elastic and elastic != "none":  # "none" is torchrun's default --rdzv-id: every run has it
        return "torchelastic:" + elastic
    job = os.environ.get("SLURM_JOB_ID", "")
    if job:
        return f"slurm:{job}.{os.environ.get('SLURM_STEP_ID', '')}"
    return inherited_run_id()


def inherited_run_id() -> str:
    run = os.environ.get(RUN_VARIABLE, "")
    if not run:
        run = os.environ[RUN_VARIABLE] = new_run_id()
    return run


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def attempt() -> int:
    """The restart attempt of this run (torchrun's ``TORCHELASTIC_RESTART_COUNT``; 0 without)."""
    try:
        return max(int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), 0)
    except ValueError:
        return 0


class FilesWriter(WriterShell):
    """The writer shell of this process's evidence files, and what it knows of them: each rank
    file's state (``journal.EvidenceFile``), how many entries of the log are in the files, and
    when the process started (a forked child starts anew, in a file of its own)."""

    def __init__(self):
        # Keeps the files current shortly after a change, off the launch path (a SIGKILLed rank
        # loses at most the choices of the last interval).
        super().__init__(write_files, interval_s=0.2, thread_name="autotune_guard-writer",
                         failure="could not write the choices/record files: %s")
        self.files: dict[str, evidence_journal.EvidenceFile] = {}  # rank file -> how it is kept current
        self.persisted = 0  # entries of the current log in the files (whole or journaled)
        self.started = time.time()

    def renew(self) -> None:
        # The child's file holds the choices the child makes (the parent's are in the parent's
        # file); it keeps the parent's rank and run.
        for state in self.files.values():
            state.forget()
        self.files.clear()
        self.persisted = 0
        self.started = time.time()


def _made() -> FilesWriter:
    """At the first need: the writer, subscribed to new choices, with its two exit steps."""
    guard = current()
    guard.subscribe(_changed)
    guard.on_exit(_say_at_exit, EXIT_SUMMARY)
    guard.on_exit(_final_write, EXIT_EVIDENCE)
    return FilesWriter()


def _files_writer() -> FilesWriter:
    return current().held("evidence.files", _made)


def configure(policy) -> None:
    """Called as ``policy`` replaces the previous one (with its new, empty log): the writer with
    its exit steps once, the run id children inherit and SIGTERM saving when files are wanted."""
    _files_writer().final_written = False  # a new log: its final state is not on disk yet
    if policy is not None and (policy.digest_path or policy.record_path):
        inherited_run_id()  # children started from now on share it
        evidence_signals.watch(_save_now)


def say_files(policy) -> None:
    """At start, after the mode: the files this job writes, once for the job (its first rank, or a lone process)."""
    line = evidence_paths.files_line(policy.digest_path, policy.record_path)
    if line and os.environ.get("RANK", "0") in ("0", ""):
        logger.info("%s", line)


def write_files(complete: bool = False, ended_epoch=None) -> None:
    """Bring this rank's choices and record files up to date now: whole (atomically) while
    small and at the end (``complete`` at exit, which the files then say only where the process
    ended normally), else the new entries appended to their journals. ``ended_epoch``: a policy's
    epoch that another one (or none, ``uninstall``) has just replaced: its files written whole and
    complete, since nothing more is chosen under it."""
    shell = _files_writer()
    with shell.lock:
        if shell.final_written and not complete and ended_epoch is None:
            return  # the final state is on disk; a late background write must not replace it
        guard = current()
        if ended_epoch is not None:
            epoch, complete = ended_epoch, True
        else:
            shell.final_written = shell.final_written or complete
            epoch = guard.epoch
        if epoch.installed is None:
            return
        policy = epoch.settled_policy()
        if not complete and _append_new(epoch.log, policy):
            return
        log, records, arch, packages = epoch.log.snapshot()
        if log or records:  # a process that chose nothing writes nothing
            ended = evidence_signals.ended()
            _write(guard, policy, *fix_rank(), log, records, arch, packages, complete and not ended, ended,
                   id(epoch.log))


def _save_now(ended: str) -> None:
    """The save on a signal (``evidence.signals``), in whichever thread sees it first: the whole
    files.  The interrupted main thread may hold a lock the write needs: wait a little, never
    forever (what the background writer kept current is then what remains)."""
    shell = _files_writer()
    lock = shell.lock
    if not lock.acquire(timeout=2.0):
        return
    try:
        guard = current()
        epoch = guard.epoch
        snapshot = epoch.log.snapshot(timeout=2.0)
        if snapshot is not None:
            log, records, arch, packages = snapshot
            if (log or records) and not shell.final_written and epoch.installed is not None:
                _write(guard, epoch.settled_policy(), *fix_rank(), log, records, arch, packages, False, ended,
                       id(epoch.log))
    finally:
        lock.release()


def _wanted(policy, rank: int) -> list[tuple[str, str]]:
    return [(kind, rank_file(prefix, rank)) for kind, prefix in (("choices", policy.digest_path),
                                                                   ("record", policy.record_path)) if prefix]


def _append_new(log, policy) -> bool:
    """Append the entries made since the last write to the files' journals; False when a file
    is to be written whole instead (small, new, of another log, or a journal it cannot have)."""
    shell = _files_writer()
    rank = fix_rank()[0]
    files = [(kind, shell.files.get(path)) for kind, path in _wanted(policy, rank)]
    if any(state is None or state.wants_whole(id(log)) for _, state in files):
        return False
    with log.lock:  # only the new entries: a flush costs what it adds, not the whole log
        new = list(itertools.islice(log.entries.items(), shell.persisted, None))
        records = [(key, log.records.get(key.kernel, {}).get(key.key)) for key, _ in new]
        packages = dict(log.packages)
    for kind, state in files:
        if kind == "choices":
            lines = [{"entry": key.text(), "choice": choice.text()} for key, choice in new]
        else:
            lines = [{"kernel": key.kernel, "key": key.key, "entry": record} for key, record in records if record]
            if lines and packages:
                lines.append({"packages": packages})
        if not state.append(lines):
            return False
    shell.persisted += len(new)
    return True


def _write(guard, policy, rank, world, log, records, arch, packages, complete, ended=None, log_id=None) -> None:
    shell = _files_writer()
    process = {"run_id": run_id(), "attempt": attempt(), "pid": os.getpid(), "host": socket.gethostname(),
               "started": shell.started, "updated": time.time(), "written": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if ended:
        process["ended"] = ended
    numerics = guard.facts.ask("numerics")
    if numerics:  # what decides the bits beside the configs (report diff compares it)
        process["numerics"] = numerics
    found = switches.in_force(os.environ)
    if found:  # the libraries' own switches this process ran under (report show prints them)
        process["switches"] = found
    for kind, path in _wanted(policy, rank):
        state = shell.files.setdefault(path, evidence_journal.EvidenceFile())
        if kind == "record" and not records:
            state.nothing_yet(log_id)
            continue
        token = state.new_token()
        if kind == "choices":
            document = {"format": CHOICES_FORMAT, "rank": rank, "world_size": world, **process,
                        "digest": digest_of(log), "count": len(log), "log": log, "complete": complete}
        else:
            document = {"format": RECORD_FORMAT, "arch": arch or _current_arch_name(log), "rank": rank,
                        "world_size": world, "mode": policy.mode, "versions": guard.facts.versions(),
                        "packages": packages, "kernels": records, "complete": complete, **process}
        target, size = evidence_paths.write(path, {**document, "journal_id": token})
        state.written_whole(log_id, target, size, token)
    shell.persisted = len(log)


def _current_arch_name(log) -> str:
    for entry in log:
        return ChoiceKey.parse(entry).arch
    return "unknown"


def _changed() -> None:
    """A new entry in the log: the rank is fixed at the first, and the files rewritten soon."""
    fix_rank()
    evidence_signals.carried_on()
    policy = current().epoch.installed
    if policy is None or not (policy.digest_path or policy.record_path):
        return
    if not evidence_signals.watching():
        evidence_signals.watch(_save_now)  # a handler the program set after install is chained too
    _files_writer().wake()


def _say_at_exit() -> None:
    """The exit's first step (``EXIT_SUMMARY``): what was chosen, and the settings the kernels
    that ran made ineffective."""
    guard = current()
    if guard.epoch.installed is None:
        return
    evidence_summary.say_at_exit(guard, fix_rank()[0], guard.epoch.settled_policy())
    for line in guard.exit_lines():
        logger.warning("%s", line)


def _final_write() -> None:
    """The evidence's exit step (``EXIT_EVIDENCE``): the files' final state, saying how the
    process ended (``complete`` after a normal exit)."""
    policy = current().epoch.installed
    if policy is not None and (policy.digest_path or policy.record_path):
        evidence_signals.note_at_exit()
        try:
            write_files(complete=True)
        except Exception as exc:
            logger.error("could not write the choices/record files at exit: %s", exc)
