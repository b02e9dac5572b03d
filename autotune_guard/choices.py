"""The choice log: what this process chose, per (arch, kernel, key), and how.

Plain data: no files, no Triton, no torch.  An entry is added on the first choice of each key
only, never on the steady launch path.  The log belongs to one policy (``state.now.log``); the
writer (``writer``) watches it to keep the per-process files current, and verification takes
the entries made since its previous check (``take_unverified``).
"""

from __future__ import annotations

import hashlib
import logging
import threading

from . import files

logger = logging.getLogger("autotune_guard")

# Called after every new entry, outside the log's lock: the writer, which also fixes the rank at
# the first choice.  A list rather than an import: the log stays free of files and signals.
_watchers: list = []


def watch(callback) -> None:
    if callback not in _watchers:
        _watchers.append(callback)


def _changed() -> None:
    for callback in _watchers:
        callback()


def choice_entry(arch: str, qualified: str, key: str) -> str:
    return f"{arch}|{qualified}|{key}"


def digest_of(log: dict[str, str]) -> str:
    """A hash of a log's entries: equal logs, equal digests."""
    text = "\n".join(f"{k} -> {v}" for k, v in sorted(log.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ChoiceLog:
    """One policy's choices, and in record mode the winners with what Triton measured."""

    def __init__(self):
        self.lock = threading.Lock()
        self.entries: dict[str, str] = {}  # "arch|module.function|key" -> "signature;how"
        self.unverified: dict[str, str] = {}  # entries made since the last cross-rank check
        # record mode: kernel -> key -> {"config", "signature", "timings", "candidates", "how"}
        self.records: dict[str, dict[str, dict]] = {}
        self.record_arch: str | None = None
        self.packages: dict[str, str | None] = {}  # top-level package of a recorded kernel -> version

    def note_choice(self, arch: str, qualified: str, key: str, signature: str, how: str) -> None:
        entry = choice_entry(arch, qualified, key)
        with self.lock:
            if entry in self.entries:
                return
            self.entries[entry] = self.unverified[entry] = f"{signature};{how}"
        logger.debug("choice %s -> %s;%s", entry, signature, how)
        _changed()

    def note_record(self, arch: str, qualified: str, key: str, config: dict, signature: str, how: str,
                    timings: dict | None, candidates: list[dict]) -> None:
        """A winner for the record file (record mode, and consensus with a record path).

        ``timings``: candidate signature -> Triton's measurements (median first), or None when the
        winner was not timed in this process; ``candidates``: the declared configs, as descriptors.
        """
        with self.lock:
            self.record_arch = self.record_arch or arch
            self.records.setdefault(qualified, {})[key] = {
                "config": config, "signature": signature, "how": how, "timings": timings, "candidates": candidates,
            }
            top = qualified.split(".", 1)[0]
            if top not in self.packages:
                self.packages[top] = files.installed_version(top)
        _changed()

    def snapshot(self, timeout: float = -1) -> tuple | None:
        """(entries, records, record arch, packages), copied under the lock, for the writer; None
        when the lock could not be had within ``timeout`` seconds."""
        if not self.lock.acquire(timeout=timeout):
            return None
        try:
            return (dict(self.entries), {k: dict(v) for k, v in self.records.items()}, self.record_arch,
                    dict(self.packages))
        finally:
            self.lock.release()

    def copy(self) -> dict[str, str]:
        with self.lock:
            return dict(self.entries)

    def take_unverified(self) -> dict[str, str]:
        with self.lock:
            taken = dict(self.unverified)
            self.unverified.clear()
            return taken

    def forget_after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's writer thread may have held it at fork) and
        nothing chosen yet (the parent's choices are in the parent's file)."""
        self.lock = threading.Lock()
        self.entries.clear()
        self.unverified.clear()
        self.records.clear()


class Ungoverned:
    """Kernels whose config choice the guard did not govern, and why; kept across policies."""

    def __init__(self):
        self.lock = threading.Lock()
        self.kernels: dict[str, str] = {}

    def note(self, qualified: str, why: str) -> bool:
        """False when the kernel was noted already."""
        with self.lock:
            if qualified in self.kernels:
                return False
            self.kernels[qualified] = why
            return True

    def copy(self) -> dict[str, str]:
        with self.lock:
            return dict(self.kernels)
