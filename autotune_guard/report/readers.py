"""Reading many files on several cores: each file is parsed, checked and reduced (a fold's
``digest``, pure code over the document) in a worker process, and only what the fold keeps comes
back, in the files' order; the fold absorbs it in this process.  JSON parsing is most of a
report's time (about 40 ms for a record of 2,000 entries), so workers are what bounds it.

A worker returns plain data and never raises for a file: an unusable file comes back as its
message, raised by the reader in the files' order, so the error is the same as a serial read's."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
from contextlib import contextmanager

from ..core import schema
from ..core.errors import FileFormatError, ReaderError

KIND_OF = {schema.RECORD_FORMAT: "record", schema.CHOICES_FORMAT: "choices", schema.TABLE_FORMAT: "table"}
MAX_JOBS = 8  # past this the fold in the reading process, not the parsing, bounds the time
PARALLEL_FROM_BYTES = 16 * 2**20  # below it (a few records) starting workers costs more than it saves
_ENTRIES = ("kernels", "log")


def count_entries(document: dict) -> int:
    if "log" in document:
        return len(document["log"])
    return sum(len(entries) for entries in document["kernels"].values())


def read_file(path: str, accept, digest):
    """``(document or header, journal, entries, digested, error)`` of one file; ``digest(kind,
    document)``, given, reduces its entries, and only the header (no entries) comes back."""
    try:
        document, journal = schema.read_evidence(path)
    except FileFormatError as exc:
        return None, None, None, None, str(exc)
    if digest is None or KIND_OF[document["format"]] not in accept:  # the reader names a refused kind
        return document, journal, None, None, None
    digested = digest(KIND_OF[document["format"]], document)
    header = {name: value for name, value in document.items() if name not in _ENTRIES}
    return header, journal, count_entries(document), digested, None


def jobs_for(requested: int | None, paths: list[str], digest) -> int:
    """How many processes read: ``requested`` (``--jobs``), else the cores this process may use
    (at most ``MAX_JOBS``) once the files are large enough to pay for starting workers; 1 reads here.
    A read keeping whole documents (no ``digest``) stays here: shipping them costs what parsing does."""
    if digest is None or len(paths) < 2:
        return 1
    if requested is not None:
        return max(1, min(requested, len(paths)))
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if cores < 2 or _total_bytes(paths) < PARALLEL_FROM_BYTES:
        return 1
    return min(cores, MAX_JOBS, len(paths))


def _total_bytes(paths) -> int:
    total = 0
    for path in paths:
        try:
            total += os.path.getsize(path)
        except OSError:
            pass  # the read names it
    return total


@contextmanager
def no_collector():
    """The cycle collector paused: JSON documents and the folds built of them hold no cycles, so
    reference counting frees them all, and the collector's passes over a heap growing by a
    hundred thousand objects a file cost a quarter of each parse."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_files(paths: list[str], accept, digest, jobs: int):
    """``read_file`` of each path, in order: here when ``jobs`` is 1, else on ``jobs`` worker
    processes, worker k reading files k, k + jobs, ...  Each sends what it read down its own
    pipe, at most one file ahead of the reader, which takes them in the files' order: no pool,
    no thread, nothing queued without bound."""
    if jobs <= 1:
        for path in paths:
            yield read_file(path, accept, digest)
        return
    # spawn, never fork: a caller with threads (a test runner, a program calling report.main)
    # would fork workers holding its threads' locks, and fork is gone from some platforms
    context = multiprocessing.get_context("spawn")
    workers, pipes = [], []
    try:
        for k in range(jobs):
            receive, send = context.Pipe(duplex=False)
            worker = context.Process(target=_serve, args=(send, paths[k::jobs], accept, digest), daemon=True,
                                     name=f"autotune_guard report reader {k}")
            worker.start()
            send.close()  # only the worker holds it now: its end is the reader's EOF
            workers.append(worker)
            pipes.append(receive)
        for i, path in enumerate(paths):
            try:
                yield pipes[i % jobs].recv()
            except EOFError:
                workers[i % jobs].join(5)
                raise ReaderError(f"{path}: the process reading it ended (exit status {workers[i % jobs].exitcode}) "
                                  "before it was read; --jobs 1 reads in this process", path=path) from None
    finally:
        for pipe in pipes:
            pipe.close()  # a worker still sending stops (its pipe is broken)
        for worker in workers:
            worker.join(1)
            if worker.is_alive():
                worker.terminate()
                worker.join()


def _serve(pipe, paths: list[str], accept, digest) -> None:
    """A worker: ``read_file`` of each of its paths, sent to the reader in order."""
    # Ctrl-C goes to the reading process, which stops the workers; a worker printing its own
    # KeyboardInterrupt traceback would only bury the one line that matters.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.disable()  # see ``no_collector``: a worker holds nothing but the file it reads
    try:
        for path in paths:
            pipe.send(read_file(path, accept, digest))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the reader stopped early (an unusable file, Ctrl-C): nothing is waiting for the rest
    finally:
        pipe.close()
