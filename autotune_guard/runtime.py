"""The one object that owns the process's mutable state: :class:`Guard`, reached by ``current()``.

It holds the epoch (the installed policy with its generation, choice log, tables and warnings,
replaced in one step by ``install()``), the facts only adapters can read (rank, arch, Config
defaults, versions: each read once, from the source an adapter provided), the kernels it did not
govern, and the subscribers told of each new choice (the evidence writer). ``note()`` checks the
epoch itself, under the guard's lock, so a choice lands in the log of the policy that made it or
nowhere. ``after_fork()`` rebuilds in a child what it must not inherit (locks, the log).

Its lifecycle (``core.lifecycle``, its base class) is the process's, one mechanism each: the objects
the adapters and writers keep (``held``), the one fork hook below, the one exit sequence
(``on_exit``, in the order of the ``EXIT_*`` steps) and the one post-import hook registry
(``when_imported``). Imports only the core: the adapters fill it in, the API reads it.

Over 350 lines: the Guard is the one owner of the process's state (as pluggy's PluginManager is one class);
its parts live in held objects elsewhere.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable

from .core import late_settings, settings
from .core import misses
from .core.errors import ConsensusError, SelectionError, StoreError
from .core.lifecycle import Lifecycle
from .core.model import AT_EXIT, Choice, ChoiceKey, base_name, log_text
from .core.pinned import Pick, pinned_pick
from .core.tables import installed_version, load_tables, table_entry

logger = logging.getLogger("autotune_guard")

# The exit sequence (``Guard.on_exit(fn, order)``), in the order it runs: what the process did is
# said first (the summary, the settings its kernels made ineffective), then the evidence files get
# their final write (which says how the process ended), then the winners consensus tuned are added
# to the table (last: it may wait for another job's table lock). ``_boot``'s verify-cadence check,
# which may end the process with status 1, is registered with atexit at interpreter start, before
# this package is imported, so it runs after all of these.
EXIT_SUMMARY = 10
EXIT_EVIDENCE = 20
EXIT_TABLE = 30
EXIT_NODE = 40  # a rank counts itself out of its node's Store: last, after what may still use it


class ChoiceLog:
    """One epoch's choices, and in record mode the winners with what was measured."""

    def __init__(self):
        self.lock = threading.Lock()
        self.entries: dict[ChoiceKey, Choice] = {}
        self.unverified: dict[ChoiceKey, Choice] = {}  # entries made since the last cross-rank check
        self.records: dict[str, dict[str, dict]] = {}  # kernel -> key text -> record entry
        self.record_arch: str | None = None
        self.packages: dict[str, str | None] = {}  # top-level package of a recorded kernel -> version

    def add(self, key: ChoiceKey, choice: Choice, record: dict | None) -> bool:
        """False when ``key`` was chosen already (its first choice stands)."""
        with self.lock:
            if key in self.entries:
                return False
            self.entries[key] = self.unverified[key] = choice
            if record is not None:
                self.record_arch = self.record_arch or key.arch
                self.records.setdefault(key.kernel, {})[key.key] = record
                top = key.kernel.split(".", 1)[0]
                if top not in self.packages:
                    self.packages[top] = installed_version(top)
            return True

    def snapshot(self, timeout: float = -1) -> tuple | None:
        """(text log, records, record arch, packages), copied under the lock; None when the lock
        could not be had within ``timeout`` seconds (a signal handler must not wait forever)."""
        if not self.lock.acquire(timeout=timeout):
            return None
        try:
            return (log_text(self.entries), {k: dict(v) for k, v in self.records.items()}, self.record_arch,
                    dict(self.packages))
        finally:
            self.lock.release()

    def take_unverified(self) -> dict[ChoiceKey, Choice]:
        with self.lock:
            taken, self.unverified = self.unverified, {}
            return taken


class Epoch:
    """What the process carries out under one installed policy; a new ``install()`` makes a new one.

    ``policy`` is the policy as carried out: a mode no setting chose is settled at its first read,
    a kernel's first launch (torch's deterministic flag, which the program may set after Triton
    was imported, selects pinned). ``installed`` is the policy as given."""

    def __init__(self, installed, generation: int, resolve: Callable):
        self.installed = installed
        self.generation = generation
        self.log = ChoiceLog()
        self.tables: dict[str, dict] = {}  # arch -> {kernel: {key: entry}}
        self.warned: set[str] = set()
        self.launched: dict[str, set[str]] = {}  # kernel -> meta-parameter names, for the exit checks
        self.tuned: dict[ChoiceKey, dict] = {}  # winners this process tuned for its job (consensus): the table grows by them
        self.picked: dict[ChoiceKey, str] = {}  # how pinned picked each key (``Pick.why``): the exit summary's words
        self.refused: list[ChoiceKey] = []  # keys AUTOTUNE_ON_MISS=error refused, for the uncaught-error hook
        self.split: dict[ChoiceKey, tuple[int, int]] = {}  # split tuning: key -> (timed here, candidates): the exit says it
        self.retimed: dict[ChoiceKey, str] = {}  # consensus: keys timed again despite a table entry, and why
        self._resolve = resolve
        self._policy = None

    @property
    def policy(self):
        policy = self._policy
        if policy is None and self.installed is not None:
            policy = self._policy = self._resolve(self.installed)
        return policy

    def settled_policy(self):
        """The policy as carried out if settled already, else as installed (settles nothing)."""
        return self._policy or self.installed


class Facts:
    """What only an adapter can read, each from the source the adapter provided: read at the first
    need and kept (``get``), or asked every time (``ask``)."""

    def __init__(self):
        self._sources: dict[str, Callable] = {}
        self._values: dict = {}

    def provide(self, name: str, source: Callable) -> None:
        self._sources[name] = source

    def get(self, name: str):
        if name not in self._values:
            source = self._sources.get(name)
            if source is None:
                return None
            self._values.setdefault(name, source())
        return self._values[name]

    def peek(self, name: str):
        return self._values.get(name)

    def ask(self, name: str, default=None):
        source = self._sources.get(name)
        return default if source is None else source()

    def versions(self) -> dict[str, str | None]:
        import sys

        return {"triton": self.get("triton_version"), "torch": self.ask("torch_version"),
                "python": sys.version.split()[0]}


class Guard(Lifecycle):
    """The process's autotune_guard state; see the module docstring."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()  # held while the epoch is replaced and while a choice is noted
        self.epoch = Epoch(None, 0, self._settle)
        self.facts = Facts()
        self.startup = settings.StartupSettings()
        self.startup_read = False  # set once the environment's start-up settings are read
        self.ungoverned: dict[str, str] = {}  # kernel -> why the guard did not govern its choice
        self.warned: set[str] = set()  # warnings said once per process
        self._subscribers: list[Callable] = []
        self._epoch_listeners: list[Callable] = []

    # --- epochs -----------------------------------------------------------------------------------

    def replace(self, policy) -> Epoch:
        """Make ``policy`` the one carried out, with a new log and tables, in one step; the
        epoch listeners (adapters dropping what they hung on foreign objects) run under the lock."""
        if policy is not None:  # outside the lock: settings the program changes after they were read
            self.on_exit(late_settings.say_set_too_late, EXIT_SUMMARY)
        with self.lock:
            self.epoch = Epoch(policy, self.epoch.generation + 1, self._settle)
            for listener in self._epoch_listeners:
                listener(self.epoch)
            return self.epoch

    def on_new_epoch(self, listener: Callable) -> Callable:
        """``listener(epoch)`` at every replacement, under the lock; returns the undo."""
        if listener not in self._epoch_listeners:
            self._epoch_listeners.append(listener)
        return lambda: self._epoch_listeners.remove(listener) if listener in self._epoch_listeners else None

    def _settle(self, installed):
        policy = settings.derived_mode(installed, self.facts.ask("torch_deterministic", False))  # a reason, or falsy
        if policy is not installed:
            logger.info("mode pinned, from %s; no AUTOTUNE_MODE was given", policy.mode_from)
        return policy

    # --- choices ----------------------------------------------------------------------------------

    def note(self, epoch: Epoch, key: ChoiceKey, choice: Choice, record: dict | None = None) -> bool:
        """Note a choice (and in record mode its record entry) made under ``epoch``; False, noting
        nothing, when another policy was installed meanwhile (the caller chooses again under it).
        A key chosen already keeps its first choice."""
        with self.lock:
            if epoch is not self.epoch:
                return False
            if not epoch.log.add(key, choice, record):
                return True
        logger.debug("choice %s -> %s", key.text(), choice.text())
        self.late_determinism(epoch)
        for subscriber in self._subscribers:
            subscriber()
        return True

    def tuned_for_job(self, epoch: Epoch, key: ChoiceKey, desc: dict) -> None:
        """A winner this process tuned for its whole job (consensus), for the table writer; before
        ``note()``, whose subscribers then find it."""
        with self.lock:
            if epoch is self.epoch:
                epoch.tuned.setdefault(key, desc)

    def subscribe(self, callback: Callable) -> None:
        """``callback()`` after every new choice, outside the lock (the evidence writer)."""
        if callback not in self._subscribers:
            self._subscribers.append(callback)

    def launched(self, epoch: Epoch, kernel: str, parameters) -> None:
        """An autotuner met under ``epoch`` (once per autotuner): for the exit checks."""
        epoch.launched.setdefault(base_name(kernel), set()).update(parameters)

    def table_entry(self, epoch: Epoch, arch: str, kernel: str, key: str):
        """The entry of the epoch's tables for a kernel and key text; tables are read at the first
        need per arch, and what could not be used is said once."""
        tables = epoch.tables.get(arch)
        if tables is None:
            said = lambda warning: self.warn_once(warning, warning, scope="process")  # noqa: E731
            tables, warnings = load_tables(epoch.installed.table_path, arch, self.facts.versions(),
                                          self.facts.get("table_store"), said)  # adapters.redis_tables: URLs
            epoch.tables[arch] = tables
            for warning in warnings:
                said(warning)
        entry = table_entry(tables, kernel, key)
        if entry is None and base_name(kernel) != kernel:  # a shared name falls back to the plain one
            entry = table_entry(tables, base_name(kernel), key)
        return entry

    def pin(self, epoch: Epoch, key: ChoiceKey, descriptors: list, defaults: dict | None = None) -> Pick:
        """The pinned rule for ``key`` among ``descriptors`` under ``epoch`` (table, block sizes,
        on-miss, chaos); a setting it could not obey is said once. Notes nothing. ``defaults``: the
        fields an entry may omit (None: Triton Config's)."""
        policy = epoch.policy
        entry = self.table_entry(epoch, key.arch, key.kernel, key.key)
        rank = self.facts.get("rank_world")[0] if policy.chaos else 0
        try:
            pick = pinned_pick(descriptors, table_entry=entry, policy=policy, what=key.what(), rank=rank,
                               defaults=(self.facts.get("config_defaults") or {}) if defaults is None else defaults)
        except SelectionError:
            if key not in epoch.refused:
                epoch.refused.append(key)
            raise
        epoch.picked[key] = pick.why
        if pick.warning:
            self.warn_once(pick.warning, f"{pick.warning}; using {pick.why}")
        if pick.why == AT_EXIT:
            self._refused_at_exit(epoch, key)
        elif pick.why in misses.FALLBACKS:
            self._fallback_said(epoch, key, pick.why)
        return pick

    def _refused_at_exit(self, epoch: Epoch, key: ChoiceKey) -> None:
        """AUTOTUNE_ON_MISS=error_at_exit: the key runs min_cost, is kept for the exit's refusal
        (every key, one run), and its kernel is named once for the job at ERROR now."""
        with self.lock:
            if key not in epoch.refused:
                epoch.refused.append(key)
        tag = f"refused {key.kernel}"
        if tag not in epoch.warned:
            self.warn_once(tag, misses.at_exit_line(key.what()), logging.ERROR if self.first_in_job(tag) else logging.DEBUG)

    def _fallback_said(self, epoch: Epoch, key: ChoiceKey, rule: str) -> None:
        """A key the tables lacked, pinned by the on-miss rule: one short line per kernel for the
        whole job (``first_in_job``; at INFO when AUTOTUNE_ON_MISS asked for this fallback), and
        why each table did not serve with the fix at DEBUG on every rank that falls back."""
        tag = f"fallback {key.kernel}"
        if tag in epoch.warned:
            return
        policy = epoch.policy
        level = logging.INFO if policy.on_miss_given else logging.WARNING
        if not self.first_in_job(tag):
            level = logging.DEBUG  # another rank of the job says it
        self.warn_once(tag, misses.fallback_line(key.what(), rule, policy.on_miss_given), level)
        if logger.isEnabledFor(logging.DEBUG):
            reasons = misses.miss_reasons(policy.table_path, key.arch, key.kernel, key.key, self.stores_down())
            logger.debug("%s", misses.fallback_message(key.what(), rule, reasons, policy.on_miss_given,
                                                       misses.fix_hint(policy.table_path, key.arch)))

    def stores_down(self) -> frozenset:
        """The table store URLs this process found down (``adapters.redis_tables``), if any."""
        held = self.facts.peek("table_store") or self.facts.get("table_store")
        return frozenset(getattr(held, "down", ()) or ())

    def first_in_job(self, tag: str) -> bool:
        """Whether this rank is the job's first to say ``tag``: the first to count it in the job's
        Store where the process group is up (a rank that never meets the kernel says nothing), else
        rank 0 by the rank variables (a process alone is rank 0). Said lines at 8 ranks and 20
        kernels stay 20, not 160."""
        try:
            store = self.facts.ask("job_store_alone")
            if store is not None:
                return store.add(f"autotune_guard/said/{tag}", 1) == 1
        except Exception as exc:  # a Store that fails here must not fail a launch: the rank rule
            logger.debug("the job's Store could not count %r (%s): rank 0 says it", tag, exc)
        return self.facts.ask("rank_now", (0, 1))[0] == 0

    def job_store(self, key: ChoiceKey):
        """The job's c10d Store for a consensus decision on ``key``, or None when not distributed."""
        try:
            return self.facts.ask("job_store")
        except StoreError as exc:
            raise ConsensusError(f"autotune_guard consensus: {key.what()}: {exc}") from exc

    # --- what is said ------------------------------------------------------------------------------

    def warn_once(self, tag: str, message: str, level: int = logging.WARNING, scope: str = "epoch",
                  name: str | None = None) -> bool:
        """Log ``message`` once per epoch (or per process) for ``tag``; False when said already.
        ``name``: a warning a user can silence (``core.warning_names``), said with it, at DEBUG when silenced."""
        said = self.epoch.warned if scope == "epoch" else self.warned
        if name is not None:
            message = f"{message} [{name}]"
            installed = self.epoch.installed
            level = logging.DEBUG if installed is not None and name in installed.disable_warnings else level
        with self.lock:
            if tag in said:
                return False
            said.add(tag)
        logger.log(level, "%s", message)
        return True

    def note_ungoverned(self, kernel: str, why: str) -> bool:
        """A kernel whose config choice the guard did not govern; False when noted already."""
        with self.lock:
            if kernel in self.ungoverned:
                return False
            self.ungoverned[kernel] = why
            return True

    def exit_lines(self) -> list[str]:
        """What the exit says about settings the kernels that ran made ineffective."""
        epoch = self.epoch
        if epoch.installed is None or not epoch.launched:
            return []
        self.late_determinism(epoch)
        return settings.unmatched_settings(epoch.settled_policy(), epoch.launched)

    def late_determinism(self, epoch: Epoch) -> None:
        """A determinism request switched on after the first launch settled a mode no setting chose:
        said once; the mode stays (one process never mixes timed and pinned choices of one policy)."""
        settled = epoch._policy  # None: not settled yet, and the first launch will find the request
        if settled is None or epoch.installed is None or epoch.installed.mode_from != settings.DERIVED \
                or settled.mode == "pinned":
            return
        reason = self.facts.ask("torch_deterministic", "")
        if reason:
            self.warn_once("late determinism", (
                f"{reason if isinstance(reason, str) else 'a determinism request'} was switched on after the first "
                f"autotuned launch had settled the mode as {settled.mode} (no AUTOTUNE_MODE was given): this "
                "process's choices stay timed, not pinned. Set AUTOTUNE_MODE=pinned, or switch it on before the "
                "first launch"), scope="process", name="late-determinism")

    # --- forks -------------------------------------------------------------------------------------

    def after_fork(self) -> None:
        """In a forked child: fresh locks (another thread may have held one at fork), an empty log
        (the parent's choices are in the parent's file); the listeners renew their own locks."""
        self.lock = threading.Lock()
        self.epoch.log = ChoiceLog()
        self.epoch.launched = {}  # the exit checks are the parent's to make
        self.epoch.tuned = {}  # the parent adds its own winners to the table
        self.epoch.picked, self.epoch.refused, self.epoch.split = {}, [], {}
        self.renew_lifecycle()  # the held objects' after_fork()


# The package's one module-level state of its own: everything else hangs off this object.
_guard = Guard()


def current() -> Guard:
    return _guard


# The package's one fork hook: every renewal is a held object's after_fork().
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_guard.after_fork)
