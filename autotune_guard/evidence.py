"""This process's evidence files, kept current and saved at the end.

Files are rewritten atomically by a background thread shortly after each new choice (the writer
subscribes to the runtime's ``Guard``), so a process killed with SIGKILL leaves on disk what it had chosen, on
SIGTERM (the previous handler then runs, or the signal's default effect), and once more at exit.

Every process writes its own files, ``<prefix>.rank<N>.<host>-<pid>.json``, and only once it has
made a choice: an ``import triton`` child or an Inductor compile worker writes nothing, and a
child that does choose (fork, spawn, forkserver, subprocess) keeps its own file instead of
overwriting its rank's.  Each file carries the run id (``run_id()``) so the report can tell the
files of this run from those an earlier run left under the same prefix.  The rank is fixed at the
process's first choice (the ``rank_world`` fact).  Where the files go is the installed policy's;
what this module keeps itself is the machinery only: the thread, the handlers, whether the final
files are written.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import signal
import socket
import tempfile
import threading
import time
import uuid

from .core import jsonfile
from .core.model import ChoiceKey, digest_of
from .core.schema import CHOICES_FORMAT, RECORD_FORMAT
from .runtime import current

logger = logging.getLogger("autotune_guard")

# Serializes whole writes (snapshot + rename): without it the background writer could rename an
# older snapshot over the final one written at exit.
_write_lock = threading.Lock()
_final_written = False
_flusher: "_Flusher | None" = None
_exit_registered = False
_started = time.time()
# "SIGTERM" once that signal's save ran: every later write says so too, so that the background
# writer, should it write after the handler (the program ignored the signal and ran on), keeps it.
_ended_by: str | None = None

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
        _save_on_sigterm()


def check_writable(prefix: str, variable: str) -> None:
    """Refuse a file prefix whose directory cannot be created or written, before any kernel runs."""
    directory = os.path.dirname(os.path.abspath(prefix))
    if os.path.isdir(prefix):
        raise PermissionError(f"{variable}={prefix!r} is a directory; it is a file prefix, like {os.path.join(prefix, 'rec')}")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise PermissionError(f"{variable}={prefix!r}: {directory} is not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise PermissionError(f"{variable}={prefix!r}: directory {directory} cannot be created ({exc.strerror})") from None
    # Try it: os.access() says yes to root even where the filesystem refuses (read-only, /proc).
    try:
        fd, probe = tempfile.mkstemp(prefix=".autotune_guard-probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise PermissionError(f"{variable}={prefix!r}: cannot write files in {directory} ({exc.strerror})") from None


def process_tag() -> str:
    """What tells this process apart from any other of its rank: the host and the pid."""
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0]) or "host"
    return f"{host}-{os.getpid()}"


def rank_file(prefix: str, rank: int) -> str:
    """This process's file under ``prefix``: ``<prefix>.rank<N>.<host>-<pid>.json``."""
    return f"{prefix}.rank{rank}.{process_tag()}.json"


def write_files(complete: bool = False) -> None:
    """Write this rank's choices and record files now (atomically)."""
    global _final_written
    with _write_lock:
        if _final_written and not complete:
            return  # the final state is on disk; a late background write must not replace it
        _final_written = _final_written or complete
        epoch = current().epoch
        log, records, arch, packages = epoch.log.snapshot()
        if epoch.installed is not None and (log or records):  # a process that chose nothing writes nothing
            _write(epoch.settled_policy(), *fix_rank(), log, records, arch, packages, complete, _ended_by)


def _write(policy, rank, world, log, records, arch, packages, complete, ended=None) -> None:
    process = {"run_id": run_id(), "pid": os.getpid(), "host": socket.gethostname(), "started": _started,
               "updated": time.time(), "written": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if ended:
        process["ended"] = ended
    if policy.digest_path:
        jsonfile.atomic_write_json(rank_file(policy.digest_path, rank), {
            "format": CHOICES_FORMAT, "rank": rank, "world_size": world, **process,
            "digest": digest_of(log), "count": len(log), "log": log, "complete": complete,
        })
    if policy.record_path and records:
        jsonfile.atomic_write_json(rank_file(policy.record_path, rank), {
            "format": RECORD_FORMAT, "arch": arch or _current_arch_name(log), "rank": rank,
            "world_size": world, "mode": policy.mode, "versions": current().facts.versions(), "packages": packages,
            "kernels": records, "complete": complete, **process,
        })


def _current_arch_name(log) -> str:
    for entry in log:
        return ChoiceKey.parse(entry).arch
    return "unknown"


class _Flusher:
    """Rewrites the files shortly after a change, off the launch path."""

    INTERVAL_S = 0.2

    def __init__(self):
        self.dirty = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="autotune_guard-writer", daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            self.dirty.wait()
            self.dirty.clear()
            try:
                write_files()
            except Exception as exc:
                logger.warning("could not write the choices/record files: %s", exc)
            time.sleep(self.INTERVAL_S)


def _changed() -> None:
    """A new entry in the log: the rank is fixed at the first, and the files rewritten soon."""
    global _flusher
    fix_rank()
    policy = current().epoch.installed
    if policy is None or not (policy.digest_path or policy.record_path):
        return
    if signal.getsignal(signal.SIGTERM) is not _on_sigterm:
        _save_on_sigterm()  # the program set a handler of its own after install: chain that one too
    if _flusher is None or not _flusher.thread.is_alive():  # a forked child has no thread
        _flusher = _Flusher()
    _flusher.dirty.set()


def _after_fork_in_child() -> None:
    # A lock held by the parent's writer thread at fork() would stay held forever in the child.
    # The child's file holds the choices the child makes (the parent's are in the parent's file);
    # it keeps the parent's rank and run.
    global _write_lock, _flusher, _final_written, _started, _exited, _ended_by
    _write_lock, _flusher = threading.Lock(), None
    _started, _exited, _ended_by = time.time(), False, None
    _final_written = False


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


_previous_sigterm = None


def _save_on_sigterm() -> None:
    """Write the files when SIGTERM arrives (torchrun sends it to the surviving ranks), then let
    the handler the program had set run, or the signal's default effect happen."""
    global _previous_sigterm
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; the background writer still keeps files current
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is _on_sigterm:
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
        _previous_sigterm = current
    except (ValueError, OSError) as exc:
        logger.debug("cannot save the files on SIGTERM: %s", exc)


def _on_sigterm(signum, frame):
    # The interrupted main thread may hold a lock the write needs: wait a little, never forever
    # (the copy the background writer keeps current is then what remains).
    global _ended_by
    _ended_by = "SIGTERM"
    if _write_lock.acquire(timeout=2.0):
        try:
            epoch = current().epoch
            snapshot = epoch.log.snapshot(timeout=2.0)
            if snapshot is not None:
                log, records, arch, packages = snapshot
                if (log or records) and not _final_written and epoch.installed is not None:
                    _write(epoch.settled_policy(), *fix_rank(), log, records, arch, packages, False, ended="SIGTERM")
        except Exception as exc:
            logger.error("could not write the choices/record files on SIGTERM: %s", exc)
        finally:
            _write_lock.release()
    previous = _previous_sigterm
    if callable(previous):
        return previous(signum, frame)
    if previous == signal.SIG_IGN:
        return None
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the default effect: die of SIGTERM
    os.kill(os.getpid(), signal.SIGTERM)


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
        try:
            write_files(complete=True)
        except Exception as exc:
            logger.error("could not write the choices/record files at exit: %s", exc)
