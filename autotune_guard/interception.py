"""Carrying out the installed policy against Triton's ``Autotuner``.

The only module that touches Triton internals.  It replaces ``Autotuner.run`` in place (seen
through every alias: ``triton.autotune``, ``triton.runtime.Autotuner``) with ``_guarded_run``:

* pinned, Triton 3.8+: the chosen config becomes the only survivor of the kernel's own pruning
  (``Autotuner.prune_configs`` is wrapped), which Triton 3.8+ treats as decided: no timing, the
  choice goes into Triton's ``cache`` and every later launch of the key is Triton's own cached
  path.  The selection (``pinning.pinned_index``) runs on what the kernel's pruning kept, which
  reads this call's own arguments (``_OwnArguments``).  Where no Config has a pre_hook (the one
  reader of Triton's shared ``nargs`` on a decided key's launch) later launches call Triton's run
  directly (``_go_direct``); otherwise a decided key's launch is Triton's cached path written out
  with the pre_hook given this call's own arguments (``_run_decided``), no lock.
* pinned, Triton 3.3-3.7 (where a pruning result of one is still timed), and consensus: the
  tuning key is computed exactly as Triton 3.2+ computes it; the first launch of a key selects,
  later launches find it in a dict; the launch runs through Triton's single-config branch
  (``configs`` swapped to ``[chosen]`` for the call, restored after it), which neither times nor
  touches ``cache``.  The swap is under the autotuner's own lock.
* auto and record: Triton runs untouched; a new ``cache`` entry after the call is its winner,
  logged (and recorded) with a label saying how it was chosen: ``timed``, ``cache hit`` (Triton's
  disk cache), ``pruned to one``; Triton 3.8+'s ``knobs.autotuning.listener`` says which, where
  Triton can call it (not under ``TRITON_INTERPRET=1``), else the label is inferred.
* a config an ``Autotuner`` subclass puts into ``cache`` itself before calling Triton's ``run``
  (fla's ``CachedAutotuner``) is logged as ``library``; a subclass whose ``run`` never reaches
  Triton's is named at its first launch.
* consensus: see ``_consensus_launch``.

The process's state (policy, generation, tables, warnings given, choice log) is ``state.now``
(imported here as ``shared``), replaced in one assignment (``_replace``), so a launch sees one
policy or the other, and no choice of the new one escapes its log.  Per-autotuner state lives on
the autotuner: its ``_State`` under the current policy, and its lock, which outlives policies.
Which candidate a pinned kernel runs is ``pinning.pinned_index``, shared with ``inductor``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import threading
import types
import weakref
from functools import cached_property

from . import pinning, selection, writer
from . import state as shared
from .policy import AutotunePolicy

logger = logging.getLogger("autotune_guard")

MIN_TRITON = (3, 3)
PRUNING_PINS = (3, 8)  # from here on Triton caches a pruning result of one config without timing
NEWEST_TESTED_TRITON = (3, 9)  # the newest release the suite runs against; a newer one warns once
_STATE_ATTR = "_autotune_guard_state"
_LOCK_ATTR = "_autotune_guard_lock"
_PROBED_ATTR = "_autotune_guard_probed"
_MISSING = object()


_locks_lock = threading.Lock()

# Triton 3.8+ pinned autotuners whose launches go straight to Triton's run (an instance ``run``):
# dropped at every policy change.
_direct = weakref.WeakSet()
_original_run = None
_original_init = None
_original_prune = None
_pins_through_pruning = False
_writes_out_decided = False  # Triton 3.8 ... the newest tested: _run_decided matches its cached path
_user_listener = None  # the listener that was there before ours, called after ours
_heard = threading.local()  # what Triton's listener last said in this thread
_init_needs_timer = False
_warned_newer = False


# --- installing ---------------------------------------------------------------------------------

def apply(policy: AutotunePolicy, autotuner_module) -> None:
    """Patch ``autotuner_module.Autotuner`` (once) and make ``policy`` the one carried out."""
    patch(autotuner_module)
    _replace(policy)


def set_pending(policy: AutotunePolicy) -> None:
    """The policy to carry out once Triton is imported."""
    _replace(policy)


def clear() -> None:
    """No policy: every autotuner runs as Triton's own (the patch stays, a dict lookup per launch)."""
    _replace(None)


def _replace(policy: AutotunePolicy | None) -> None:
    """The new policy with a new choice log, in one assignment (``state.replace``) under
    ``swap_lock``: a first choice is noted under that lock after checking its generation is
    current, so none made under the new policy is lost, and none of the old one lands in its log."""
    with shared.swap_lock:
        for autotuner in list(_direct):
            autotuner.__dict__.pop("run", None)  # its launches go through the guard again
        _direct.clear()
        shared.replace(policy)
        writer.configure(policy)
    if policy is not None and _original_run is not None:
        _chain_listener()


def patch(autotuner_module) -> None:
    global _original_run, _original_init, _original_prune, _pins_through_pruning, _init_needs_timer, _writes_out_decided
    cls = getattr(autotuner_module, "Autotuner", None)
    version = check_supported(autotuner_module)
    if getattr(cls.run, "_autotune_guard", False):
        return
    _original_run = cls.run
    cls.run = _guarded_run
    _original_init = cls.__init__
    cls.__init__ = _guarded_init
    # A bound method pickles as getattr(instance, its function's __name__): the guard's answer to
    # Triton's names, so an autotuner's bound run or prune_configs still pickles.
    _guarded_run.__name__, _guarded_init.__name__, _guarded_prune.__name__ = "run", "__init__", "prune_configs"
    # Triton 3.3 resolves its default timer in __init__, which under TRITON_INTERPRET=1 on a
    # CPU-only machine fails at decoration ("0 active drivers") even for kernels we pin.
    _init_needs_timer = not isinstance(inspect.getattr_static(cls, "do_bench", None), cached_property)
    if version >= PRUNING_PINS:
        _original_prune = cls.prune_configs
        cls.prune_configs = _guarded_prune
        _pins_through_pruning = True
        # A newer release may change its run's cached path: there, Triton's run under the lock.
        _writes_out_decided = version <= NEWEST_TESTED_TRITON
    for sub in _subclasses(cls):  # autotuner classes defined before the patch
        _wrap_overriding_run(sub)


def check_supported(autotuner_module) -> tuple:
    """Triton's (major, minor); raises for a release this package does not support."""
    global _warned_newer
    import triton

    version = getattr(triton, "__version__", "0")
    numbers = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    cls = getattr(autotuner_module, "Autotuner", None)
    if numbers < MIN_TRITON or cls is None or not all(hasattr(cls, n) for n in ("run", "prune_configs")):
        raise RuntimeError(
            f"autotune_guard supports Triton {MIN_TRITON[0]}.{MIN_TRITON[1]} and newer; this is Triton {version}. "
            "Set AUTOTUNE_DISABLE=1 to run unguarded."
        )
    if numbers > NEWEST_TESTED_TRITON and not _warned_newer:
        # Still guarded: the patch checks the methods it needs above; a newer release may change
        # what they do, so the user hears it once per process.
        _warned_newer = True
        newest = ".".join(map(str, NEWEST_TESTED_TRITON))
        logger.warning("Triton %s is newer than %s, the newest release autotune_guard is tested with; "
                       "it is guarded all the same (AUTOTUNE_DISABLE=1 runs unguarded)", version, newest)
    return numbers


def _guarded_init(self, *args, **kwargs):
    if _init_needs_timer and kwargs.get("do_bench") is None and _interpreting():
        kwargs["do_bench"] = _no_timer_under_interpreter
    _original_init(self, *args, **kwargs)
    cls = type(self)
    if not getattr(cls.run, "_autotune_guard", False):
        _wrap_overriding_run(cls)


def _no_timer_under_interpreter(kernel_call, quantiles):
    raise RuntimeError("Triton's default timer needs a GPU driver; under TRITON_INTERPRET=1 give the kernel "
                       "do_bench=..., or pin it with AUTOTUNE_MODE=pinned")


_guarded_init._autotune_guard = True


def _subclasses(cls) -> list:
    found, todo = [], list(cls.__subclasses__())
    while todo:
        sub = todo.pop()
        found.append(sub)
        todo.extend(sub.__subclasses__())
    return found


# --- Autotuner subclasses that override run (FlagGems' LibTuner, fla's CachedAutotuner) --------

def _wrap_overriding_run(cls) -> None:
    """Wrap the ``run`` a subclass defines, so that its first launch under a policy shows
    whether it reaches Triton's (the guarded) ``run`` at all; one that does not is named."""
    owner = next(c for c in cls.__mro__ if "run" in c.__dict__)
    original = owner.__dict__["run"]
    if getattr(original, "_autotune_guard", False) or not callable(original):
        return

    @functools.wraps(original)
    def run(self, *args, **kwargs):
        if self.__dict__.get(_PROBED_ATTR) == shared.now.generation or shared.now.policy is None:
            return original(self, *args, **kwargs)
        return _probe_first_launch(self, original, owner, args, kwargs)

    run._autotune_guard = True
    run._autotune_guard_wraps = original
    owner.run = run


class _Probe:
    """Stands in for an autotuner's state during the first launch of a subclass's own ``run``:
    the guarded run replaces it (a stale generation) if it is reached."""

    generation = -1


def _probe_first_launch(autotuner, original, owner, args, kwargs):
    attrs = autotuner.__dict__
    previous = attrs.get(_STATE_ATTR, _MISSING)
    probe = attrs[_STATE_ATTR] = _Probe()
    try:
        result = original(autotuner, *args, **kwargs)
    finally:
        reached = attrs.get(_STATE_ATTR) is not probe
        if not reached:
            if previous is _MISSING:
                attrs.pop(_STATE_ATTR, None)
            else:
                attrs[_STATE_ATTR] = previous
    attrs[_PROBED_ATTR] = shared.now.generation
    if not reached:
        _ungoverned(autotuner, owner)
    return result


def _ungoverned(autotuner, owner) -> None:
    policy = shared.now.policy
    name = _qualified(autotuner)
    cls = f"{owner.__module__}.{owner.__qualname__}"
    message = (f"kernel {name}: its autotuner class {cls} overrides run() and never calls Triton's Autotuner.run, "
               f"so autotune_guard ({policy.mode} mode) neither sees nor governs its config choices; they are not "
               "in the choice log")
    if policy.mode == "pinned" and policy.on_miss == "error" and policy.in_scope(name):
        raise selection.SelectionError(f"autotune_guard: {message} (AUTOTUNE_ON_MISS=error)")
    shared.note_ungoverned(name, f"{cls}.run never calls Triton's Autotuner.run")
    if message not in shared.now.warned:
        shared.now.warned.add(message)
        logger.warning("%s", message)


# --- the launch path ----------------------------------------------------------------------------

class _State:
    """What one autotuner needs on its launch path under the current policy."""

    __slots__ = ("generation", "qualified", "mode", "arg_names", "arg_set", "keys", "key_index", "selected", "seen",
                 "lock", "via_pruning", "library_check", "accounted", "library", "direct")

    def __init__(self, autotuner, process: shared.Process, lock, previous):
        policy = process.policy
        self.generation = process.generation
        self.qualified = _qualified(autotuner)
        self.mode = policy.mode if policy.in_scope(self.qualified) else "off"
        self.arg_names = list(autotuner.arg_names)
        self.arg_set = frozenset(self.arg_names)
        self.keys = list(autotuner.keys)
        # Positions of the key arguments, for the tuning key of an all-positional call.
        self.key_index = tuple(self.arg_names.index(name) for name in self.keys if name in self.arg_set)
        self.selected: dict = {}  # tuning key -> live Config chosen by the guard
        self.seen: set = set()  # tuning keys whose ``cache`` entry is accounted for (observed or pinned)
        self.library: set = set()  # tuning keys whose config the autotuner's own class put in ``cache``
        self.lock = lock  # the autotuner's, shared by every policy
        self.via_pruning = self.mode == "pinned" and _pins_through_pruning
        # A subclass that overrides run may fill ``cache`` itself before calling Triton's run.
        self.library_check = getattr(type(autotuner).run, "_autotune_guard_wraps", None) is not None
        # Triton 3.8+, pinned, and nothing on a decided key's launch reads the arguments Triton's
        # run keeps on the autotuner (``nargs``, which every thread launching it rewrites): no
        # Config pre_hook.  Launches then go straight to Triton's run, with no lock (see
        # _go_direct).  Pruning functions read ``nargs`` too, but only at a new key's first
        # launch, and there _guarded_prune hands them this call's own arguments.  With a
        # pre_hook: _run_decided.
        self.direct = (self.via_pruning and not self.library_check
                       and not any(c.pre_hook for c in autotuner.configs))
        # Entries an earlier policy accounted for (pinned or observed): not the library's.
        self.accounted = set(previous.seen) if isinstance(previous, _State) else set()
        if policy.enumerate and len(autotuner.configs) > 1:
            how = {"off": "left to Triton (out of scope)", "pinned": "pinned", "consensus": "consensus"}.get(self.mode, "timed")
            logger.info("autotuner %s: %d candidates, %s", self.qualified, len(autotuner.configs), how)


def _qualified(autotuner) -> str:
    fn = getattr(autotuner, "base_fn", None) or autotuner.fn
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"


def _lock_of(autotuner):
    """The autotuner's own lock, made once: every policy's launches of it share it."""
    lock = autotuner.__dict__.get(_LOCK_ATTR)
    if lock is None:
        with _locks_lock:
            lock = autotuner.__dict__.get(_LOCK_ATTR)
            if lock is None:
                lock = threading.RLock()
                setattr(autotuner, _LOCK_ATTR, lock)
    return lock


def _new_state(autotuner, launch=None) -> _State:
    """The autotuner's state under the current policy, built once (under its lock: two threads
    meeting its first launch share one state).  ``launch``: the (args, kwargs) of the launch
    that builds it, whose key a subclass may just have filled in ``cache`` itself."""
    lock = _lock_of(autotuner)
    with lock:
        if autotuner.__dict__.get(_STATE_ATTR) is None:
            from . import api  # (not at the top: api imports this module)

            api.first_launch_of(autotuner)  # not the steady path: once per autotuner (may install pinned)
        process = shared.now
        attrs = autotuner.__dict__
        state = attrs.get(_STATE_ATTR)
        if state is None or state.generation != process.generation:
            previous = state
            state = _State(autotuner, process, lock, previous)
            cache = autotuner.cache
            if isinstance(previous, _State) and previous.via_pruning:
                # Entries the previous policy pinned through Triton's cache are not Triton's winners.
                for key, config in previous.selected.items():
                    if cache.get(key) is config:
                        del cache[key]
            if state.via_pruning:
                # The pin governs keys Triton chose before (as the swap does, which ignores the
                # cache); Triton times them again under a later auto policy.  A subclass that fills
                # the cache itself keeps what is not known to be Triton's: it may be the library's.
                if state.library_check:
                    for key in state.accounted:
                        cache.pop(key, None)
                else:
                    cache.clear()
            setattr(autotuner, _STATE_ATTR, state)
            if state.via_pruning and not state.library_check:
                _go_direct(autotuner, state)
            if state.library_check and launch is not None and cache and state.mode != "off":
                _check_library_entry(autotuner, state, *launch)
            if state.mode in ("auto", "record") and cache:
                # Winners Triton chose before this policy was installed belong in its log too.
                _observe(autotuner, state, _MISSING)
        return state


def _go_direct(autotuner, state) -> None:
    """Triton 3.8+ pinned: later launches skip the guarded run (an instance attribute shadows the
    class's), so the steady state is Triton's cached path: Triton's own run itself, or, when a
    Config has a pre_hook, that path written out (``_run_decided``; Triton's run under the
    autotuner's lock on a release newer than the newest tested).  A new key still meets the
    guard, in ``_guarded_prune``.  Under ``shared.swap_lock``, so a policy change cannot miss it
    (``_replace`` takes the launches back)."""
    with shared.swap_lock:
        if autotuner.__dict__.get(_STATE_ATTR) is state and state.generation == shared.now.generation:
            if state.direct:
                run = types.MethodType(_original_run, autotuner)
            elif _writes_out_decided:
                run = functools.partial(_run_decided, autotuner, state)
            else:
                run = functools.partial(_hold_and_run, autotuner, state)
            autotuner.__dict__["run"] = run
            _direct.add(autotuner)


def _run_decided(self, state, *args, **kwargs):
    """Triton 3.8+ pinned, a kernel whose Configs have pre_hooks: what Triton's run does for a key
    in its cache (3.8 and 3.9 alike), except that the pre_hook gets this call's own arguments.
    Triton's run hands it ``self.nargs``, which every thread launching this autotuner rewrites;
    here no launch of a decided key writes it, and a new key's launch (the only writer left) runs
    Triton's run under the autotuner's lock, so no lock is needed on the steady path.  As in
    ``_hold_and_run``, a failed launch leaves ``best_config`` as it was."""
    config = self.cache.get(_tuning_key(state, args, kwargs))
    if config is None:  # a key not decided yet: its pruning chooses (_guarded_prune)
        return _hold_and_run(self, state, *args, **kwargs)
    settings = config.all_kwargs()
    if config.pre_hook is not None:
        config.pre_hook({**dict(zip(state.arg_names, args)), **kwargs, **settings})
    result = self.fn.run(*args, **kwargs, **settings)
    self.best_config = config
    return result


def _hold_and_run(self, state, *args, **kwargs):
    """Triton 3.8+ pinned, a kernel whose Configs have pre_hooks, a key's first launch: Triton's
    own run, under the autotuner's lock, because Triton's run keeps the call's arguments in
    ``self.nargs``, shared by every thread launching this autotuner, and a pre_hook reads them.
    A failed launch leaves the autotuner as it was.  acquire/release rather than ``with``:
    measurably cheaper per launch."""
    lock = state.lock
    lock.acquire()
    try:
        best = self.__dict__.get("best_config", _MISSING)
        try:
            return _original_run(self, *args, **kwargs)
        except BaseException:
            _undo_failed_launch(self, state, args, kwargs, best)
            raise
    finally:
        lock.release()


def _guarded_run(self, *args, **kwargs):
    state = self.__dict__.get(_STATE_ATTR)
    if state is None or state.generation != shared.now.generation:
        if shared.now.policy is None:
            return _original_run(self, *args, **kwargs)
        state = _new_state(self, (args, kwargs))
    mode = state.mode
    if state.via_pruning:
        # Triton 3.8+: the choice lives in Triton's cache; this is Triton's own cached path (later
        # launches skip this function, see _go_direct, except for a subclass that may fill the
        # cache itself: its new entries are looked at first, under the same hold of the lock).
        if not state.library_check:
            return _hold_and_run(self, state, *args, **kwargs)
        with state.lock:
            if len(self.cache) != len(state.seen):
                _check_library_entry(self, state, args, kwargs)
            return _hold_and_run(self, state, *args, **kwargs)
    if mode == "pinned" or mode == "consensus":
        # The steady state, inlined (it is every launch): under the lock, because another
        # thread's pinned launch swaps ``configs`` to one element for the length of its call.
        # acquire/release rather than ``with``: measurably cheaper per launch.
        lock = state.lock
        lock.acquire()
        try:
            saved = self.configs
            if len(saved) < 2:
                return _original_run(self, *args, **kwargs)
            key = _tuning_key(state, args, kwargs)
            config = state.selected.get(key)
            if config is None:
                if key in state.library or (state.library_check and key in self.cache
                                             and key not in state.accounted and _library_chose(self, state, key)):
                    return _original_run(self, *args, **kwargs)  # the library's own choice, named once
                if mode == "pinned":
                    config = _pinned_choice(self, state, key, _candidates(self, args, kwargs))
                    if config is None:  # a new policy was installed meanwhile: launch under it
                        return _guarded_run(self, *args, **kwargs)
            if config is not None:
                attrs = self.__dict__
                best, nargs = attrs.get("best_config", _MISSING), attrs.get("nargs", _MISSING)
                self.configs = [config]
                try:
                    return _original_run(self, *args, **kwargs)
                except BaseException:
                    _restore(attrs, best, nargs)
                    raise
                finally:
                    self.configs = saved
        finally:
            lock.release()
        # A key consensus has not decided yet: outside this lock, which the decision takes after its own.
        _heard.value = None
        result = _consensus_launch(self, state, key, args, kwargs)
        heard = _heard.value
        if heard is None or heard[0] != key:  # Triton did not tell listeners itself (it did if it timed here)
            config = state.selected.get(key)
            if config is not None:
                _tell_listener(self, key, config)
        return result
    if mode == "off":
        return _original_run(self, *args, **kwargs)
    # auto / record: Triton times; a new cache entry is its winner (a single-config autotuner
    # never adds one, so it needs no test of its own here).
    cache = self.cache
    if state.library_check and len(cache) != len(state.seen):
        _check_library_entry(self, state, args, kwargs)
    before = len(cache)
    timings = self.__dict__.get("configs_timings")
    result = _original_run(self, *args, **kwargs)
    if len(cache) != before:
        _observe(self, state, timings)
    return result


_guarded_run._autotune_guard = True


def _guarded_prune(self, kwargs):
    """Triton 3.8+: the kernel's own pruning, then, for a pinned autotuner, the chosen config as
    its only survivor (Triton caches it without timing).  Called by Triton's run for a key not in
    its cache; the pruning functions see this call's arguments even when other threads launch
    the autotuner directly meanwhile (and rewrite ``self.nargs``)."""
    call = _tritons_call(sys._getframe(1))
    if call is not None and (self.early_config_prune or self.perf_model):
        pruned = _original_prune(_OwnArguments(self, dict(zip(self.arg_names, call[1]))), kwargs)
    else:
        pruned = _original_prune(self, kwargs)
    while True:
        state = self.__dict__.get(_STATE_ATTR)
        if not isinstance(state, _State) or state.generation != shared.now.generation:
            if shared.now.policy is None:
                return pruned
            state = _new_state(self)
        if not state.via_pruning:
            return pruned
        if call is not None:
            key = call[0]
        else:
            key = _tuning_key(state, (), {**(self.nargs or {}), **kwargs})
        config = state.selected.get(key)
        if config is None:
            config = _pinned_choice(self, state, key, list(pruned))
            if config is None:  # a new policy was installed meanwhile: choose under it
                continue
        state.seen.add(key)
        return [config]


_guarded_prune._autotune_guard = True


def _tritons_call(frame):
    """(the tuning key, the positional arguments) of the call of Triton's run that called the
    pruning (its locals ``key`` and ``args``), or None when pruning was called from elsewhere:
    exact even if another thread replaced ``self.nargs`` meanwhile."""
    if frame is not None and frame.f_code is _original_run.__code__:
        local = frame.f_locals
        key, args = local.get("key"), local.get("args")
        if isinstance(key, tuple) and isinstance(args, tuple):
            return key, args
    return None


class _OwnArguments:
    """The autotuner as the kernel's pruning functions see it at a new key's first launch: its
    ``nargs`` are this call's arguments, whatever other threads wrote into the autotuner's own;
    every other attribute is the autotuner's.  Triton's ``prune_configs`` only reads ``self``."""

    def __init__(self, autotuner, nargs):
        self.__dict__["_autotuner"] = autotuner
        self.__dict__["nargs"] = nargs

    def __getattr__(self, name):
        return getattr(self.__dict__["_autotuner"], name)


def _undo_failed_launch(autotuner, state, args, kwargs, best) -> None:
    """A launch that raised leaves the autotuner as it was: ``best_config``, ``nargs`` (Triton's
    run sets both and clears ``nargs`` only when it completes), and no cache entry for a key whose
    first launch failed (the choice itself stays: the next launch runs it again)."""
    attrs = autotuner.__dict__
    if best is _MISSING:
        attrs.pop("best_config", None)
        attrs.pop("nargs", None)
    else:
        attrs["best_config"] = best
        attrs["nargs"] = None
    try:
        key = _tuning_key(state, args, kwargs)
    except Exception:  # the arguments themselves were the problem
        return
    config = state.selected.get(key)
    if config is not None and autotuner.cache.get(key) is config:
        del autotuner.cache[key]
        state.seen.discard(key)


def _check_library_entry(autotuner, state, args, kwargs) -> None:
    """A subclass's run put a config into ``cache`` for this launch's key before calling
    Triton's: that is the library's choice, logged as such (pinned: named once, or refused)."""
    key = _tuning_key(state, args, kwargs)
    if key in autotuner.cache and key not in state.seen and key not in state.accounted:
        _library_chose(autotuner, state, key)


def _library_chose(autotuner, state, key) -> bool:
    config = autotuner.cache[key]
    arch = current_arch()
    text = selection.key_text(key)
    desc = selection.descriptor(config)
    signature = selection.signature(desc)
    candidates = [selection.compact(selection.descriptor(c)) for c in autotuner.configs]
    if state.mode == "pinned":
        what = f"kernel {state.qualified} key ({text}) arch {arch}"
        among = "" if selection.compact(desc) in candidates else f", which is not one of its {len(candidates)} candidates"
        cls = type(autotuner)
        message = (f"{what}: its autotuner ({cls.__module__}.{cls.__qualname__}) chose {signature} itself{among} "
                   "(it put the config into Triton's cache before the launch); pinned mode leaves that choice to the "
                   "library and logs it as 'library'. To pin this kernel, turn off the library's own config choice "
                   "(for fla: leave FLA_CACHE_MODE unset)")
        if shared.now.policy.on_miss == "error":
            raise selection.SelectionError(f"autotune_guard: {message}; refused with AUTOTUNE_ON_MISS=error")
        if state.qualified not in shared.now.warned:
            shared.now.warned.add(state.qualified)
            logger.warning("%s", message)
    with shared.swap_lock:
        if state.generation != shared.now.generation:
            return True
        state.seen.add(key)
        state.library.add(key)
        shared.note_choice(arch, state.qualified, text, signature, "library")
        if shared.now.policy.record_path:
            shared.note_record(arch, state.qualified, text, selection.compact(desc), signature, "library", None, candidates)
    return True


def _run_pinned(autotuner, state, config, args, kwargs):
    """Launch ``config`` through Triton's single-config branch (``_guarded_run`` inlines this)."""
    with state.lock:  # configs is shared by every thread launching this autotuner
        saved = autotuner.configs
        attrs = autotuner.__dict__
        best, nargs = attrs.get("best_config", _MISSING), attrs.get("nargs", _MISSING)
        autotuner.configs = [config]
        try:
            return _original_run(autotuner, *args, **kwargs)
        except BaseException:
            _restore(attrs, best, nargs)
            raise
        finally:
            autotuner.configs = saved


def _restore(attrs, best, nargs) -> None:
    """After a failed launch: ``best_config`` and ``nargs`` as they were (Triton's run sets
    both and clears ``nargs`` only when it completes)."""
    for name, value in (("best_config", best), ("nargs", nargs)):
        if value is _MISSING:
            attrs.pop(name, None)
        else:
            attrs[name] = value


def _tuning_key(state, args, kwargs) -> tuple:
    """Triton's own tuning key (3.2+ formula): key arguments by name, then every dtype."""
    if len(args) <= len(state.arg_names) and state.arg_set.isdisjoint(kwargs):
        # Every kernel argument positional (the usual ``kernel[grid](...)``): no name mapping,
        # one attribute read per argument.
        count = len(args)
        key = [args[i] for i in state.key_index if i < count]
        for value in args:
            dtype = getattr(value, "dtype", _MISSING)
            if dtype is not _MISSING:
                key.append(str(dtype))
        return tuple(key)
    nargs = dict(zip(state.arg_names, args))
    if kwargs:
        arg_set = state.arg_set
        for name, value in kwargs.items():
            if name in arg_set:
                nargs[name] = value
    key = [nargs[name] for name in state.keys if name in nargs]
    key += [str(value.dtype) for value in nargs.values() if hasattr(value, "dtype")]
    return tuple(key)


def _candidates(autotuner, args, kwargs) -> list:
    """The live candidates after the kernel's own pruning (early_config_prune, perf_model/top_k)."""
    if not (autotuner.early_config_prune or autotuner.perf_model):
        return list(autotuner.configs)
    saved = autotuner.__dict__.get("nargs")
    autotuner.nargs = dict(zip(autotuner.arg_names, args))
    try:
        prune = _original_prune if _original_prune is not None else type(autotuner).prune_configs
        return list(prune(autotuner, kwargs))
    finally:
        autotuner.nargs = saved


def _pinned_choice(autotuner, state, key, candidates):
    """Select among ``candidates`` (after the kernel's pruning) and note the choice; None when a
    new policy was installed meanwhile (the caller starts over under it)."""
    process = shared.now
    if state.generation != process.generation:
        return None
    arch = current_arch()
    text = selection.key_text(key)
    descriptors = [selection.descriptor(c) for c in candidates]
    index, why = pinning.pinned_index(state.qualified, text, descriptors, process.policy, arch)
    config = candidates[index]
    signature = selection.signature(descriptors[index])
    with shared.swap_lock:
        if state.generation != shared.now.generation:
            return None
        state.selected[key] = config
        shared.note_choice(arch, state.qualified, text, signature, "pinned")
    logger.debug("pinned %s key (%s) -> %s (%s)", state.qualified, text, signature, why)
    _tell_listener(autotuner, key, config)
    return config


def _consensus_launch(autotuner, state, key, args, kwargs):
    """First launch of a key in consensus mode: tune it for the job, or pin the job's winner.

    The first thread of any rank to claim the decision in the job's Store times the candidates
    through Triton's own path (that launch is the tuning launch) and publishes the winner; every
    other rank, and every other thread, pins that winner.  Nothing here is a collective, so ranks
    may meet kernels in any order, or never.
    """
    with _consensus_gate(autotuner, key):  # one decision per key per process; later threads pin
        config = state.selected.get(key)
        if config is None:
            config = _consensus_decide(autotuner, state, key, args, kwargs)
            if isinstance(config, _Launched):
                return config.result
    return _run_pinned(autotuner, state, config, args, kwargs)


class _Launched:
    """The decision was made by tuning, and that tuning launch already ran the kernel."""

    __slots__ = ("result",)

    def __init__(self, result):
        self.result = result


# (id(autotuner), key) -> Lock, a few bytes per key ever decided.  Per autotuner rather than per
# state: two threads that both build a state at an autotuner's first launch still share the gate.
_consensus_gates: dict = {}
_consensus_gates_lock = threading.Lock()


def _consensus_gate(autotuner, key):
    with _consensus_gates_lock:
        gate = _consensus_gates.get((id(autotuner), key))
        if gate is None:
            gate = _consensus_gates[(id(autotuner), key)] = threading.Lock()
        return gate


def _consensus_decide(autotuner, state, key, args, kwargs):
    """The config to pin for ``key``, or _Launched when this thread tuned it (``consensus.decide``)."""
    from . import consensus, distributed

    policy = shared.now.policy
    arch = current_arch()
    text = selection.key_text(key)
    what = f"kernel {state.qualified} key ({text}) arch {arch}"
    try:
        store = distributed.job_store()
    except distributed.StoreError as exc:
        raise consensus.ConsensusError(f"autotune_guard consensus: {what}: {exc}") from exc
    if store is None:
        return _consensus_alone(autotuner, state, key, text, arch, args, kwargs)
    with state.lock:  # pruning sets autotuner.nargs for the call, like Triton's own run does
        candidates = _candidates(autotuner, args, kwargs)
    signatures = [selection.signature(selection.descriptor(c)) for c in candidates]
    index, tuned_here, tuned = consensus.decide(
        store, what, consensus.decision_name(arch, state.qualified, text), distributed.rank_and_world()[0],
        signatures, lambda: _consensus_tune(autotuner, state, key, args, kwargs, candidates), policy.consensus_timeout)
    if tuned_here:
        signature, (result, winner, measured) = tuned
        if index is not None:  # the live object, so that its hooks survive (not a disk-cache copy)
            winner = candidates[index]
        state.selected[key] = winner
        _consensus_evidence(autotuner, state, arch, text, winner, signature, measured, "consensus")
        logger.debug("consensus %s key (%s) -> %s (tuned here for the job)", state.qualified, text, signature)
        return _Launched(result)
    config = candidates[index]
    state.selected[key] = config
    _consensus_evidence(autotuner, state, arch, text, config, signatures[index], None, "consensus")
    logger.debug("consensus %s key (%s) -> %s (tuned by another rank)", state.qualified, text, signatures[index])
    return config


def _consensus_tune(autotuner, state, key, args, kwargs, candidates):
    """``tune()`` for ``consensus.decide``: Triton times the candidates (that launch is the tuning
    launch); returns the winner's signature and (launch result, winner, Triton's timings)."""
    if len(candidates) == 1:  # pruning left one: nothing to time (Triton < 3.8 would time it)
        result, winner, measured = _run_pinned(autotuner, state, candidates[0], args, kwargs), candidates[0], None
    else:
        result, winner, measured = _triton_tunes(autotuner, state, key, args, kwargs)
    return selection.signature(selection.descriptor(winner)), (result, winner, measured)


def _consensus_alone(autotuner, state, key, text, arch, args, kwargs):
    """No process group at the moment of choice: Triton tunes for this process alone, as in auto."""
    from .distributed import rank_and_world

    note = "consensus: no process group"
    if note not in shared.now.warned:
        shared.now.warned.add(note)
        world = rank_and_world()[1]
        if world > 1:  # a distributed job that has not initialized its group yet: choices may differ
            logger.warning("AUTOTUNE_MODE=consensus but torch.distributed is not initialized yet (world size %d "
                           "from the environment): choices made before init_process_group are this rank's own, "
                           "timed as in auto mode", world)
        else:
            logger.info("AUTOTUNE_MODE=consensus without a torch.distributed process group: choices are timed "
                        "by this process alone, as in auto mode")
    result, winner, measured = _triton_tunes(autotuner, state, key, args, kwargs)
    state.selected[key] = winner
    _consensus_evidence(autotuner, state, arch, text, winner, selection.signature(selection.descriptor(winner)), measured,
                        "timed")
    return _Launched(result)


def _triton_tunes(autotuner, state, key, args, kwargs):
    """Triton's own tuning launch of a new key: (its result, the winner, Triton's timings by
    signature when it timed in this process).  Under the lock, which keeps pinned launches of the
    autotuner's other keys (they swap ``configs``) away from the tuning, which reads ``configs``."""
    with state.lock:
        timings_before = autotuner.__dict__.get("configs_timings")
        result = _original_run(autotuner, *args, **kwargs)
        winner = autotuner.cache.get(key, autotuner.__dict__.get("best_config"))
        timings = autotuner.__dict__.get("configs_timings")
    return result, winner, _measured(autotuner, timings, timings_before)


def _measured(autotuner, timings, timings_before) -> dict | None:
    """Triton's timings of the launch just made, by signature, if it timed in this process: it
    replaced ``configs_timings`` with one keyed by the live candidates (a disk-cache hit replaces
    it too, with Configs rebuilt from JSON)."""
    if timings is None or timings is timings_before:
        return None
    live = {id(c) for c in autotuner.configs}
    if not all(id(c) in live for c in timings):
        return None
    return {selection.signature(selection.descriptor(c)): [float(t) for t in _as_list(v)] for c, v in timings.items()}


def _consensus_evidence(autotuner, state, arch, text, config, signature, measured, how) -> None:
    """The choice log on every rank; the record file too when AUTOTUNE_RECORD_PATH is set."""
    shared.note_choice(arch, state.qualified, text, signature, how)
    if shared.now.policy.record_path:
        shared.note_record(arch, state.qualified, text, selection.compact(selection.descriptor(config)), signature, how, measured,
                             [selection.compact(selection.descriptor(c)) for c in autotuner.configs])


# --- observing Triton's choices -----------------------------------------------------------------

def _observe(autotuner, state, timings_before) -> None:
    """Log (and in record mode record) the winners Triton chose: the one this launch added (the
    newest entry, labelled by how Triton chose it) and any other not yet seen (chosen before this
    policy was installed; ``timings_before`` is _MISSING when there was no launch)."""
    arch = current_arch()
    cache = autotuner.cache
    timings_now = autotuner.__dict__.get("configs_timings")
    heard = getattr(_heard, "value", None)
    _heard.value = None
    newest = next(reversed(cache), None) if cache and timings_before is not _MISSING else _MISSING
    candidates = None
    for key, config in list(cache.items()):
        if key in state.seen:
            continue
        text = selection.key_text(key)
        desc = selection.descriptor(config)
        signature = selection.signature(desc)
        if key == newest:
            how, measured = _how_chosen(autotuner, key, heard, timings_now, timings_before)
        else:
            how, measured = "reused", None
        with shared.swap_lock:
            if state.generation != shared.now.generation:
                return
            state.seen.add(key)
            shared.note_choice(arch, state.qualified, text, signature, "timed" if how == "reused" else how)
            if state.mode == "record":
                if candidates is None:
                    candidates = [selection.compact(selection.descriptor(c)) for c in autotuner.configs]
                shared.note_record(arch, state.qualified, text, selection.compact(desc), signature, how, measured, candidates)


def _how_chosen(autotuner, key, heard, timings_now, timings_before) -> tuple:
    """(label, Triton's timings by signature or None) for the entry this launch added."""
    if heard is not None and heard[0] == key and heard[2] is timings_now:  # Triton's listener said it
        _, cache_hit, timings = heard
        if cache_hit:
            return "cache hit", None
        return "timed", _measured(autotuner, timings, None)
    if timings_now is timings_before:
        # No timing and no disk-cache read, yet a new entry: Triton 3.8+ kept the one config the
        # kernel's pruning left.
        return "pruned to one", None
    measured = _measured(autotuner, timings_now, timings_before)
    # New timings over Configs rebuilt from JSON: Triton's disk cache (3.4+).
    return ("timed", measured) if measured is not None else ("cache hit", None)


def _chain_listener() -> None:
    """Triton 3.8+ (``knobs.autotuning.listener``): ours first, then whatever listener was set
    before.  Not under TRITON_INTERPRET=1, where Triton's call of any listener fails (it looks
    for a JITFunction that the interpreter does not make) after the choice is cached."""
    global _user_listener
    if not _pins_through_pruning or _interpreting():
        return
    knobs = _autotuning_knobs()
    if knobs is None:
        return
    current = knobs.listener
    if current is not _listener:
        _user_listener = current
        knobs.listener = _listener


def _autotuning_knobs():
    try:
        from triton import knobs
    except ImportError:
        return None
    autotuning = getattr(knobs, "autotuning", None)
    return autotuning if autotuning is not None and hasattr(autotuning, "listener") else None


def _listener(*, fn, key, best_config, configs_timings, duration, cache_hit, **more):
    """What Triton says about a choice it just made; passed on to the listener that was there."""
    _heard.value = (key, bool(cache_hit), configs_timings)
    if _user_listener is not None:
        _user_listener(fn=fn, key=key, best_config=best_config, configs_timings=configs_timings, duration=duration,
                       cache_hit=cache_hit, **more)


def _tell_listener(autotuner, key, config) -> None:
    """A choice the guard made, pinned or consensus (Triton calls no listener for it): the user's
    listener hears it as Triton's disk-cache hits are told, untimed (``cache_hit=True``, no
    timings)."""
    if not _pins_through_pruning:
        return
    knobs = _autotuning_knobs()
    listener = None if knobs is None else knobs.listener
    if listener is _listener:
        listener = _user_listener
    if listener is None:
        return
    fn = autotuner.fn
    while type(fn).__name__ != "JITFunction" and hasattr(getattr(fn, "fn", None), "fn"):
        fn = fn.fn
    listener(fn=fn, key=key, best_config=config, configs_timings={}, duration=None, cache_hit=True)


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


# --- configs, arch, tables ----------------------------------------------------------------------

def config_defaults() -> dict:
    """Triton's own defaults for the launch options a table entry may omit (read once, kept on
    the process state for the pinned decision, which does not import Triton)."""
    lasting = shared.now.lasting
    if lasting.config_defaults is None:
        import triton

        params = inspect.signature(triton.Config.__init__).parameters
        lasting.config_defaults = {n: params[n].default for n in selection.OPTION_FIELDS if n in params}
    return lasting.config_defaults


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def current_arch() -> str:
    """``sm90``, ``gfx942`` or ``interpret``; read at the first launch that needs it, so that
    installing never initializes CUDA.  With it, the Config defaults: both are what the pinned
    decision needs from Triton."""
    lasting = shared.now.lasting
    if lasting.arch is None:
        config_defaults()
        if _interpreting():
            lasting.arch = "interpret"
        else:
            from triton.runtime.driver import driver

            target = driver.active.get_current_target()
            if target.backend == "cuda":
                lasting.arch = f"sm{target.arch}"
            else:
                lasting.arch = str(target.arch).split(":")[0]
    return lasting.arch


def triton_autotuner_module():
    """``triton.runtime.autotuner`` if Triton has been imported, else None (never imports it)."""
    return sys.modules.get("triton.runtime.autotuner")


def active_policy() -> AutotunePolicy | None:
    return shared.now.policy
