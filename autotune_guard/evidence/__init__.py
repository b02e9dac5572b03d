"""This process's evidence files, kept current and saved at the end.

Files are rewritten atomically by a background thread shortly after each new choice (the writer
subscribes to the runtime's ``Guard``), so a process killed with SIGKILL leaves on disk what it had chosen, on
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
what this module keeps itself is the machinery only: the thread, the handlers, whether the final
files are written.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
import uuid

from . import paths as evidence_paths, signals as evidence_signals
from ..core.model import ChoiceKey, digest_of
from ..core.schema import CHOICES_FORMAT, RECORD_FORMAT
from ..runtime import current

logger = logging.getLogger("autotune_guard")

# Serializes whole writes (snapshot + rename): without it the background writer could rename an
# older snapshot over the final one written at exit.
_write_lock = threading.Lock()
_final_written = False
_flusher: "_Flusher | None" = None
_exit_registered = False
_started = time.time()
check_writable = evidence_paths.check_writable  # called by activation before any kernel runs
rank_file = evidence_paths.rank_file
process_tag = evidence_paths.process_tag

# The run id children inherit: set by the first guarded process of a run (see run_id()).
RUN_VARIABLE = "_AUTOTUNE_GUARD_RUN"


def fix_rank() -> tuple[int, int]:
    """This process's (rank, world size), fixed at its first choice: a program that destroys its
    process group before exit, or changes RANK, still files its evidence under the rank it chose as."""
    return current().facts.get("rank_world") or (0, 1)


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


def configure(policy) -> None:
    """Called as ``policy`` replaces the previous one (with its new, empty log): the exit and
    fork handlers once, the run id children inherit and SIGTERM saving when files are wanted."""
    global _exit_registered, _final_written
    _final_written = False  # a new log: its final state is not on disk yet
    if not _exit_registered:
        atexit.register(_at_exit)
        _save_in_forked_children()
        current().subscribe(_changed)
        current().on_fork(_after_fork_in_child)
        _exit_registered = True
    if policy is not None and (policy.digest_path or policy.record_path):
        inherited_run_id()  # children started from now on share it
        evidence_signals.watch(_save_now)


def write_files(complete: bool = False) -> None:
    """Write this rank's choices and record files now (atomically); ``complete`` at exit, which
    the files then say only where the process ended normally."""
    global _final_written
    with _write_lock:
        if _final_written and not complete:
            return  # the final state is on disk; a late background write must not replace it
        _final_written = _final_written or complete
        epoch = current().epoch
        log, records, arch, packages = epoch.log.snapshot()
        if epoch.installed is not None and (log or records):  # a process that chose nothing writes nothing
            ended = evidence_signals.ended()
            _write(epoch.settled_policy(), *fix_rank(), log, records, arch, packages, complete and not ended, ended)


def _save_now(ended: str) -> None:
    """The save on a signal (``evidence.signals``), in whichever thread sees it first.  The
    interrupted main thread may hold a lock the write needs: wait a little, never forever (the
    copy the background writer keeps current is then what remains)."""
    if not _write_lock.acquire(timeout=2.0):
        return
    try:
        epoch = current().epoch
        snapshot = epoch.log.snapshot(timeout=2.0)
        if snapshot is not None:
            log, records, arch, packages = snapshot
            if (log or records) and not _final_written and epoch.installed is not None:
                _write(epoch.settled_policy(), *fix_rank(), log, records, arch, packages, False, ended)
    finally:
        _write_lock.release()


def _write(policy, rank, world, log, records, arch, packages, complete, ended=None) -> None:
    process = {"run_id": run_id(), "attempt": attempt(), "pid": os.getpid(), "host": socket.gethostname(),
               "started": _started, "updated": time.time(), "written": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if ended:
        process["ended"] = ended
    if policy.digest_path:
        evidence_paths.write(rank_file(policy.digest_path, rank), {
            "format": CHOICES_FORMAT, "rank": rank, "world_size": world, **process,
            "digest": digest_of(log), "count": len(log), "log": log, "complete": complete,
        })
    if policy.record_path and records:
        evidence_paths.write(rank_file(policy.record_path, rank), {
            "format": RECORD_FORMAT, "arch": arch or _current_arch_name(log), "rank": rank,
            "world_size": world, "mode": policy.mode, "versions": current().facts.versions(), "packages": packages,
            "kernels": records, "complete": complete, **process,
        })


def _current_arch_name(log) -> str:
    for entry in log:
        return ChoiceKey.parse(entry).arch
    return "unknown"


class _Flusher:
    """Rewrites the files shortly after a change, off the launch path: at most every
    ``INTERVAL_S``; once a file is over ``GROW_FROM_BYTES``, every ``WRITE_SHARE`` times as long
    as the last write took, so that a large file is not rewritten more than that share of the
    time (a SIGKILLed rank loses at most the choices of the last interval)."""

    INTERVAL_S = 0.2
    WRITE_SHARE = 20  # a large file's writes take at most 1/20 of the writer's time
    GROW_FROM_BYTES = 256 * 1024

    def __init__(self):
        self.dirty = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="autotune_guard-writer", daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            self.dirty.wait()
            self.dirty.clear()
            began = time.monotonic()
            try:
                write_files()
            except Exception as exc:
                logger.warning("could not write the choices/record files: %s", exc)
            took = time.monotonic() - began
            large = evidence_paths.largest_written() > self.GROW_FROM_BYTES
            time.sleep(max(self.INTERVAL_S, self.WRITE_SHARE * took) if large else self.INTERVAL_S)


def _changed() -> None:
    """A new entry in the log: the rank is fixed at the first, and the files rewritten soon."""
    global _flusher
    fix_rank()
    policy = current().epoch.installed
    if policy is None or not (policy.digest_path or policy.record_path):
        return
    if not evidence_signals.watching():
        evidence_signals.watch(_save_now)  # a handler the program set after install is chained too
    if _flusher is None or not _flusher.thread.is_alive():  # a forked child has no thread
        _flusher = _Flusher()
    _flusher.dirty.set()


def _after_fork_in_child() -> None:
    # A lock held by the parent's writer thread at fork() would stay held forever in the child.
    # The child's file holds the choices the child makes (the parent's are in the parent's file);
    # it keeps the parent's rank and run.
    global _write_lock, _flusher, _final_written, _started, _exited
    _write_lock, _flusher = threading.Lock(), None
    _started, _exited = time.time(), False
    _final_written = False
    evidence_signals.after_fork_in_child()
    evidence_paths.after_fork_in_child()


class _ForkedChildren:
    """multiprocessing's fork and forkserver children end with ``os._exit``, so no atexit handler
    runs there; multiprocessing's own finalizers do, and this registers one in each child."""

    def __call__(self, _self=None):
        from multiprocessing import util

        util.Finalize(None, _at_exit, exitpriority=-100)


_forked_children = _ForkedChildren()


def _save_in_forked_children() -> None:
    try:
        from multiprocessing import util

        util.register_after_fork(_forked_children, _ForkedChildren.__call__)
    except Exception as exc:  # multiprocessing is optional to the guard
        logger.debug("cannot watch multiprocessing children: %s", exc)


_exited = False


def _at_exit() -> None:
    global _exited
    guard = current()
    policy = guard.epoch.installed
    if policy is None or _exited:
        return  # (a spawn child may get here twice: multiprocessing's finalizer, then atexit)
    _exited = True
    log = guard.epoch.log.snapshot()[0]
    missed = dict(guard.ungoverned)
    if log or missed:
        logger.info("rank %d made %d autotune choices, digest %s%s", fix_rank()[0], len(log), digest_of(log),
                    f"; {len(missed)} not governed: {', '.join(sorted(missed)[:5])}"
                    f"{' ...' if len(missed) > 5 else ''}" if missed else "")
    for line in guard.exit_lines():
        logger.warning("%s", line)
    if policy.digest_path or policy.record_path:
        evidence_signals.note_at_exit()
        try:
            write_files(complete=True)
        except Exception as exc:
            logger.error("could not write the choices/record files at exit: %s", exc)
